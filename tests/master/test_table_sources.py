"""A local job whose history is an Iceberg or a Delta table: its data executors (real processes) read
the table's data files, beside a Kafka stream the trainer reads; a snapshot committed while
the job runs is trained when the next window is appended (as the daily DAG appends it), every row
once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import read_token, submit
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, running, until
from tests.master.test_sources import trained_by_source
from tests.training.conftest import SCHEMA, T0, events, to_json

pytestmark = pytest.mark.timeout(300)

PER_HOUR = 2000
STREAM = (500_000, 800)  # first id, records


class Lake:
    """The history table a job reads, and its appends (each a new snapshot or version)."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root, self.kind = root / "lake", kind
        (self.root / "warehouse").mkdir(parents=True)
        if kind == "iceberg":
            from pyiceberg.catalog.sql import SqlCatalog
            from pyiceberg.transforms import HourTransform

            catalog = SqlCatalog("default", uri=self.catalog_uri, warehouse=f"file://{self.root}/warehouse")
            catalog.create_namespace("ads")
            table = catalog.create_table("ads.clicks", schema=events(0, 1, T0, seed=0).schema)
            with table.update_spec() as spec:
                spec.add_field("ts", HourTransform(), "ts_hour")
            self.table = catalog.load_table("ads.clicks")

    @property
    def catalog_uri(self) -> str:
        return f"sqlite:///{self.root}/catalog.db"

    def append(self, hour: int) -> None:
        rows = events(hour * PER_HOUR, PER_HOUR, T0 + timedelta(hours=hour), seed=hour)
        if self.kind == "iceberg":
            self.table.append(rows)
            return
        from deltalake import write_deltalake

        write_deltalake(str(self.root / "clicks"), rows, mode="append")

    def source(self) -> dict[str, Any]:
        if self.kind == "iceberg":
            where: dict[str, Any] = {
                "catalog": {
                    "type": "sql",
                    "uri": self.catalog_uri,
                    "warehouse": f"file://{self.root}/warehouse",
                },
                "table": "ads.clicks",
            }
        else:
            where = {"uri": f"file://{self.root}/clicks"}
        return {"name": "history", "type": self.kind, **where, "granularity": "hour", "schema": SCHEMA}


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_job_trains_a_table_history_and_a_stream_and_a_later_snapshot_once(
    job_world: JobWorld, kafka_broker: Any, new_topic: Any, kind: str
) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    table = Lake(job_world.root, kind)
    for h in range(2):
        table.append(h)
    topic = new_topic("clicks")
    produce(kafka_broker.bootstrap_servers, topic, to_json(events(STREAM[0], STREAM[1], T0, seed=7)))
    data: dict[str, Any] = yaml.safe_load(job_world.data_path.read_text())
    data["spec"]["window"]["end"] = (T0 + timedelta(hours=2)).isoformat()
    data["spec"]["sources"] = [
        table.source(),
        {
            "name": "events",
            "type": "kafka",
            "bootstrap_servers": kafka_broker.bootstrap_servers,
            "topic": topic,
            "event_time_field": "ts",
            "start": {"policy": "earliest"},
            "group_id": f"{topic}-trainer",
            "schema": SCHEMA,
        },
    ]
    data["spec"]["mixture"] = [
        {"source": "history", "weight": 0.7, "priority": 0},
        {"source": "events", "weight": 0.3, "priority": 1},
    ]
    job_world.data_path.write_text(yaml.safe_dump(data))
    training = yaml.safe_load(job_world.training_path.read_text())
    training["spec"]["mode"] = "mixed"
    training["spec"]["batch_size"] = 100
    job_world.training_path.write_text(yaml.safe_dump(training))

    submit(job_world.job(follow=True), store=job_world.store)
    with running(job_world) as master:
        until(job_world, lambda r: r.status.get("progress", {}).get("acked_rows") == 2 * PER_HOUR)
        # The next hour lands in the table as a new snapshot; the daily run appends its window.
        table.append(2)
        client = ControlClient(master.api.url, read_token("job"))
        start, end = T0 + timedelta(hours=2), T0 + timedelta(hours=3)
        client.append_window(start.isoformat(), end.isoformat(), "history")
        record = until(job_world, lambda r: r.status["progress"]["acked_rows"] == 3 * PER_HOUR)
        (window,) = record.status["windows"]
        assert (window["source"], window["rows"]) == ("history", PER_HOUR)

        def trained(r: Any) -> dict[str, int]:
            return dict(((r.status["progress"].get("trainer_metrics") or {}).get("rows_trained")) or {})

        until(job_world, lambda r: trained(r) == {"history": 3 * PER_HOUR, "events": STREAM[1]})
        master.request({"stop": True})
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    rows = trained_by_source(job_world.home / "jobs" / "job" / "trace.jsonl")
    assert Counter(rows["history"]) == Counter(range(3 * PER_HOUR))
    assert Counter(rows["events"]) == Counter(range(STREAM[0], STREAM[0] + STREAM[1]))
