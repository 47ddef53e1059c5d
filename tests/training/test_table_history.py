"""Mixed training whose history is an Iceberg or a Delta table, beside a Kafka stream on the real broker, in a
trainer as ``primus train`` runs it: every history row of the window and every streamed record is
trained exactly once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import SCHEMA, T0, World, events, rows_by_source

HOURS, PER_HOUR = 3, 2000


def iceberg_history(world: World) -> dict[str, Any]:
    """The world's history written to an hour-partitioned Iceberg table (a SQL catalog on SQLite),
    one commit per hour as an hourly ingestion job leaves it; the source that reads it."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import HourTransform

    root = world.root / "lake"
    (root / "warehouse").mkdir(parents=True)
    catalog = SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ads")
    first = events(0, PER_HOUR, T0, seed=0)
    table = catalog.create_table("ads.clicks", schema=first.schema)
    with table.update_spec() as spec:
        spec.add_field("ts", HourTransform(), "ts_hour")
    for h in range(HOURS + 1):  # one hour past the window: never trained
        table.append(events(h * PER_HOUR, PER_HOUR, T0 + timedelta(hours=h), seed=h))
    return {
        "name": "history",
        "type": "iceberg",
        "catalog": {
            "type": "sql",
            "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}/warehouse",
        },
        "table": "ads.clicks",
        "granularity": "hour",
        "schema": SCHEMA,
    }


def delta_history(world: World) -> dict[str, Any]:
    """The world's history as a Delta table partitioned by a date-hour column, one commit per hour."""
    from deltalake import write_deltalake

    for h in range(HOURS + 1):
        t = T0 + timedelta(hours=h)
        table = events(h * PER_HOUR, PER_HOUR, t, seed=h)
        hour = pa.array([t.strftime("%Y-%m-%d-%H")] * PER_HOUR)
        write_deltalake(
            str(world.root / "clicks"),
            table.append_column("hour", hour),
            mode="append",
            partition_by=["hour"],
        )
    return {
        "name": "history",
        "type": "delta",
        "uri": str(world.root / "clicks"),
        "granularity": "hour",
        "schema": SCHEMA,
    }


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_mixed_training_from_a_table_history_and_a_stream_trains_each_row_once(
    world: World, tmp_path: Path, kind: str
) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    doc = yaml.safe_load(world.spec_path.read_text())
    doc["spec"]["sources"][0] = iceberg_history(world) if kind == "iceberg" else delta_history(world)
    doc["spec"]["window"] = {"start": T0.isoformat(), "end": (T0 + timedelta(hours=HOURS)).isoformat()}
    world.spec_path.write_text(yaml.safe_dump(doc))
    world.next_id = 1_000_000
    produced = world.produce_events(1500, seed=9)
    steps: list[dict[str, list[int]]] = []
    training = world.training(
        tmp_path / "training.yaml",
        mode="mixed",
        batch_size=256,
        checkpoint={"every_steps": 0, "every_s": 0},
        publish={"every_s": 0},
    )
    trainer = Trainer(
        load_data_spec(world.spec_path),
        load_training_spec(training),
        TrainOptions(workdir=tmp_path / "run", trace=rows_by_source(steps), passthrough=("row_id",)),
    )
    result = trainer.run()
    assert result["rows_trained"] == {"history": HOURS * PER_HOUR, "events": len(produced)}
    history = Counter(r for s in steps for r in s.get("history", []))
    assert set(history) == set(range(HOURS * PER_HOUR)) and set(history.values()) == {1}
    stream = Counter(r for s in steps for r in s.get("events", []))
    assert set(stream) == set(produced) and set(stream.values()) == {1}
