"""The job's data service: what planning finds in the data becomes the job's events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.store import SqliteJobStore
from airflow_provider_primus.spec import load_data_spec
from airflow_provider_primus.spec.job import PrimusJob
from airflow_provider_primus.spec.status import EventTimePayload, EventType

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def data_document(root: Path, event_time: object) -> dict[str, object]:
    for h in range(2):
        t = T0 + timedelta(hours=h)
        part = root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True, exist_ok=True)
        seconds = int(t.timestamp())  # epoch seconds, as most logs carry them
        table = pa.table({"user_id": [1, 2], "clicked": [1, 0], "ts": pa.array([seconds, seconds + 9])})
        pq.write_table(table, part / "part-0.parquet")
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "clicks"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=2)).isoformat()},
            "sources": [
                {
                    "name": "history",
                    "type": "files",
                    "format": "parquet",
                    "uri": str(root / "store"),
                    "path_template": "{date}/{hour}",
                    "granularity": "hour",
                    "schema": {
                        "sparse": ["user_id"],
                        "label": {"column": "clicked"},
                        "event_time": event_time,
                    },
                }
            ],
        },
    }


def planned_events(tmp_path: Path, event_time: object) -> list[tuple[str, dict[str, object]]]:
    data = load_data_spec(data_document(tmp_path, event_time))
    job = PrimusJob.model_validate(
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
