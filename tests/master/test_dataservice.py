"""The job's data service: what planning finds in the data becomes the job's events."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.job import validate_job_spec
from airflow_provider_primus.contracts.status import EventTimePayload, EventType
from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.store import SqliteJobStore
from tests.data.conftest import seconds_data_document

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def data_document(root: Path, event_time: object) -> dict[str, object]:
    return seconds_data_document(root, event_time)


def planned_events(tmp_path: Path, event_time: object) -> list[tuple[str, dict[str, object]]]:
    data = load_data_spec(data_document(tmp_path, event_time))
    job = validate_job_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": "j"},
            "spec": {"data": "d"},
        }
    )
    store = SqliteJobStore(tmp_path / "jobs.sqlite")
    store.create("j", job.model_dump(mode="json", by_alias=True))
    jobdata = JobData(job, data, EventLog(store, "j"), windows=[], progress={})
    server = jobdata.start("token", 0)
    server.stop()
    return [(e.type, e.data) for e in store.events("j")]


def test_implausible_event_times_in_the_plan_are_a_job_event(tmp_path: Path) -> None:
    ((kind, data),) = planned_events(tmp_path, "ts")
    assert kind == EventType.EVENT_TIME_IMPLAUSIBLE.value
    payload = EventTimePayload.model_validate(data)
    assert (payload.source, payload.column, payload.unit) == ("history", "ts", None)
    assert (payload.files, payload.checked_files, payload.fits) == (2, 2, ["s"])


def test_a_declared_unit_plans_without_an_event(tmp_path: Path) -> None:
    assert planned_events(tmp_path, {"column": "ts", "unit": "s"}) == []
