"""The Primus jobs pages against a real job store, behind Airflow's real authentication."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_provider_primus.contracts.status import JobStatus
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.master.history import point_from_status
from airflow_provider_primus.master.store import SqliteJobStore, modify
from airflow_provider_primus.plugins.app import create_app
from airflow_provider_primus.plugins.charts import Series, line_chart, nice_ticks, timeline
from airflow_provider_primus.plugins.history import History, Sampler
from airflow_provider_primus.plugins.scaling import allotment_series
from airflow_provider_primus.plugins.status import BASELINE_LABEL
from airflow_provider_primus.plugins.views import data_rows, window_label
from tests.kube_env import KubeEnv

pytestmark = pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")

GiB = 2**30
XSS = "<script>alert(1)</script>"
HISTORY_TASKS = [f"history-{i:016x}" for i in range(24)]
DAY3_TASKS = [f"history-{i + 100:016x}" for i in range(24)]


def _executor(
    name: str, cpu: float, memory: int, pid: int, *, state: str = "running", **extra: Any
) -> dict[str, Any]:
    role, index = name.rsplit("-", 1)
    return {
        "handle": {
            "name": name,
            "role": role,
            "index": int(index),
            "allotment": {"cpu": cpu, "memory": memory},
            "ref": {"pid": pid, "start_time": 1.7e9, "cores": [0, 1], "log": f"/x/{name}.log"},
        },
        "incarnation": extra.pop("incarnation", 0),
        "restarts": extra.pop("restarts", 0),
        "state": state,
        "exit_code": extra.pop("exit_code", None),
        "reason": extra.pop("reason", None),
        **extra,
    }


def usage(cpu_util: float, rss: int, mem_util: float, rows_per_s: float) -> dict[str, Any]:
    """An executor's telemetry as the master writes it (master/telemetry.py's ``usage``)."""
    return {
        "cpu_util": cpu_util,
        "rss": rss,
        "mem_util": mem_util,
        "rows_per_s": rows_per_s,
        "read_bytes": 4096,
        "write_bytes": 0,
        "wait_s": 0.25,
        "busy_s": 1.5,
    }


def launched(cpu: float, mib: int, **ref: Any) -> dict[str, Any]:
    """An ExecutorLaunched payload as the master writes it (contracts/status.py's LaunchPayload)."""
    return {**ref, "cpu": cpu, "memory": mib * 2**20}


def realistic_status(updated: float) -> dict[str, Any]:
    """A running job's status as the master writes it (docs/contracts.md, `status`)."""
    metrics = {
        "mode": "mixed",
        "steps": 9876,
        "rows_trained": {"history": 900_000, "events": 300_000},
        "rows_scored": 300_000,
        "progressive": {"auc": 0.7712, "logloss": 0.51, "window_auc": 0.7815, "window_logloss": 0.5},
        "freshness_s": {"p50": 1.8, "p99": 6.4},
        "dead_lettered": 0,
        "deferred": {},
        "guard_steps": 0,
        "watermark": "2026-11-03T10:00:00+00:00",
        "elapsed_s": 100.0,
        "samples_per_s": 12000.0,
    }
    return {
        "phase": "Running",
        "message": "",
        "suspended": False,
        "master": {
            "pid": 4242,
            "pid_created": 1.7e9,
            "api": "http://127.0.0.1:40123",
            "api_port": 40123,
            "dispatcher": "grpc+tcp://127.0.0.1:40124",
            "dispatcher_port": 40124,
        },
        "replicas": {"data": 2, "trainer": 1},
        "executors": {
            "data-0": _executor(
                "data-0",
                1.0,
                GiB,
                5001,
                telemetry=usage(0.87, 384 * 2**20, 0.375, 51234.5),
            ),
            "data-1": _executor(
                "data-1",
                1.5,
                GiB,
                5002,
                incarnation=1,
                restarts=1,
                exit_code=-9,
                reason="memory limit: rss 973 MiB reached 95% of 1024 MiB",
                telemetry=usage(0.41, 512 * 2**20, 0.5, 20000.0),
            ),
            "data-2": _executor("data-2", 1.0, GiB, 5004, state="removed", reason="terminated"),
            "trainer-0": _executor(
                "trainer-0",
                2.5,
                4 * GiB,
                5003,
                telemetry=usage(0.93, 2 * GiB, 0.5, 98000.0),
            ),
        },
        "progress": {
            "tasks": 48,
            "tasks_done": 30,
            "tasks_quarantined": 0,
            "acked_rows": 1_234_567,
            "sources": ["history"],
            "data_finished": False,
            "trainer_step": 9876,
            "trainer_rows": 1_200_000,
            "trainer_metrics": metrics,
            "trainer_report": {"step": 9876, "rows": 1_200_000, "metrics": metrics},
        },
        "windows": [
            {
                "start": "2026-11-03T00:00:00+00:00",
                "end": "2026-11-04T00:00:00+00:00",
                "state": "appended",
                "tasks": 24,
                "new_tasks": 24,
                "rows": 2_400_000,
                "task_ids": DAY3_TASKS,
                "sources": ["history"],
                "tasks_done": 6,
                "consumed": False,
            },
            {
                "start": "2026-11-05T00:00:00+00:00",
                "end": "2026-11-06T00:00:00+00:00",
                "state": "refused",
                "reason": "the job's data service has finished its pass",
            },
        ],
        "savepoints": {"before-deploy": {"state": "done", "step": 9000}},
        "decisions": [
            {
                "t": 1234.5,
                "action": "scale_out",
                "role": "data",
                "executor": None,
                "before": 1,
                "after": 2,
                "reason": "trainer starving",
                "signals": {"starvation": 0.41, "data_cpu": 0.93},
            }
        ],
        "applied": {"scale_gen": 0, "resize_gen": 0},
        "events": [],
        "data_progress": {t: [[0, 50_000]] for t in HISTORY_TASKS[:3] + DAY3_TASKS[:1]},
        "updated": updated,
    }


def add_events(store: SqliteJobStore, job: str) -> None:
    store.add_event(job, "Submitted", "job submitted")
    store.add_event(
        job,
        "ExecutorLaunched",
        "data-0 (incarnation 0): 1 CPU, 1024 MiB",
        "data-0",
        launched(1, 1024, pid=5001),
    )
    store.add_event(
        job, "ExecutorLaunched", "trainer-0 (incarnation 0): 2 CPU, 4096 MiB", "trainer-0", launched(2, 4096)
    )
    store.add_event(
        job,
        "ScaleDecision",
        "scale out data 1 -> 2: trainers starve 41% while data executors use 93% CPU",
        None,
        {
            "t": 12.0,
            "action": "scale_out",
            "role": "data",
            "executor": None,
            "before": 1,
            "after": 2,
            "reason": "scale out",
            "signals": {"starvation": 0.41, "data_cpu": 0.93},
        },
    )
    store.add_event(
        job, "ExecutorLaunched", "data-1 (incarnation 0): 1 CPU, 1024 MiB", "data-1", launched(1, 1024)
    )
    store.add_event(
        job,
        "ScaleDecision",
        "raise trainer-0 cpu 2 -> 2.5",
        "trainer-0",
        {"action": "resize_cpu", "role": "trainer", "executor": "trainer-0", "before": 2.0, "after": 2.5},
    )
    store.add_event(job, "ExecutorFailed", "data-1 failed (memory limit); restarting", "data-1")
    store.add_event(
        job, "ExecutorLaunched", "data-1 (incarnation 1): 1 CPU, 1024 MiB", "data-1", launched(1, 1024)
    )
    store.add_event(
        job,
        "Resized",
        "data-1: cpu 1 -> 1.5, memory 1024 -> 1024 MiB",
        "data-1",
        {"manual": True, "cpu": 1.5, "memory": 1024 * 2**20},
    )
    store.add_event(job, "ScaleRequested", "data: 2 -> 3 replicas", None, {"manual": True})
    store.add_event(
        job, "ExecutorLaunched", "data-2 (incarnation 0): 1 CPU, 1024 MiB", "data-2", launched(1, 1024)
    )
    store.add_event(job, "ExecutorRemoved", f"data-2 stopped {XSS}", "data-2")
    store.add_event(job, "WindowAppended", "window 2026-11-03..2026-11-04: 24 tasks (24 new)")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "primus" / "jobs.sqlite"


@pytest.fixture
def store(store_path: Path) -> SqliteJobStore:
    store = SqliteJobStore(store_path)
    store.create("movielens", {"kind": "PrimusJob"}, {"team": "ads", "dag": "train_daily"})
    modify(store, "movielens", lambda _r: realistic_status(time.time()), part="status")
    add_events(store, "movielens")
    store.create("pending-job", {"kind": "PrimusJob"}, {"owner": XSS})
    return store


@pytest.fixture
def app(store: SqliteJobStore, store_path: Path) -> FastAPI:
    return create_app(store_path, sample_s=None)


@pytest.fixture
def client(app: FastAPI, viewer_token: str) -> Iterator[TestClient]:
    with TestClient(app, headers={"Authorization": f"Bearer {viewer_token}"}) as c:
        yield c


# --- pages ------------------------------------------------------------------------------------------


def test_the_list_shows_every_job_with_a_link_to_its_page(client: TestClient) -> None:
    r = client.get("/jobs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert '<a href="/jobs/movielens">movielens</a>' in page
    assert '<a href="/jobs/pending-job">pending-job</a>' in page
    assert "phase-Running" in page and ">Pending<" in page
    assert "team=ads" in page and "dag=train_daily" in page
    assert '<td class="num" title="data: 2, trainer: 1">3</td>' in page  # running executors
    assert "1,234,567" in page and "9,876" in page  # acked rows, trainer step
    assert "s ago" in page and "never" in page  # last update; the pending job has none
    assert 'http-equiv="refresh"' in page  # jobs are running: the list refreshes itself


def test_the_job_page_shows_executors_scaling_data_and_training(client: TestClient) -> None:
    r = client.get("/jobs/movielens")
    assert r.status_code == 200
    page = r.text
    # header
    assert "http://127.0.0.1:40123" in page and "4242" in page and "data: 2, trainer: 1" in page
    assert "before-deploy: done @ step 9000" in page
    # executors: pid, CPU and memory allotted, utilisation, RSS/limit, rows/s, restarts, last exit
    assert "<td>trainer-0</td><td>trainer</td><td>running</td><td class='num'>5003</td>" in page
    assert "<td class='num'>2.5</td><td class='num'>4.0 GiB</td>" in page
    assert "93%" in page and "2.0 GiB / 4.0 GiB (50%)" in page and "98,000" in page
    assert "384 MiB / 1.0 GiB (38%)" in page and "51,234.5" in page
    assert "memory limit: rss 973 MiB reached 95% of 1024 MiB (exit -9)" in page
    assert "<td>data-2</td><td>data</td><td>removed</td>" in page
    # scaling: timeline, allotment and replica charts, and the event list with decision signals
    assert 'aria-label="Scaling events"' in page
    assert 'aria-label="CPU allotted per executor (cores)"' in page
    assert 'aria-label="Running executors per role"' in page
    assert 'aria-label="Memory allotted per executor (GiB)"' in page
    assert "scale out data 1 -&gt; 2: trainers starve 41%" in page
    assert "scale_out: 1 → 2; data_cpu=0.93 starvation=0.41" in page
    assert "data: 2 -&gt; 3 replicas" in page and "data-1 failed (memory limit); restarting" in page
    assert "Submitted" not in page.split("<h2>Scaling</h2>")[1].split("<h2>Data progress</h2>")[0]
    # data progress: the data document's window (derived) and the appended days
    data = page.split("<h2>Data progress</h2>")[1].split("<h2>Training</h2>")[0]
    assert "<td>the data document&#x27;s window</td><td>history</td><td>initial</td>" in data
    assert '<td>2026-11-03</td><td>history</td><td>appended</td><td class="num">24</td>' in data
    assert "6</td><td>no</td><td class='num'>2,400,000</td>" in data
    assert "refused: the job&#x27;s data service has finished its pass" in data
    assert "30 of 48 tasks done, 0 quarantined, 1,234,567 rows acknowledged" in data
    # training: latest metrics as numbers, and the charts over the statuses seen
    training = page.split("<h2>Training</h2>")[1]
    for text in ("0.781", "0.771", "12,000", "1.8 / 6.4", "2026-11-03T10:00:00+00:00", "9,876"):
        assert text in training
    for chart in ("AUC (progressive validation)", "Throughput (rows/s)", "Stream freshness (s)"):
        assert f'aria-label="{chart}"' in training
    assert "1 point so far" in training


def test_the_job_page_lists_quarantined_tasks_with_file_rows_and_error(
    client: TestClient, store: SqliteJobStore
) -> None:
    assert "Quarantined tasks" not in client.get("/jobs/movielens").text  # none: no table

    def quarantined(record: Any) -> dict[str, Any]:
        status = copy.deepcopy(record.status)
        status["phase"], status["message"] = "Succeeded", "Succeeded with 1 task quarantined"
        status["progress"]["tasks_quarantined"] = 1
        status["progress"]["rows_without_label"] = 172
        status["progress"]["quarantine"] = [
            {
                "task": "history-0123456789abcdef",
                "source": "history",
                "file": f"/lake/2026-11-02/part-0.parquet{XSS}",
                "files": ["/lake/2026-11-02/part-0.parquet"],
                "rows": [2000, 4000],
                "rows_missing": 2000,
                "error": "CorruptFileError: cannot read /lake/2026-11-02/part-0.parquet: CRC checksum",
            }
        ]
        return status

    modify(store, "movielens", quarantined, part="status")
    page = client.get("/jobs/movielens").text
    assert "Succeeded with 1 task quarantined" in page
    data = page.split("<h2>Data progress</h2>")[1].split("<h2>Training</h2>")[0]
    assert "30 of 48 tasks done, 1 quarantined" in data and "172 rows left out for having no label" in data
    table = data.split("<h3>Quarantined tasks</h3>")[1]
    assert "<code>history-0123456789abcdef</code></td><td>history</td>" in table
    assert "<td class='num'>2000..4000</td><td class='num'>2,000</td>" in table
    assert "CorruptFileError: cannot read /lake/2026-11-02/part-0.parquet: CRC checksum" in table
    assert XSS not in page  # the file name is escaped like everything else


def test_the_charts_grow_with_each_new_status(client: TestClient, store: SqliteJobStore) -> None:
    client.get("/jobs/movielens")
    assert "1 point so far" in client.get("/jobs/movielens").text  # same status: no new point

    def later(record: Any) -> dict[str, Any]:
        status = copy.deepcopy(record.status)
        status["updated"] += 5
        status["progress"]["acked_rows"] += 500_000
        status["progress"]["trainer_metrics"]["samples_per_s"] = 15000.0
        status["progress"]["trainer_metrics"]["progressive"]["window_auc"] = 0.79
        return status

    modify(store, "movielens", later, part="status")
    page = client.get("/jobs/movielens").text
    assert "2 points so far" in page
    assert "acked rows/s: 100k" in page  # 500,000 rows in 5 s, derived from successive statuses
    assert "window AUC: 0.79 at" in page
    assert '<svg class="spark"' in page and "<polyline" in page  # samples/s sparkline


def test_the_json_status_is_the_stored_one_without_data_progress(
    client: TestClient, store: SqliteJobStore
) -> None:
    r = client.get("/api/jobs/movielens")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    stored = store.get("movielens").status
    assert "data_progress" in stored
    assert r.json() == {k: v for k, v in stored.items() if k != "data_progress"}

    listing = client.get("/api/jobs").json()
    assert [j["name"] for j in listing] == ["movielens", "pending-job"]
    movielens = listing[0]
    assert movielens["phase"] == "Running" and movielens["labels"] == {"team": "ads", "dag": "train_daily"}
    assert (movielens["executors_running"], movielens["acked_rows"], movielens["trainer_step"]) == (
        3,
        1_234_567,
        9876,
    )
    assert listing[1]["phase"] == "Pending" and listing[1]["updated"] is None


def test_everything_from_the_store_is_escaped(client: TestClient, store: SqliteJobStore) -> None:
    def hostile(record: Any) -> dict[str, Any]:
        status = realistic_status(time.time())
        status["message"] = f"failed: {XSS}"
        status["executors"]["data-0"]["reason"] = XSS
        status["progress"]["trainer_metrics"]["watermark"] = XSS
        return status

    modify(store, "movielens", hostile, part="status")
    for path in ("/jobs", "/jobs/movielens", "/jobs/pending-job"):
        page = client.get(path).text
        assert "<script>" not in page, path
    listing = client.get("/jobs").text
    assert "owner=&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    job = client.get("/jobs/movielens").text
    assert "failed: &lt;script&gt;alert(1)&lt;/script&gt;" in job
    assert "data-2 stopped &lt;script&gt;" in job  # an event message, in the list and the tooltips


def test_an_unknown_job_is_404_in_html_and_json(client: TestClient) -> None:
    r = client.get("/jobs/nope")
    assert r.status_code == 404 and "no job named &#x27;nope&#x27;" in r.text
    r = client.get("/api/jobs/nope")
    assert r.status_code == 404 and r.json() == {"detail": "no job named 'nope'"}


def test_a_missing_store_is_reported_not_created(tmp_path: Path, viewer_token: str) -> None:
    path = tmp_path / "nowhere" / "jobs.sqlite"
    with TestClient(
        create_app(path, sample_s=None), headers={"Authorization": f"Bearer {viewer_token}"}
    ) as c:
        assert "No job store at" in c.get("/jobs").text
        assert c.get("/api/jobs").json() == []
        assert c.get("/api/jobs/x").status_code == 404
    assert not path.parent.exists()


def test_the_store_defaults_to_primus_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, viewer_token: str
) -> None:
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path))
    SqliteJobStore(tmp_path / "jobs.sqlite").create("from-home", {"kind": "PrimusJob"})
    with TestClient(create_app(sample_s=None), headers={"Authorization": f"Bearer {viewer_token}"}) as c:
        assert [j["name"] for j in c.get("/api/jobs").json()] == ["from-home"]


# --- authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/jobs", "/jobs/movielens", "/api/jobs", "/api/jobs/movielens"])
def test_requests_without_an_airflow_token_are_refused(app: FastAPI, path: str) -> None:
    with TestClient(app) as anonymous:
        r = anonymous.get(path, follow_redirects=False)
    if path.startswith("/api/"):
        assert (r.status_code, r.json()) == (401, {"detail": "Not authenticated"})
    else:  # a browser goes to Airflow's login page and comes back
        assert r.status_code == 303
        assert r.headers["location"].startswith("/auth/login?next=")
        assert "movielens" not in r.text


def test_the_login_redirect_returns_to_the_mounted_path(app: FastAPI) -> None:
    outer = FastAPI()
    outer.mount("/primus", app)
    with TestClient(outer) as anonymous:
        r = anonymous.get("/primus/jobs/movielens", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/auth/login?next=%2Fprimus%2Fjobs%2Fmovielens")


def test_bad_expired_or_unauthorized_tokens_are_refused(app: FastAPI, mint: Callable[..., str]) -> None:
    good = mint()
    tampered = good[:-6] + ("AAAAAA" if not good.endswith("AAAAAA") else "BBBBBB")
    cases = {  # token: (API status, page status)
        tampered: (403, 403),  # Airflow: "Invalid JWT token"
        mint(expires_in=-3600): (401, 303),  # "Token Expired": a browser logs in again
        mint(role=None, username="nobody"): (403, 403),  # authenticated, but may not see the UI
        "not-a-jwt": (403, 403),
    }
    with TestClient(app) as c:
        for token, codes in cases.items():
            for path, code in zip(("/api/jobs", "/jobs/movielens"), codes, strict=True):
                r = c.get(path, headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)
                assert r.status_code == code, (path, token[:20], r.text[:200])
                assert "1,234,567" not in r.text and "1234567" not in r.text


def test_the_airflow_ui_cookie_is_accepted(app: FastAPI, viewer_token: str) -> None:
    with TestClient(app, cookies={"_token": viewer_token}) as browser:
        r = browser.get("/jobs/movielens")
    assert r.status_code == 200 and "1,234,567" in r.text


# --- history, charts and derived tables ---------------------------------------------------------------


def test_the_sampler_records_jobs_that_have_not_ended(store: SqliteJobStore, store_path: Path) -> None:
    store.create("finished", {"kind": "PrimusJob"})
    modify(store, "finished", lambda _r: {"phase": "Succeeded", "updated": time.time()}, part="status")
    history = History()
    sampler = Sampler(history, lambda: SqliteJobStore(store_path), interval_s=0.05)
    sampler.ensure_started()
    try:
        deadline = time.monotonic() + 5
        while len(history.jobs()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sampler.stop()
    assert sorted(history.jobs()) == ["movielens", "pending-job"]  # not the finished one
    assert history.observe(store.get("movielens"))[0].window_auc == 0.7815


def test_a_status_reduces_to_a_point() -> None:
    p = point_from_status(JobStatus.read(realistic_status(100.0)))
    assert p is not None
    assert (p.t, p.acked_rows, p.samples_per_s, p.auc, p.freshness_p99) == (
        100.0,
        1_234_567,
        12000,
        0.7712,
        6.4,
    )
    assert set(p.executors) == {"data-0", "data-1", "trainer-0"}  # running ones only
    assert point_from_status(JobStatus()) is None


def test_allotments_are_replayed_from_the_event_log(store: SqliteJobStore) -> None:
    record = store.get("movielens")
    allotted = allotment_series(store.events("movielens"), record.job_status)
    cpu = {s.label: [v for _, v in s.points] for s in allotted.cpu}
    assert cpu["trainer-0"] == [2.0, 2.5, 2.5]  # launched, autoscaled, now
    assert cpu["data-1"] == [1.0, 0.0, 1.0, 1.5, 1.5]  # launched, failed, relaunched, resized, now
    assert cpu["data-2"] == [1.0, 0.0, 0.0]
    memory = {s.label: [v for _, v in s.points] for s in allotted.memory}
    assert memory["trainer-0"] == [4.0, 4.0, 4.0] and memory["data-0"] == [1.0, 1.0]
    data, trainer = allotted.running
    assert data.label == "data executors" and trainer.label == "trainer executors"
    assert [v for _, v in data.points] == [1, 2, 1, 2, 3, 2, 2]  # data executors over time
    assert [v for _, v in trainer.points] == [1, 1]


def test_the_data_document_window_is_derived_from_the_totals() -> None:
    rows = data_rows(JobStatus.read(realistic_status(0.0)))
    initial, day3, refused = rows
    assert (initial.tasks, initial.tasks_done, initial.consumed, initial.sources) == (24, 24, True, "history")
    assert (day3.label, day3.tasks, day3.tasks_done, day3.consumed) == ("2026-11-03", 24, 6, False)
    assert refused.state == "refused" and refused.tasks is None
    assert data_rows(JobStatus())[0].tasks == 0  # a job without a status still renders
    assert window_label("2026-11-01T00:00:00+00:00", "2026-11-03T00:00:00+00:00") == "2026-11-01 → 2026-11-02"
    assert (
        window_label("2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z")
        == "2026-11-01T05:00:00Z → 2026-11-01T06:00:00Z"
    )


def test_charts_escape_labels_and_handle_empty_and_single_points() -> None:
    svg = line_chart([Series(XSS, [(0.0, 1.0), (10.0, 2.0)])], title=f"t {XSS}")
    assert svg.startswith("<svg") and "<script>" not in svg and "&lt;script&gt;" in svg
    assert "no data yet" in line_chart([Series("a", [])], title="x")
    one = line_chart([Series("a", [(5.0, 3.0)])], title="x", step=True)
    assert "<path" in one and "<circle" in one
    assert "no scaling events yet" in timeline([], ["ScaleDecision"], title="x")
    assert nice_ticks(0, 1) == [0, 0.25, 0.5, 0.75, 1.0]


def test_the_app_shows_jobs_of_a_kubernetes_namespace(kube: KubeEnv, viewer_token: str) -> None:
    """With ``backend: kubernetes`` the pages read the PrimusJob resources (status, Events)."""
    store = KubeJobStore(kube.api(), kube.namespace)
    doc = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "metadata": {"name": "on-k8s"}}
    store.create(
        "on-k8s", {**doc, "spec": {"data": "/d.yaml", "backend": {"type": "kubernetes"}}}, {"team": "ads"}
    )
    modify(store, "on-k8s", lambda _r: realistic_status(time.time()), part="status")
    store.add_event("on-k8s", "ExecutorLaunched", "data-0 launched", "data-0")
    with TestClient(
        create_app(store=store, sample_s=None), headers={"Authorization": f"Bearer {viewer_token}"}
    ) as c:
        (summary,) = c.get("/api/jobs").json()
        assert (summary["name"], summary["phase"], summary["labels"]) == (
            "on-k8s",
            "Running",
            {"team": "ads"},
        )
        page = c.get("/jobs/on-k8s")
        assert page.status_code == 200 and "data-0 launched" in page.text


def test_windows_are_listed_in_time_order_whatever_the_append_order() -> None:
    status = realistic_status(0.0)
    day = {"state": "appended", "sources": ["history"], "tasks": 1, "new_tasks": 1, "tasks_done": 1}
    status["windows"] = [
        {**day, "start": f"2026-11-0{d}T00:00:00+00:00", "end": f"2026-11-0{d + 1}T00:00:00+00:00"}
        for d in (3, 1, 2)
    ] + [{"state": "refused", "start": "not a time", "end": "either"}]
    labels = [r.label for r in data_rows(JobStatus.read(status)) if r.state != "initial"]
    assert labels == ["2026-11-01", "2026-11-02", "2026-11-03", "not a time → either"]


def test_the_job_page_compares_the_stream_auc_with_a_baseline(
    client: TestClient, store: SqliteJobStore
) -> None:
    assert "Compared with its baseline" not in client.get("/jobs/movielens").text
    store.create("movielens-batch", {"kind": "PrimusJob"}, {BASELINE_LABEL: "movielens"})
    baseline = realistic_status(time.time())
    metrics = baseline["progress"]["trainer_metrics"]
    metrics["mode"] = "batch"
    metrics["progressive"] = {**metrics["progressive"], "auc": 0.7012, "window_auc": 0.6815}
    modify(store, "movielens-batch", lambda _r: baseline, part="status")
    page = client.get("/jobs/movielens").text
    section = page.split("<h2>Compared with its baseline</h2>")[1].split("<h2>Executors</h2>")[0]
    assert "Stream AUC of this job (mixed): window 0.781, progressive 0.771" in section
    assert '<a href="/jobs/movielens-batch">movielens-batch</a> (batch)' in section
    assert "0.681</td><td class='num'><b>+0.100</b>" in section  # window AUC, and the advantage
    assert "0.701</td><td class='num'><b>+0.070</b>" in section  # progressive AUC
    assert 'aria-label="Window AUC on the stream"' in section
    # The baseline's own page has no baseline of its own.
    assert "Compared with its baseline" not in client.get("/jobs/movielens-batch").text


def test_a_restarted_api_server_draws_the_history_the_master_kept(
    store: SqliteJobStore, store_path: Path, viewer_token: str
) -> None:
    from airflow_provider_primus.master.history import StatusHistory

    kept = StatusHistory(every_s=1.0)
    now = store.get("movielens").status["updated"]
    for i, t in enumerate((now - 30, now - 20, now - 10)):
        kept.add(JobStatus.read({"progress": {"acked_rows": 1000 * i}}), now=t)
    modify(store, "movielens", lambda r: {**r.status, "history": kept.to_list()}, part="status")
    for _ in range(2):  # a fresh app each time: nothing in its memory, the same history drawn
        fresh = create_app(store_path, sample_s=None)
        with TestClient(fresh, headers={"Authorization": f"Bearer {viewer_token}"}) as c:
            assert "4 points so far" in c.get("/jobs/movielens").text  # 3 kept + the status now


def test_the_job_page_says_when_the_status_is_stale_and_why(
    client: TestClient, store: SqliteJobStore
) -> None:
    from airflow_provider_primus.master.store_health import StoreHealth

    assert "status is stale" not in client.get("/jobs/movielens").text
    health = StoreHealth(store, "movielens")  # what the master writes while its passes fail
    health.failed(OSError(f"disk I/O error {XSS}"))
    page = client.get("/jobs/movielens").text
    banner = page.split("<p class='stale' role='alert'>")[1].split("</p>")[0]
    assert "status is stale since " in banner and "because the master cannot record it" in banner
    assert "disk I/O error" in banner and XSS not in page
    assert client.get("/api/jobs/movielens").json()["stale"].startswith("status is stale since ")
    assert health.recovered() is not None
    assert "status is stale" not in client.get("/jobs/movielens").text
    assert "stale" not in client.get("/api/jobs/movielens").json()


def test_a_partly_invalid_status_renders_what_fits(caplog: pytest.LogCaptureFixture) -> None:
    """One executor's telemetry in a shape this version does not read, a window from a newer master:
    the page shows everything else, and the web server's log names what it left out (by its place in
    the status, not its value)."""
    from airflow_provider_primus.master.store import JobRecord
    from airflow_provider_primus.plugins.views import job_page

    status = realistic_status(100.0)
    status["executors"]["data-0"]["telemetry"] = {"cpu": XSS}
    status["windows"][1]["state"] = "postponed"
    record = JobRecord("partly", 1, {"kind": "PrimusJob"}, status=status, created=1.0)
    with caplog.at_level("WARNING", logger="airflow_provider_primus.plugins.status"):
        page = job_page(record, [], [], base="", now=110.0)
    executors = page.split("<h2>Executors</h2>")[1].split("<h2>Scaling</h2>")[0]
    assert "<td>data-0</td><td>data</td><td>running</td><td class='num'>5001</td>" in executors
    assert "— / 1.0 GiB (—)" in executors  # data-0: no usage shown
    assert "2.0 GiB / 4.0 GiB (50%)" in executors and "98,000" in executors  # trainer-0: all of it
    data = page.split("<h2>Data progress</h2>")[1]
    assert "2026-11-03" in data and "postponed" not in data and "2026-11-05" not in data
    assert "30 of 48 tasks done" in data and "http://127.0.0.1:40123" in page
    (message,) = [r.getMessage() for r in caplog.records]
    assert "executors.data-0.telemetry" in message and "windows.1" in message
    assert "script" not in message  # the values stay out of the log
