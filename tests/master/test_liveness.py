"""Hung executors (alive, not progressing) with real processes: each is stopped with SIGSTOP, so
its process runs on for the backend while it serves nothing; the master must notice, say so, kill
it and replace it, and the job still trains every row exactly once."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from airflow_provider_primus.master.jobs import submit
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended, executor, running, slowed, until

pytestmark = pytest.mark.timeout(300)


def hung_spec(role: str, hang_timeout_s: float) -> dict[str, Any]:
    """One data executor and one trainer, whole cores (a fractional core is throttled with
    SIGSTOP/SIGCONT by the local backend, which would wake the stopped process), small batches."""
    roles: dict[str, Any] = {
        "data": {"replicas": {"min": 1, "max": 1}, "resources": {"cpu": 1, "memory": "1Gi"}},
        "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
    }
    roles[role]["failover"] = {"hang_timeout_s": hang_timeout_s}
    return {"data_service": {"batch_rows": 500, "window": 2}, "roles": roles}


def hung_events(world: JobWorld) -> list[Any]:
    return [e for e in world.store.events("job") if e.type == "ExecutorHung"]


def test_a_stopped_only_data_executor_is_declared_hung_and_replaced(job_world: JobWorld) -> None:
    submit(job_world.job(**hung_spec("data", 5)), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master) as before:
            assert before.status["progress"]["acked_rows"] < job_world.rows  # mid-pass
            pid = executor(before, "data-0")["handle"]["ref"]["pid"]
            os.kill(pid, signal.SIGSTOP)  # alive for the backend, serving nothing
            after = until(job_world, lambda r: executor(r, "data-0")["incarnation"] == 1)
            assert executor(after, "data-0")["handle"]["ref"]["pid"] != pid
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    (hung,) = hung_events(job_world)
    assert hung.executor == "data-0"
    assert hung.message == "data-0 hung: no heartbeat for 5 s; replacing it"
    assert hung.data["incarnation"] == 0 and hung.data["silent_s"] >= 5
    assert executor(record, "data-0")["restarts"] == 1
    with pytest.raises(ProcessLookupError):  # killed (SIGKILL ends a stopped process), and reaped
        os.kill(pid, 0)
    assert_exactly_once(job_world)  # 0 lost, 0 duplicated


def test_a_stopped_trainer_is_declared_hung_and_resumes_from_its_checkpoint(job_world: JobWorld) -> None:
    submit(job_world.job(**hung_spec("trainer", 10)), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
        before = until(job_world, lambda r: executor(r, "trainer-0")["handle"]["allotment"]["cpu"] == 1.0)
        assert not ended(before)
        pid = executor(before, "trainer-0")["handle"]["ref"]["pid"]
        os.kill(pid, signal.SIGSTOP)
        until(job_world, lambda r: executor(r, "trainer-0")["incarnation"] == 1)
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    events = hung_events(job_world)
    assert len(events) == 1, [e.message for e in events]
    (hung,) = events
    assert hung.executor == "trainer-0"
    assert hung.message == "trainer-0 hung: no report for 10 s; replacing it"
    assert executor(record, "trainer-0")["restarts"] == 1
    assert_exactly_once(job_world)  # rows after its checkpoint were rewound and trained once
