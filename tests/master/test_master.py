"""The master with real executor processes: exact delivery through failures, scaling and restarts."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import psutil
import pytest

from airflow_provider_primus.contracts.status import TERMINAL, LaunchPayload, Phase
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import read_token, start_master, submit, wait_for
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord, modify
from airflow_provider_primus.resources.backend import BackendUnusableError, Observation
from airflow_provider_primus.resources.local import LocalBackend
from tests.master.conftest import JobWorld, write_world
from tests.training.conftest import T0

pytestmark = pytest.mark.timeout(240)

SLOW_DATA: dict[str, Any] = {
    # Small batches and a small read-ahead, so executors hold little when they are killed or removed.
    "data_service": {"batch_rows": 500, "window": 2},
    "roles": {
        "data": {"replicas": {"min": 1, "max": 3}, "resources": {"cpu": "500m", "memory": "1Gi"}},
        "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
    },
}


@contextmanager
def slowed(world: JobWorld, master: Master) -> Iterator[JobRecord]:
    """Hold the pass open: once the trainer has started, shrink it to a tenth of a core (an in-place
    resize) so the test acts mid-pass for certain; give the core back afterwards."""
    record = until(world, lambda r: (r.status.get("progress", {}).get("trainer_step") or 0) > 0)
    master.request({"resize": {"trainer-0": {"cpu": 0.1}}})
    try:
        yield until(world, lambda r: executor(r, "trainer-0")["handle"]["allotment"]["cpu"] == 0.1)
    finally:
        master.request({"resize": {"trainer-0": {"cpu": 1.0}}})
    del record


@contextmanager
def running(world: JobWorld, name: str = "job", *, join_s: float = 60.0, **master: Any) -> Iterator[Master]:
    """A master for the world's job in a thread (``master``: more Master arguments, a backend
    factory); stopped on the way out if the job has not ended."""
    m = Master(name, world.store, tick_s=0.2, **master)
    thread = threading.Thread(target=m.run, daemon=True)
    thread.start()
    try:
        yield m
    finally:
        if thread.is_alive():
            m.request({"stop": True})
        thread.join(timeout=join_s)


def until(world: JobWorld, predicate: Callable[[JobRecord], bool], timeout_s: float = 120) -> JobRecord:
    return wait_for(world.store, "job", predicate, timeout_s)


def ended(record: JobRecord) -> bool:
    return record.status.get("phase") in TERMINAL


def executor(record: JobRecord, name: str) -> dict[str, Any]:
    ex: dict[str, Any] = record.status["executors"][name]
    return ex


def event_types(world: JobWorld) -> list[str]:
    return [e.type for e in world.store.events("job")]


def assert_exactly_once(world: JobWorld) -> None:
    rows = world.trace_rows()
    assert len(rows) == world.rows, f"{len(rows)} rows trained, {world.rows} planned"
    assert sorted(rows) == list(range(world.rows))


def test_job_trains_every_row_once(job_world: JobWorld) -> None:
    submit(job_world.job(), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert record.status["progress"]["acked_rows"] == job_world.rows
    assert_exactly_once(job_world)
    types = event_types(job_world)
    assert types.count("ExecutorLaunched") == 2 and "Succeeded" in types


def test_a_quarantined_task_is_an_event_and_the_job_ends_saying_so(job_world: JobWorld) -> None:
    """Corrupted bytes in a page of one file, within the allowed share: the job succeeds, but its
    message says a task was quarantined and an event names the file, the rows not trained and the
    error (the page checksum's)."""
    import pyarrow.parquet as pq

    from tests.training.conftest import events

    t = T0 + timedelta(hours=2)
    path = job_world.root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H") / "part-0.parquet"
    pq.write_table(events(10_000, 5000, t, seed=2), path, row_group_size=1000, write_page_checksum=True)
    chunk = pq.ParquetFile(path).metadata.row_group(2).column(0)  # row_id of file rows 2000..3000
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    middle = (chunk.data_page_offset + end) // 2
    data = bytearray(path.read_bytes())
    for i in range(middle - 100, middle + 100):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))

    submit(job_world.job(data_service={"max_attempts": 2, "max_failed_share": 0.5}), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended)
    status = record.status
    assert status["phase"] == "Succeeded" and status["message"] == "Succeeded with 1 task quarantined"
    progress = status["progress"]
    assert progress["tasks_quarantined"] == 1
    [info] = progress["quarantine"]
    assert info["source"] == "history" and info["file"] == str(path)
    assert "CRC checksum" in info["error"]
    [event] = [e for e in job_world.store.events("job") if e.type == "TaskQuarantined"]
    assert {k: event.data[k] for k in ("source", "file", "rows", "error")} == {
        k: info[k] for k in ("source", "file", "rows", "error")
    }
    assert str(path) in event.message and "CRC checksum" in event.message
    [succeeded] = [e for e in job_world.store.events("job") if e.type == "Succeeded"]
    assert "1 task quarantined" in succeeded.message
    # Exactly the rows the quarantine reports are missing: a run of that file's rows that holds
    # the corrupted row group; everything else is trained once.
    trained = job_world.trace_rows()
    missing = sorted(set(range(job_world.rows)) - set(trained))
    assert len(trained) == len(set(trained)) == job_world.rows - info["rows_missing"]
    assert missing == list(range(missing[0], missing[0] + info["rows_missing"]))
    assert 10_000 <= missing[0] <= 12_000 and 13_000 <= missing[-1] + 1 <= 15_000


def test_killed_data_executor_is_restarted_and_its_tasks_re_leased(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master) as before:
            pid = executor(before, "data-0")["handle"]["ref"]["pid"]
            os.kill(pid, signal.SIGKILL)
            after = until(job_world, lambda r: executor(r, "data-0")["incarnation"] == 1)
            assert executor(after, "data-0")["handle"]["ref"]["pid"] != pid
            assert after.status["progress"]["acked_rows"] < job_world.rows  # killed mid-pass
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert executor(record, "data-0")["restarts"] == 1
    assert "ExecutorFailed" in event_types(job_world)
    assert_exactly_once(job_world)


def test_failover_exhausted_fails_the_job_with_the_reason(job_world: JobWorld) -> None:
    spec = {**SLOW_DATA, "roles": {**SLOW_DATA["roles"]}}
    spec["roles"]["data"] = {**spec["roles"]["data"], "failover": {"max_restarts": 0}}
    submit(job_world.job(**spec), store=job_world.store)
    with running(job_world) as master, slowed(job_world, master) as before:
        os.kill(executor(before, "data-0")["handle"]["ref"]["pid"], signal.SIGKILL)
        record = until(job_world, ended)
    assert record.status["phase"] == "Failed"
    assert "data-0 failed 1 times" in record.status["message"]
    assert "-9" in record.status["message"]


class _ApplicationEnded(LocalBackend):
    """The cluster's application ended under the running job (a YARN application killed from
    outside): from then on every observation says so, and so does every stop (after stopping the
    processes for real, so the test leaves nothing behind)."""

    ended = False

    def observe(self, *args: Any, **kwargs: Any) -> dict[str, Observation]:
        if type(self).ended:
            raise BackendUnusableError("application_1 ended (KILLED)")
        return super().observe(*args, **kwargs)

    def terminate(self, *args: Any, **kwargs: Any) -> None:
        super().terminate(*args, **kwargs)
        if type(self).ended:
            raise BackendUnusableError("application_1 ended (KILLED)")


def test_a_backend_that_cannot_go_on_fails_the_job_at_once_and_says_why(job_world: JobWorld) -> None:
    """Not retried like an API server away for a while (that takes minutes to fail a job): the first
    pass that hears it fails the job, and the final status is written though no executor can be
    stopped through the backend."""
    _ApplicationEnded.ended = False
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    factory = lambda m: _ApplicationEnded(m.paths.executors, on_event=m.backend_event)  # noqa: E731
    with running(job_world, backend_factory=factory) as master, slowed(job_world, master):
        _ApplicationEnded.ended = True
        record = until(job_world, ended)
    assert record.status["phase"] == "Failed"
    assert record.status["message"] == "the local backend cannot go on: application_1 ended (KILLED)"
    assert "ReconcileError" not in event_types(job_world)  # failed on the first pass that heard it


def test_scale_out_and_in_during_a_pass_delivers_exactly(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            master.request({"scale": {"data": 3}})
            record = until(
                job_world,
                lambda r: sum(e["state"] == "running" for e in r.status["executors"].values()) == 4,
            )
            acked = record.status["progress"]["acked_rows"]
            until(job_world, lambda r: r.status["progress"]["acked_rows"] > acked + 500)
            master.request({"scale": {"data": 1}})
            record = until(
                job_world,
                lambda r: [executor(r, f"data-{i}")["state"] for i in (1, 2)] == ["removed"] * 2,
            )
            assert record.status["progress"]["acked_rows"] < job_world.rows  # scaled in mid-pass
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    types = event_types(job_world)
    assert types.count("ScaleRequested") == 2 and "ExecutorRemoved" in types
    assert_exactly_once(job_world)


def test_restarted_master_re_adopts_its_executors(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    start_master("job")
    until(job_world, lambda r: (r.status.get("progress", {}).get("trainer_step") or 0) > 0)
    modify(
        job_world.store,
        "job",
        # as kubectl patch would write it: a quantity, not the API's number
        lambda r: {**r.desired, "resize": {"trainer-0": {"cpu": "100m"}}, "resize_gen": 1},
    )
    record = until(job_world, lambda r: executor(r, "trainer-0")["handle"]["allotment"]["cpu"] == 0.1)
    first_master = record.status["master"]["pid"]
    pids = {n: e["handle"]["ref"]["pid"] for n, e in record.status["executors"].items()}
    os.kill(first_master, signal.SIGKILL)
    psutil.Process(first_master).wait(10) if psutil.pid_exists(first_master) else None
    for pid in pids.values():  # executors outlive their master
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    launched_before = event_types(job_world).count("ExecutorLaunched")
    with running(job_world) as master:
        record = until(job_world, lambda r: r.status["master"]["pid"] == os.getpid())
        assert record.status["progress"]["acked_rows"] < job_world.rows  # re-adopted mid-pass
        master.request({"resize": {"trainer-0": {"cpu": 1.0}}})
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    types = event_types(job_world)
    assert types.count("ExecutorAdopted") == len(pids)
    assert types.count("ExecutorLaunched") == launched_before  # no duplicates
    assert {n: e["handle"]["ref"]["pid"] for n, e in record.status["executors"].items()} == pids
    assert_exactly_once(job_world)


def test_a_resize_the_master_cannot_read_is_refused_and_the_job_runs_on(job_world: JobWorld) -> None:
    """A request written into the job by hand is not checked by the API's model: a value the master
    cannot read is a ResizeRefused event naming it, not a reconcile pass failing until the job does."""
    submit(job_world.job(), store=job_world.store)
    with running(job_world):
        until(job_world, lambda r: (r.status.get("progress", {}).get("trainer_step") or 0) > 0)
        modify(
            job_world.store,
            "job",
            lambda r: {**r.desired, "resize": {"trainer-0": {"memory": "lots"}}, "resize_gen": 1},
        )
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    refused = [e for e in job_world.store.events("job") if e.type == "ResizeRefused"]
    assert refused and "trainer-0" in refused[0].message and "'lots'" in refused[0].message
    assert "Resized" not in event_types(job_world)
    assert_exactly_once(job_world)


def test_control_api_requires_the_job_token(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        url = master.api.url
        assert master.api.host == "127.0.0.1"
        assert httpx.get(f"{url}/v1/status").status_code == 401
        assert httpx.get(f"{url}/v1/status", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.post(f"{url}/v1/stop").status_code == 401
        good = {"Authorization": f"Bearer {read_token('job')}"}
        response = httpx.get(f"{url}/v1/status", headers=good)
        assert response.status_code == 200 and response.json()["phase"] in ("Pending", "Running")
        assert "data_progress" not in response.json()
        typed = ControlClient(url, read_token("job")).job_status()  # the one status model, over HTTP
        assert typed.phase in (Phase.PENDING, Phase.RUNNING) and typed.master is not None
        assert typed.master.api == url
        launched = [
            e for e in ControlClient(url, read_token("job")).job_events() if e.type == "ExecutorLaunched"
        ]
        assert launched and all(isinstance(e.payload(), LaunchPayload) for e in launched)
        assert httpx.post(f"{url}/v1/stop", headers=good).status_code == 200
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    for ex in record.status["executors"].values():
        assert (
            not psutil.pid_exists(ex["handle"]["ref"]["pid"])
            or psutil.Process(ex["handle"]["ref"]["pid"]).status() == psutil.STATUS_ZOMBIE
        )


def test_killed_trainer_resumes_from_its_checkpoint_exactly(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
            before = job_world.store.get("job")
            os.kill(executor(before, "trainer-0")["handle"]["ref"]["pid"], signal.SIGKILL)
            until(job_world, lambda r: executor(r, "trainer-0")["incarnation"] == 1)
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert executor(record, "trainer-0")["restarts"] == 1
    # Rows acknowledged after the last checkpoint were rewound and trained again by the new trainer.
    assert_exactly_once(job_world)


def test_appended_windows_join_a_running_job_once(job_world: JobWorld) -> None:
    write_world(job_world.root, hours=2, per_file=5000, first_hour=4)  # rows 20000..29999
    submit(job_world.job(follow=True), store=job_world.store)
    with running(job_world) as master:
        until(job_world, lambda r: r.status.get("progress", {}).get("acked_rows") == job_world.rows)
        assert job_world.store.get("job").status["phase"] == "Running"  # open: waits for windows
        window = {
            "start": (T0 + timedelta(hours=4)).isoformat(),
            "end": (T0 + timedelta(hours=6)).isoformat(),
        }
        master.request({"window": window})
        master.request({"window": window})  # a retried request: no second copy
        overlapping = {"start": (T0 + timedelta(hours=5)).isoformat(), "end": window["end"]}
        master.request({"window": overlapping})
        record = until(job_world, lambda r: r.status["progress"]["acked_rows"] == 30000)
        windows = record.status["windows"]
        assert [(w["state"], w["tasks"] > 0, w["new_tasks"]) for w in windows] == [
            ("appended", True, windows[0]["tasks"]),
            ("appended", True, 0),
        ]
        master.request({"stop": True})
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    rows = job_world.trace_rows()
    assert sorted(rows) == list(range(30000))


def test_savepoint_suspend_and_resume(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            master.request({"savepoint": "before-suspend"})
            record = until(
                job_world, lambda r: r.status["savepoints"].get("before-suspend", {}).get("state") == "done"
            )
            step = record.status["savepoints"]["before-suspend"]["step"]
            assert step > 0
            checkpoints = sorted((job_world.home / "jobs" / "job" / "train" / "checkpoints").iterdir())
            assert f"ckpt-{step:012d}.pt" in [p.name for p in checkpoints]
            master.request({"suspend": True})
            record = until(job_world, lambda r: r.status["phase"] == "Suspended")
            assert all(e["state"] != "running" for e in r_executors(record))
            assert record.status["progress"]["acked_rows"] < job_world.rows
        master.request({"suspend": False})
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    types = event_types(job_world)
    assert types.index("Suspended") < types.index("Resumed") < types.index("Succeeded")
    assert_exactly_once(job_world)


def r_executors(record: JobRecord) -> list[dict[str, Any]]:
    return list(record.status["executors"].values())


def savepoint_states(record: JobRecord, ids: list[str]) -> list[str]:
    return [record.status.get("savepoints", {}).get(i, {}).get("state", "absent") for i in ids]


def test_concurrent_savepoints_are_all_done_by_the_next_checkpoint(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master) as before:
            first_step = before.status["progress"]["trainer_step"]
            url, auth = master.api.url, {"Authorization": f"Bearer {read_token('job')}"}

            def ask(i: int) -> str:
                body = {"id": f"sp-{i}"} if i % 2 else {}  # half named by the caller, half by the API
                response = httpx.post(f"{url}/v1/savepoint", json=body, headers=auth, timeout=60)
                assert response.status_code == 200, response.text
                return str(response.json()["request"]["savepoint"])

            with ThreadPoolExecutor(max_workers=50) as pool:
                ids = list(pool.map(ask, range(200)))
            assert len(set(ids)) == 200
            record = until(job_world, lambda r: set(savepoint_states(r, ids)) == {"done"})
        final = until(job_world, ended)
    assert final.status["phase"] == "Succeeded", final.status["message"]
    savepoints = record.status["savepoints"]
    for sp in ids:
        step = savepoints[sp]["step"]
        assert step >= first_step  # a checkpoint taken after the request, never an older one
        assert savepoints[sp]["checkpoint"] == f"ckpt-{step:012d}.pt"
    checkpoints = {savepoints[sp]["checkpoint"] for sp in ids}
    assert len(checkpoints) < len(ids) // 4, checkpoints  # one checkpoint answers many requests
    acknowledged = [
        i for e in job_world.store.events("job") if e.type == "SavepointDone" for i in e.data["ids"]
    ]
    assert sorted(acknowledged) == sorted(ids)  # each one once
    assert "savepoints_done" not in final.status["progress"]["trainer_report"]
    assert_exactly_once(job_world)


def test_savepoints_reach_the_next_trainer_and_are_answered_when_the_job_stops(
    job_world: JobWorld,
) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            master.request({"suspend": True})
            until(job_world, lambda r: r.status["phase"] == "Suspended")
        # No trainer runs: the request waits for the next one, whichever incarnation it is.
        master.request({"savepoint": "while-suspended"})
        record = until(job_world, lambda r: "while-suspended" in r.status["savepoints"])
        assert record.status["savepoints"]["while-suspended"]["state"] == "requested"
        master.request({"suspend": False})
        record = until(job_world, lambda r: savepoint_states(r, ["while-suspended"]) == ["done"])
        assert executor(record, "trainer-0")["incarnation"] == 1
        master.request({"suspend": True})
        until(job_world, lambda r: r.status["phase"] == "Suspended")
        master.request({"savepoint": "never-covered"})
        until(job_world, lambda r: "never-covered" in r.status["savepoints"])
        master.request({"stop": True})
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    never = record.status["savepoints"]["never-covered"]
    assert never["state"] == "failed" and "Stopped" in never["reason"]
    assert record.status["savepoints"]["while-suspended"]["state"] == "done"


def test_the_final_status_holds_the_trainers_final_figures_and_answers_late_savepoints(
    job_world: JobWorld,
) -> None:
    submit(job_world.job(), store=job_world.store)
    asked: list[str] = []

    def on_status(status: dict[str, Any]) -> None:
        # Asked after the trainer has finished and the job has succeeded, before the master closes.
        if status["phase"] == "Succeeded" and not asked:
            asked.append("late")
            master.request({"savepoint": "late"})

    master = Master("job", job_world.store, tick_s=0.2, on_status=on_status)
    assert master.run() == "Succeeded"
    record = job_world.store.get("job")
    progress = record.status["progress"]
    steps = job_world.rows // 20  # batch_size 20
    assert (progress["trainer_step"], progress["trainer_rows"]) == (steps, job_world.rows)
    assert progress["trainer_report"]["final"] is True
    assert progress["trainer_metrics"]["steps"] == steps
    late = record.job_status.savepoints["late"]
    assert (late.state, late.step, late.checkpoint) == ("done", steps, f"ckpt-{steps:012d}.pt")
    checkpoints = job_world.home / "jobs" / "job" / "train" / "checkpoints"
    assert (checkpoints / f"ckpt-{steps:012d}.pt").exists()
