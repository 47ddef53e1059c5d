"""Mixed training whose history is an Iceberg or a Delta table, beside a Kafka stream on the real broker, in a
trainer as ``primus train`` runs it: every history row of the window and every streamed record is
trained exactly once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
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


def test_mixed_training_with_features_joined_as_of_each_rows_event_time(world: World, tmp_path: Path) -> None:
    """History and stream rows both get ``user_ctr`` as of their own event time from a feature table
    updated every hour at :30; the trainer's dense input holds exactly the oracle's values."""
    users = np.arange(1000)
    updates = [(u, T0 + timedelta(hours=h, minutes=30), u / 1000 + h) for h in range(5) for u in users]
    table = pa.table(
        {
            "user_id": [u for u, _, _ in updates],
            "updated_at": pa.array([t for _, t, _ in updates], pa.timestamp("us", tz="UTC")),
            "user_ctr": [v for _, _, v in updates],
        }
    )
    pq.write_table(table, tmp_path / "user_features.parquet")
    join = {
        "type": "as_of_join",
        "table": {"type": "files", "uri": str(tmp_path / "user_features.parquet")},
        "key": "user_id",
        "time": "updated_at",
        "columns": ["user_ctr"],
    }
    doc = yaml.safe_load(world.spec_path.read_text())
    for source in doc["spec"]["sources"]:
        source["schema"] = {
            **SCHEMA,
            "dense": ["price", "user_ctr"],
            "transforms": [join, {"column": "user_ctr", "fill": -1.0}, *SCHEMA["transforms"]],
        }
    world.spec_path.write_text(yaml.safe_dump(doc))
    produced = world.produce_events(1500, seed=9)  # stamped in hour 4: before and after its update
    seen: dict[int, float] = {}

    def trace(_step: int, parts: list[tuple[str, Any]]) -> None:
        for _source, batch in parts:
            for rid, ctr in zip(batch.extra["row_id"].tolist(), batch.dense[:, 1].tolist(), strict=True):
                assert rid not in seen, f"row {rid} trained twice"
                seen[rid] = ctr

    training = world.training(
        tmp_path / "training.yaml", mode="mixed", batch_size=256, checkpoint={"every_steps": 0, "every_s": 0}
    )
    Trainer(
        load_data_spec(world.spec_path),
        load_training_spec(training),
        TrainOptions(workdir=tmp_path / "run", trace=trace, passthrough=("row_id",)),
    ).run()
    history = pa.concat_tables(pq.read_table(p) for p in sorted((world.root / "store").rglob("*.parquet")))
    stream = events(world.next_id - len(produced), len(produced), T0 + timedelta(hours=4), seed=9)
    want: dict[int, float] = {}
    for rows in (history, stream):
        for rid, user, ts in zip(
            *(rows.column(c).to_pylist() for c in ("row_id", "user_id", "ts")), strict=True
        ):
            valid = [h for h in range(5) if T0 + timedelta(hours=h, minutes=30) <= ts]
            want[rid] = user / 1000 + max(valid) if valid else -1.0
    assert seen.keys() == want.keys()
    assert all(abs(seen[r] - want[r]) < 1e-3 for r in want), "a row saw a value from its future"
