"""Hung executors (alive, not progressing) with real processes: one stopped with SIGSTOP, so its
process runs on for the backend while it serves nothing, or a data executor whose reader wedged
while its heartbeat goes on; the master must notice, say so, kill it and replace it, and the job
still trains every row exactly once."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.data.service.options import COMMAND as SERVE_DATA
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.store import JobRecord
from airflow_provider_primus.resources.backend import Handle, LaunchRequest
from airflow_provider_primus.resources.local import LocalBackend
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


def incarnation(record: JobRecord, name: str) -> int | None:
    """The executor's incarnation, None before the master's first status lists it."""
    found: int | None = (record.status.get("executors") or {}).get(name, {}).get("incarnation")
    return found


WEDGED_READER = Path(__file__).with_name("wedged_reader.py")


class WedgingBackend(LocalBackend):
    """The local backend, except that data-0's first incarnation runs the real data executor under
    ``wedged_reader.py``: its reader stops asking for work after two leases, its heartbeat goes on."""

    def launch(self, request: LaunchRequest) -> Handle:
        if request.name == "data-0" and request.incarnation == 0:
            args = list(request.command)
            command = [sys.executable, str(WEDGED_READER), *args[args.index(SERVE_DATA) :]]
            request = dataclasses.replace(request, command=command)
        return super().launch(request)


def test_a_data_executor_that_asks_for_no_work_while_work_waits_is_hung_and_replaced(
    job_world: JobWorld,
) -> None:
    """Heartbeats alone do not make a data executor live: one that holds nothing and asks for
    nothing while work waits serves no one, and with one data executor the pass would never end."""
    submit(job_world.job(**hung_spec("data", 3)), store=job_world.store)
    factory = lambda m: WedgingBackend(m.paths.executors, on_event=m.backend_event)  # noqa: E731
    with running(job_world, backend_factory=factory):
        after = until(job_world, lambda r: incarnation(r, "data-0") == 1)
        record = until(job_world, ended)
    assert after.status["progress"]["acked_rows"] < job_world.rows  # replaced mid-pass
    assert record.status["phase"] == "Succeeded", record.status["message"]
    events = hung_events(job_world)
    assert len(events) == 1, [e.message for e in events]
    (hung,) = events
    assert hung.executor == "data-0"
    assert hung.message == "data-0 hung: asked for no work for 3 s while work waited; replacing it"
    assert hung.data["incarnation"] == 0 and hung.data["silent_s"] >= 3
    assert executor(record, "data-0")["incarnation"] == 1
    assert executor(record, "data-0")["restarts"] == 1
    assert_exactly_once(job_world)  # what it had leased and served went to its replacement once


def test_an_adopted_executor_has_the_masters_grace_to_find_its_successor() -> None:
    """A restarted master adopts running executors that must first learn its address (on a cluster,
    from a downward-API file the kubelet refreshes on its own period): until one shows life to this
    master it is hung only after ``data_service.master_grace_s`` (when longer than its timeout, as the
    executor itself waits that long); once it has, its role's timeout applies again."""
    from airflow_provider_primus.contracts.job import validate_job_spec
    from airflow_provider_primus.master.executors import Executor
    from airflow_provider_primus.master.liveness import Liveness
    from airflow_provider_primus.resources.backend import Allotment

    job = validate_job_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": "job"},
            "spec": {"data": "data.yaml", "data_service": {"master_grace_s": 90.0}},
        }
    )
    now = [1000.0]
    data = [Executor(Handle(f"data-{i}", "data", i, Allotment(1.0, 2**30))) for i in range(2)]
    trainer = Executor(Handle("trainer-0", "trainer", 0, Allotment(1.0, 2**30)))
    liveness = Liveness(job, adopted=[*data, trainer], clock=lambda: now[0])

    def hung_after(seconds: float, data_signs: dict[str, dict[str, float | int]]) -> set[str]:
        now[0] = 1000.0 + seconds
        return {h.executor.name for h in liveness.check([*data, trainer], data_signs, {}, work_waiting=True)}

    assert hung_after(45, {}) == set()  # past data's 30 s and nothing yet: still rejoining
    # data-1 finds this master at 50 s; from then on its own 30 s apply.
    joined = {"data-1.0": {"seen": 1050.0, "asked": 1050.0, "holds": 1}}
    assert hung_after(50, joined) == set()
    assert hung_after(85, joined) == {"data-1"}
    # data-0 never shows up: hung once the grace is over, as is the silent trainer (60 s < 90 s).
    assert hung_after(91, joined) == {"data-0", "data-1", "trainer-0"}
