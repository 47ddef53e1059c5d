"""PrimusJobTrigger: serialization, its events from run(), re-entry and on_kill, on a real store; moved
versus cancelled in the triggerer's own run loop, against a real job and the real metadata DB."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.master.store import modify
from airflow_provider_primus.operators.job import PrimusStreamingTrainerOperator
from airflow_provider_primus.triggers.job import PrimusJobTrigger
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, running, until

pytestmark = pytest.mark.timeout(240)
WINDOW = {"start": "2026-05-01T04:00:00+00:00", "end": "2026-05-01T06:00:00+00:00"}


def first_event(trigger: PrimusJobTrigger, timeout_s: float = 60) -> dict[str, Any]:
    """Run the trigger the way the triggerer does until its first event."""

    async def one() -> dict[str, Any]:
        generator = trigger.run()
        try:
            event = await asyncio.wait_for(anext(generator), timeout=timeout_s)
        finally:
            await generator.aclose()
        payload: dict[str, Any] = event.payload
        return payload

    return asyncio.run(one())


def set_status(world: JobWorld, status: dict[str, Any], delay_s: float = 0.0) -> threading.Thread:
    """What a master would write, after ``delay_s`` (the trigger must be polling by then)."""

    def write() -> None:
        time.sleep(delay_s)
        modify(world.store, "job", lambda r: {**r.status, **status}, part="status")

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_serialize_round_trip() -> None:
    trigger = PrimusJobTrigger("job", primus_conn_id="c", wait_for="window", window=WINDOW, poll_interval=1.5)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_primus.triggers.job.PrimusJobTrigger"
    again = PrimusJobTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="needs window"):
        PrimusJobTrigger("job", wait_for="window")


def test_end_of_the_job_is_one_event_and_a_rerun_sees_the_same(job_world: JobWorld) -> None:
    PrimusHook().submit_job(job_world.job(), start=False)
    writer = set_status(job_world, {"phase": "Running"})
    writer.join()
    writer = set_status(job_world, {"phase": "Failed", "message": "data-0 failed 4 times"}, delay_s=0.3)
    trigger = PrimusJobTrigger("job", poll_interval=0.05)
    event = first_event(trigger)
    writer.join()
    assert event["status"] == "error" and event["phase"] == "Failed" and "4 times" in event["message"]
    assert first_event(PrimusJobTrigger(*(), **trigger.serialize()[1])) == event  # idempotent


def test_window_consumed_and_refused_and_missing_job(job_world: JobWorld) -> None:
    PrimusHook().submit_job(job_world.job(), start=False)
    pending = {**WINDOW, "state": "appended", "tasks": 4, "tasks_done": 1, "consumed": False}
    set_status(job_world, {"phase": "Running", "windows": [pending]}).join()
    writer = set_status(job_world, {"windows": [{**pending, "tasks_done": 4, "consumed": True}]}, delay_s=0.3)
    event = first_event(PrimusJobTrigger("job", wait_for="window", window=WINDOW, poll_interval=0.05))
    writer.join()
    assert event["status"] == "success" and event["window"]["tasks_done"] == 4
    refused = {**WINDOW, "state": "refused", "reason": "the job's data service has finished its pass"}
    set_status(job_world, {"windows": [refused]}).join()
    event = first_event(PrimusJobTrigger("job", wait_for="window", window=WINDOW, poll_interval=0.05))
    assert event["status"] == "error" and "finished its pass" in event["message"]
    assert first_event(PrimusJobTrigger("nope", poll_interval=0.05))["status"] == "error"


def test_on_kill_stops_the_job(job_world: JobWorld) -> None:
    PrimusHook().submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        PrimusHook().wait_for_master("job")
        asyncio.run(PrimusJobTrigger("job").on_kill())
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"


def test_on_kill_without_a_master_records_the_stop(job_world: JobWorld) -> None:
    PrimusHook().submit_job(job_world.job(), start=False)
    trigger = PrimusJobTrigger("job")
    trigger.hook = PrimusHook(retries=0)  # fail fast: no master
    asyncio.run(trigger.on_kill())
    assert job_world.store.get("job").desired.get("stop") is True
    assert asyncio.run(PrimusJobTrigger("job", stop_on_kill=False).on_kill()) is None


# --- moved or cancelled: the streaming trainer's trigger in the triggerer's own run loop -------------


class ExecutionApiComms:
    """The triggerer supervisor's end of ``SUPERVISOR_COMMS`` for the request a trigger makes to tell a
    move from a cancel (``GetTaskStates``), answered as the supervisor answers it: by the real
    Execution API, in-process, on the session's metadata DB."""

    def __init__(self) -> None:
        from airflow.jobs.triggerer_job_runner import in_process_api_server
        from airflow.sdk.api.client import Client

        self.client = Client(
            base_url=None, token="", dry_run=True, transport=in_process_api_server().transport
        )
        self.client.base_url = "http://in-process.invalid./"  # type: ignore[assignment]

    def send(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import GetTaskStates
        from airflow.sdk.execution_time.request_handlers import handle_get_task_states

        assert isinstance(msg, GetTaskStates), msg
        response, _ = handle_get_task_states(self.client, msg)
        return response


@pytest.fixture
def deferred_trainer(airflow_db: Path) -> Iterator[Any]:
    """The streaming DAG's ``trainer`` task instance in the metadata DB (a run made by ``dag.test()``
    that marks it rather than running it), put in ``deferred``; yielded as the triggerer hands it to a
    trigger. The run is deleted afterwards."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.executors.workloads.task import TaskInstanceDTO
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    from tests.conftest import REPO

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("primus_streaming_trainer")
    run = dag.test(mark_success_pattern=".*")
    try:
        with create_session() as session:
            ti = session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id
                )
            ).one()
            ti.state = "deferred"
            session.flush()
            dto = TaskInstanceDTO.model_validate(ti, from_attributes=True)
        yield dto
    finally:
        with create_session() as session:
            session.execute(delete(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run.run_id))


def set_task_state(ti: Any, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(TaskInstance).where(TaskInstance.id == ti.id).values(state=state))


class XComs(dict[str, Any]):
    """The task instance as the operator uses it before deferring: only ``xcom_push``."""

    def xcom_push(self, key: str, value: Any) -> None:
        self[key] = value


def in_triggerer(trigger: PrimusJobTrigger, cancel_message: str | None) -> None:
    """Run the trigger in the triggerer's ``run_trigger`` until it polls, then cancel it as the
    triggerer does: without a message when it shuts down, with the user-action message when the
    trigger left this triggerer (a user acted on its task, or another triggerer took it over)."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    async def go() -> None:
        runner = TriggerRunner()
        task = asyncio.create_task(runner.run_trigger(1, trigger))
        runner.triggers[1] = {"task": task, "name": "streaming trainer", "events": 0, "is_watcher": False}
        await asyncio.sleep(1.0)  # polling the running job by now
        assert not task.done()
        task.cancel(cancel_message)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_a_moved_streaming_trigger_keeps_its_job_and_a_cancelled_one_stops_it(
    deferred_trainer: Any, job_world: JobWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.jobs.triggerer_job_runner import _USER_ACTION_CANCEL_MSG
    from airflow.sdk.execution_time import task_runner

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", ExecutionApiComms(), raising=False)
    job = str(job_world.job(follow=True))
    op = PrimusStreamingTrainerOperator(task_id="trainer", job=job, deferrable=True, poll_interval=0.2)
    # It starts the job (its master a real process) and defers for the job's life.
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": XComs(), "run_id": "manual__2026-05-01"})
    serialized = deferred.value.trigger.serialize()
    assert serialized[1]["long_running"] is True and serialized[1]["stop_on_kill"] is True
    until(job_world, lambda r: r.status.get("phase") == "Running")
    ti = deferred_trainer

    def trigger() -> PrimusJobTrigger:  # what a triggerer rebuilds from the trigger row
        rebuilt = PrimusJobTrigger(**serialized[1])
        rebuilt.task_instance = ti
        return rebuilt

    def stop_asked() -> bool:
        return bool(job_world.store.get("job").desired.get("stop"))

    in_triggerer(trigger(), None)  # the triggerer shuts down: cleanup() only
    assert not stop_asked() and job_world.store.get("job").status["phase"] == "Running"
    in_triggerer(trigger(), _USER_ACTION_CANCEL_MSG)  # lost to another triggerer: the task is deferred
    assert not stop_asked() and job_world.store.get("job").status["phase"] == "Running"
    set_task_state(ti, "failed")  # the user marks the deferred task failed: a real cancel
    in_triggerer(trigger(), _USER_ACTION_CANCEL_MSG)
    assert stop_asked()
    assert until(job_world, ended).status["phase"] == "Stopped"


def test_without_a_task_state_only_a_batch_job_is_stopped(job_world: JobWorld) -> None:
    """No task instance (the trigger runs outside a triggerer): a kill can't be told from a move."""
    PrimusHook().submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        PrimusHook().wait_for_master("job")
        asyncio.run(PrimusJobTrigger("job", long_running=True).on_kill())
        assert not job_world.store.get("job").desired.get("stop")
        asyncio.run(PrimusJobTrigger("job").on_kill())
        assert until(job_world, ended).status["phase"] == "Stopped"
