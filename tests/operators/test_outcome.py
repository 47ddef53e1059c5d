"""The one policy of what a job's state means to a task and what a kill does (pure functions over a
job's status: what the store and the trigger tests exercise for real is decided here)."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_primus.operators.outcome import (
    PrimusJobFailed,
    phase_result,
    stops_job_on_kill,
    task_result,
    wait_event,
)

LOG = logging.getLogger("test")
WINDOW = {"start": "2026-05-01T04:00:00+00:00", "end": "2026-05-01T06:00:00+00:00"}


def test_a_wait_ends_on_the_jobs_end_or_its_windows_fate() -> None:
    assert wait_event("j", {"phase": "Running"}) is None
    assert wait_event("j", None) == {"status": "error", "job": "j", "message": "no job named 'j'"}
    done = wait_event("j", {"phase": "Succeeded", "progress": {"acked_rows": 3}})
    assert done is not None and done["status"] == "success" and done["progress"]["acked_rows"] == 3
    pending = {**WINDOW, "consumed": False}
    assert wait_event("j", {"phase": "Running", "windows": [pending]}, WINDOW) is None
    consumed = wait_event("j", {"phase": "Running", "windows": [{**WINDOW, "consumed": True}]}, WINDOW)
    assert consumed is not None and consumed["status"] == "success" and consumed["window"]["consumed"]
    refused = {**WINDOW, "state": "refused", "reason": "pass finished"}
    event = wait_event("j", {"phase": "Running", "windows": [refused]}, WINDOW)
    assert event is not None and event["status"] == "error" and "pass finished" in event["message"]
    # A job that ended before the window was consumed never will consume it, whatever its phase.
    event = wait_event("j", {"phase": "Succeeded", "windows": [pending]}, WINDOW)
    assert event is not None and event["status"] == "error" and "not consumed" in event["message"]


def test_task_results() -> None:
    event = {"status": "success", "job": "j", "phase": "Succeeded", "progress": {"tasks_quarantined": 2}}
    assert task_result(event, LOG)["tasks_quarantined"] == 2
    stopped = {"status": "error", "job": "j", "phase": "Stopped", "message": "stop requested"}
    with pytest.raises(PrimusJobFailed, match="job j Stopped: stop requested"):
        task_result(stopped, LOG)
    assert task_result(stopped, LOG, long_running=True) == {"job": "j", "phase": "Stopped"}
    targets = {"target_phases": ("Running",), "failure_phases": ("Failed",), "log": LOG}
    assert phase_result("j", "Pending", "", None, **targets) is None
    assert phase_result("j", "Running", "", None, **targets)["tasks_quarantined"] == 0  # type: ignore[index]
    with pytest.raises(PrimusJobFailed, match="ended Stopped without reaching Running"):
        phase_result("j", "Stopped", "", None, **targets)


@pytest.mark.parametrize(
    ("owns_job", "long_running", "task_state", "stops"),
    [
        (False, False, "failed", False),  # a sensor or a window's task: someone else's job
        (True, False, "deferred", False),  # moved to another triggerer
        (True, True, "deferred", False),
        (True, False, "failed", True),  # marked failed, cleared, marked success: cancelled
        (True, True, "success", True),
        (True, True, None, False),  # unknown: the streaming trainer runs on
        (True, False, None, True),  # unknown: the batch job's task is gone
    ],
)
def test_the_cancel_policy(owns_job: bool, long_running: bool, task_state: str | None, stops: bool) -> None:
    assert stops_job_on_kill(owns_job=owns_job, long_running=long_running, task_state=task_state) is stops
