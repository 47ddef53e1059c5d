"""A restarted master takes over what its predecessor's status holds, from documents old and new."""

from __future__ import annotations

import os

import psutil
import pytest

from airflow_provider_primus.contracts.status import Phase
from airflow_provider_primus.master.publish import JobEndedError, MasterError
from airflow_provider_primus.master.resume import Resumed

EXECUTOR = {
    "handle": {"name": "data-0", "role": "data", "index": 0, "allotment": {"cpu": 1.0, "memory": 2**28}},
    "incarnation": 2,
    "state": "running",
}
MASTER = {
    "pid": 1,
    "pid_created": 0.0,
    "api": "http://127.0.0.1:4100",
    "api_port": 4100,
    "dispatcher": "grpc://127.0.0.1:4200",
    "dispatcher_port": 4200,
}


def test_a_first_start_takes_over_nothing() -> None:
    resumed = Resumed.take_over("job", {})
    assert resumed.status.phase is Phase.PENDING and not resumed.restarted
    assert (resumed.dispatcher_port, resumed.api_port) == (0, 0)
    assert resumed.executors() == {} and resumed.savepoints() == {} and resumed.windows() == []


def test_an_older_status_missing_optional_fields_still_resumes() -> None:
    # Written before the status carried metrics, rendezvous, restarts or an executor's error.
    raw = {
        "phase": "Running",
        "master": MASTER,
        "executors": {"data-0": EXECUTOR},
        "savepoints": {"sp1": {"state": "requested"}},
        "windows": [{"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "state": "refused"}],
    }
    resumed = Resumed.take_over("job", raw)
    assert resumed.restarted and (resumed.dispatcher_port, resumed.api_port) == (4200, 4100)
    executor = resumed.executors()["data-0"]
    assert executor["restarts"] == 0 and executor["incarnation"] == 2 and executor["handle"]["ref"] == {}
    # What the collaborators keep comes back as it was written, not padded with defaults.
    assert resumed.savepoints() == {"sp1": {"state": "requested"}}
    assert resumed.windows() == raw["windows"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Stopped"])
def test_an_ended_job_is_not_taken_over(phase: str) -> None:
    with pytest.raises(JobEndedError, match=phase):
        Resumed.take_over("job", {"phase": phase})


def test_a_predecessor_still_running_is_not_taken_over() -> None:
    parent = psutil.Process(os.getppid())
    alive = {**MASTER, "pid": parent.pid, "pid_created": parent.create_time()}
    with pytest.raises(MasterError, match="already has a running master"):
        Resumed.take_over("job", {"phase": "Running", "master": alive})
    # The same pid with another start time is a recycled pid: its master is gone.
    recycled = {**alive, "pid_created": parent.create_time() - 60}
    assert Resumed.take_over("job", {"phase": "Running", "master": recycled}).restarted


def test_a_part_that_does_not_fit_is_left_behind_with_a_warning_not_a_failed_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A master block another version wrote without its ports (or edited by hand) is no reason for
    a master not to start: the rest is taken over, and the warning names the part, not its values."""
    raw = {"phase": "Running", "master": {"api": "http://127.0.0.1:9"}, "suspended": True}
    with caplog.at_level("WARNING"):
        resumed = Resumed.take_over("job", raw)
    assert not resumed.restarted and resumed.api_port == 0 and resumed.status.suspended
    assert "job job: the stored status's master did not fit" in caplog.text
    assert "127.0.0.1:9" not in caplog.text
