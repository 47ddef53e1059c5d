"""PrimusJobTrigger: serialization, its events from run(), re-entry and on_kill, on a real store."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.master.store import modify
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
    trigger._hook = lambda: PrimusHook(retries=0)  # type: ignore[method-assign]  # fail fast: no master
    asyncio.run(trigger.on_kill())
    assert job_world.store.get("job").desired.get("stop") is True
    assert asyncio.run(PrimusJobTrigger("job", stop_on_kill=False).on_kill()) is None
