"""PrimusJobSensor against a real job store; a test writes the status a master would write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider_primus.master.store import SqliteJobStore, modify
from airflow_provider_primus.sensors.job import PrimusJobSensor
from airflow_provider_primus.triggers.job import PrimusJobTrigger


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteJobStore:
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path / "primus"))
    store = SqliteJobStore()  # the store PrimusHook opens without a connection: $PRIMUS_HOME's
    store.create("train", {"spec": {}})
    return store


def set_status(store: SqliteJobStore, **status: Any) -> None:
    modify(store, "train", lambda r: status, part="status")


def test_poke_follows_the_phase(store: SqliteJobStore) -> None:
    op = PrimusJobSensor(task_id="wait", job="train")
    assert not op.poke({}).is_done  # a job whose master has not written yet: empty status
    set_status(store, phase="Running")
    assert not op.poke({}).is_done
    set_status(store, phase="Succeeded", message="the trainer finished")
    done = op.poke({})
    assert done.is_done
    assert done.xcom_value == {
        "job": "train",
        "phase": "Succeeded",
        "message": "the trainer finished",
        "tasks_quarantined": 0,
    }


def test_success_with_quarantined_tasks_is_flagged_and_warned(
    store: SqliteJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    quarantine = [
        {
            "task": "history-1",
            "source": "history",
            "file": "/lake/2026-05-01/02/part-0.parquet",
            "rows": [2000, 4000],
            "error": "CorruptFileError: CRC checksum verification failed",
        }
    ]
    progress = {"tasks_quarantined": 1, "quarantine": quarantine}
    set_status(store, phase="Succeeded", message="Succeeded with 1 task quarantined", progress=progress)
    done = PrimusJobSensor(task_id="wait", job="train").poke({})
    assert done.is_done and done.xcom_value["tasks_quarantined"] == 1
    assert done.xcom_value["message"] == "Succeeded with 1 task quarantined"
    warning = capsys.readouterr().out  # the task log (Airflow's structlog writes it to stdout)
    assert "warning" in warning
    assert "1 data task quarantined" in warning
    assert "/lake/2026-05-01/02/part-0.parquet rows 2000..4000: CorruptFileError: CRC" in warning


@pytest.mark.parametrize("phase", ["Failed", "Stopped"])
def test_a_failure_phase_raises_with_the_jobs_message(store: SqliteJobStore, phase: str) -> None:
    set_status(store, phase=phase, message="trainer-0 exited with code 1")
    with pytest.raises(AirflowException, match=rf"job 'train' {phase}: trainer-0 exited with code 1"):
        PrimusJobSensor(task_id="wait", job="train").poke({})


def test_waiting_for_running(store: SqliteJobStore) -> None:
    op = PrimusJobSensor(task_id="wait", job="train", target_phases=("Running",), timeout=5)
    set_status(store, phase="Running")
    # deferrable, but "Running" is not an end the trigger reports: it pokes (and finds it at once)
    assert op.execute({}) == {"job": "train", "phase": "Running", "message": "", "tasks_quarantined": 0}
    set_status(store, phase="Succeeded")
    with pytest.raises(AirflowException, match="ended Succeeded without reaching Running"):
        op.poke({})


def test_unknown_job_and_phase_names_fail(store: SqliteJobStore) -> None:
    with pytest.raises(AirflowException, match="no job named 'other'"):
        PrimusJobSensor(task_id="wait", job="other").poke({})
    with pytest.raises(ValueError, match="unknown phase"):
        PrimusJobSensor(task_id="wait", job="train", target_phases=("Succeded",))
    with pytest.raises(ValueError, match="in both"):
        PrimusJobSensor(task_id="wait", job="train", failure_phases=("Succeeded",))


def test_execute_defers_on_the_job_trigger_without_owning_the_job(store: SqliteJobStore) -> None:
    set_status(store, phase="Running")
    op = PrimusJobSensor(task_id="wait", job="train", poke_interval=0.05)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, PrimusJobTrigger) and deferred.value.method_name == "execute_complete"
    kwargs = trigger.serialize()[1]
    assert kwargs["job"] == "train" and kwargs["wait_for"] == "end" and kwargs["stop_on_kill"] is False

    # The trigger's real events, as the triggerer would hand them to execute_complete.
    set_status(store, phase="Failed", message="out of memory")
    failed = asyncio.run(anext(trigger.run())).payload
    with pytest.raises(AirflowException, match="job 'train' Failed: out of memory"):
        op.execute_complete({}, failed)
    set_status(store, phase="Succeeded", message="the trainer finished")
    succeeded = asyncio.run(anext(trigger.run())).payload
    assert op.execute_complete({}, succeeded)["phase"] == "Succeeded"
    with pytest.raises(AirflowException, match="no job named"):
        op.execute_complete({}, {"status": "error", "job": "train", "message": "no job named 'train'"})
