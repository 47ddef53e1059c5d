"""The job operators outside a DAG run: execute → deferral → the trigger's event → execute_complete,
and the retry paths, against a real store and real masters. ``RecordingTI`` stands in for the task
runner's task instance, of which the operators use only ``xcom_push`` (the DAG tests run them under
Airflow's own runner)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.links.job import JOB_XCOM_KEY, PrimusJobLink
from airflow_provider_primus.operators.base import PrimusJobFailed, job_name_for
from airflow_provider_primus.operators.job import (
    PrimusAppendWindowOperator,
    PrimusScaleOperator,
    PrimusSubmitJobOperator,
)
from airflow_provider_primus.triggers.job import PrimusJobTrigger
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, running, until
from tests.master.test_sources import RECENT_ROWS, several_sources, write_recent
from tests.training.conftest import T0
from tests.triggers.test_job_trigger import first_event

pytestmark = pytest.mark.timeout(300)


class RecordingTI:
    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def context(run_id: str = "manual__2026-05-01") -> dict[str, Any]:
    return {"ti": RecordingTI(), "run_id": run_id}


def test_submit_defers_then_completes_and_a_retry_does_not_rerun(job_world: JobWorld) -> None:
    op = PrimusSubmitJobOperator(task_id="train", job=str(job_world.job()), poll_interval=0.2)
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    name = job_name_for(op.dag_id, "train", "manual__2026-05-01")
    assert isinstance(trigger, PrimusJobTrigger) and trigger.job == name
    assert ctx["ti"].xcom[JOB_XCOM_KEY] == name  # pushed before deferring: the link works at once
    assert ctx["ti"].xcom[PrimusJobLink().xcom_key].endswith(f"/primus/jobs/{name}")
    event = first_event(trigger, timeout_s=180)
    result = op.execute_complete(ctx, event)
    assert result["phase"] == "Succeeded" and result["progress"]["acked_rows"] == job_world.rows
    store = PrimusHook().store
    labels = store.get(name).labels
    assert labels["airflow.task_id"] == "train" and labels["airflow.run_id"] == "manual__2026-05-01"
    retry = op.execute(context())  # the same run: the job succeeded, nothing runs again
    assert retry["phase"] == "Succeeded" and [r.name for r in store.find()] == [name]


def test_submit_polls_without_deferring_and_fails_with_the_jobs_error(job_world: JobWorld) -> None:
    op = PrimusSubmitJobOperator(
        task_id="train", job=str(job_world.job(max_steps=3)), deferrable=False, poll_interval=0.2
    )
    result = op.execute(context())
    assert result["phase"] == "Succeeded"
    with pytest.raises(PrimusJobFailed, match="Failed: data-0 failed"):
        op.execute_complete(
            context(), {"status": "error", "job": "j", "phase": "Failed", "message": "data-0 failed"}
        )


def test_a_success_with_quarantined_tasks_is_flagged_in_the_result_and_warned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    op = PrimusSubmitJobOperator(task_id="train", job="unused.yaml")
    quarantine = [{"file": "/lake/a.parquet", "rows": [0, 500], "error": "CorruptFileError: CRC"}]
    event = {
        "status": "success",
        "job": "j",
        "phase": "Succeeded",
        "message": "Succeeded with 1 task quarantined",
        "progress": {"tasks_quarantined": 1, "quarantine": quarantine},
    }
    result = op.execute_complete(context(), event)
    assert result["phase"] == "Succeeded" and result["tasks_quarantined"] == 1
    log = capsys.readouterr().out  # the task log (Airflow's structlog writes it to stdout)
    assert "warning" in log and "/lake/a.parquet rows 0..500: CorruptFileError: CRC" in log
    clean = op.execute_complete(context(), {**event, "progress": {"tasks_quarantined": 0}})
    assert clean["tasks_quarantined"] == 0


def test_scale_operator_asks_the_running_job(job_world: JobWorld) -> None:
    roles = {"data": {"replicas": {"min": 1, "max": 3}}, "trainer": {}}
    PrimusHook().submit_job(job_world.job(follow=True, roles=roles), start=False)
    with running(job_world):
        PrimusHook().wait_for_master("job")
        result = PrimusScaleOperator(task_id="scale", job_name="job", role="data", replicas="2").execute(
            context()
        )
        assert result["accepted"] is True
        until(job_world, lambda r: r.status.get("replicas", {}).get("data") == 2)
        PrimusHook().stop_job("job")
        until(job_world, ended)


def test_append_window_operator_names_its_source_and_an_unknown_one_fails(job_world: JobWorld) -> None:
    """A job of two files sources: the window of one of them joins and is waited for; a source the
    job does not read fails the task with an error naming it, appending nothing."""
    several_sources(job_world, None, None)
    write_recent(job_world.root, range(1, 2))
    PrimusHook().submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        PrimusHook().wait_for_master("job")
        span = {"start": (T0 + timedelta(hours=1)).isoformat(), "end": (T0 + timedelta(hours=2)).isoformat()}

        def append(source: str) -> dict[str, Any]:
            op = PrimusAppendWindowOperator(
                task_id="append", job_name="job", source=source, deferrable=False, poll_interval=0.2, **span
            )
            result: dict[str, Any] = op.execute(context())
            return result

        with pytest.raises(Exception, match="no files source named 'recnt' in data 'history'"):
            append("recnt")
        result = append("recent")
        assert (result["window"]["source"], result["window"]["rows"], result["window"]["consumed"]) == (
            "recent",
            RECENT_ROWS,
            True,
        )
        assert [w["source"] for w in job_world.store.get("job").status["windows"]] == ["recent"]
        PrimusHook().stop_job("job")
        until(job_world, ended)
