"""The master with real executor processes: exact delivery through failures, scaling and restarts."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import psutil
import pytest

from airflow_provider_primus.master.jobs import TERMINAL, read_token, start_master, submit, wait_for
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord, modify
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
def running(world: JobWorld, name: str = "job") -> Iterator[Master]:
    master = Master(name, world.store, tick_s=0.2)
    thread = threading.Thread(target=master.run, daemon=True)
    thread.start()
    try:
        yield master
    finally:
        if thread.is_alive():
            master.request({"stop": True})
        thread.join(timeout=60)


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
        lambda r: {**r.desired, "resize": {"trainer-0": {"cpu": 0.1}}, "resize_gen": 1},
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
