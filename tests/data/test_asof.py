"""The as-of join: point-in-time correct on constructed data (a feature updated after an event is
never seen by that event), against a brute-force oracle on random data, through a source's schema,
and its contract's errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.joins import AsOfJoin
from airflow_provider_primus.contracts.schema import EventTime
from airflow_provider_primus.data import asof
from airflow_provider_primus.data.asof import AsOfJoinStep
from airflow_provider_primus.data.transforms import BatchTransformer
from tests.data.conftest import spec_doc

T = datetime(2026, 3, 1, 10, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


def features(path: Path, rows: list[tuple[Any, datetime, float]]) -> Path:
    pq.write_table(
        pa.table(
            {
                "user": [r[0] for r in rows],
                "updated_at": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
                "user_ctr": pa.array([r[2] for r in rows], pa.float64()),
            }
        ),
        path,
    )
    return path


def join(path: Path, **kw: Any) -> AsOfJoinStep:
    step = AsOfJoin.model_validate(
        {
            "type": "as_of_join",
            "table": {"type": "files", "uri": str(path)},
            "key": "user_id",
            "table_key": "user",
            "time": "updated_at",
            "columns": ["user_ctr"],
            **kw,
        }
    )
    return AsOfJoinStep(step, EventTime(column="ts"))


def events(rows: list[tuple[Any, datetime | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "user_id": [r[0] for r in rows],
            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def test_a_feature_updated_after_an_event_is_never_seen_by_it(tmp_path: Path) -> None:
    table = features(
        tmp_path / "f.parquet", [(1, at(0), 0.1), (1, at(30), 0.2), (1, at(60), 0.3), (2, at(15), 0.7)]
    )
    batch = events(
        [
            (1, at(-0.001)),  # a millisecond before the first value: none yet
            (1, at(0)),  # at the update itself: valid from then
            (1, at(29.999)),  # just before the next update: still the first
            (1, at(30)),
            (1, at(600)),  # long after: the latest
            (2, at(14)),
            (2, at(16)),
            (3, at(100)),  # a key the table does not have
            (1, None),  # a row without a time is valid as of nothing
        ]
    )
    out = join(table)(batch, "<test>")
    assert out.column("user_ctr").to_pylist() == [None, 0.1, 0.1, 0.2, 0.3, None, 0.7, None, None]


@pytest.mark.parametrize("times", ["offsets", "ranks"])
def test_against_a_brute_force_oracle_on_random_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: str
) -> None:
    if times == "ranks":  # what a million keys over years of microseconds get
        monkeypatch.setattr(asof, "COMPOSITE_LIMIT", 1)
    rng = np.random.default_rng(7)
    n_feat, n_rows = 3000, 5000
    keys = [f"u{k}" for k in rng.integers(0, 200, n_feat)]  # string keys, duplicate times
    times = [at(int(m)) for m in rng.integers(0, 1440, n_feat)]
    values = rng.random(n_feat).round(6)
    table = features(tmp_path / "f.parquet", list(zip(keys, times, values, strict=True)))
    qkeys = [f"u{k}" for k in rng.integers(0, 220, n_rows)]
    qtimes = [at(float(m)) for m in rng.uniform(-60, 1500, n_rows)]
    got = join(table, refresh_s=None)(events(list(zip(qkeys, qtimes, strict=True))), "<test>").column(
        "user_ctr"
    )
    by_key: dict[str, list[tuple[datetime, int]]] = {}
    for i, (k, t) in enumerate(zip(keys, times, strict=True)):
        by_key.setdefault(k, []).append((t, i))
    for k, t, value in zip(qkeys, qtimes, got.to_pylist(), strict=True):
        valid = [(ft, i) for ft, i in by_key.get(k, []) if ft <= t]
        if not valid:
            assert value is None
            continue
        latest = max(ft for ft, _ in valid)
        # Ties at the latest time: any of them is as of the event (none is from its future).
        assert value in {values[i] for ft, i in valid if ft == latest}


def test_joined_columns_are_features_of_the_source(tmp_path: Path) -> None:
    table = features(tmp_path / "f.parquet", [(1, at(0), 0.25), (2, at(0), 0.5)])
    doc = spec_doc(
        [
            {
                "name": "history",
                "type": "files",
                "format": "parquet",
                "uri": str(tmp_path),
                "path_template": "{date}",
                "granularity": "day",
                "schema": {
                    "sparse": ["user_id"],
                    "dense": ["user_ctr"],
                    "label": {"column": "clicked"},
                    "event_time": "ts",
                    "transforms": [
                        {
                            "type": "as_of_join",
                            "table": {"type": "files", "uri": str(table)},
                            "key": "user_id",
                            "table_key": "user",
                            "time": "updated_at",
                            "columns": ["user_ctr"],
                        },
                        {"column": "user_ctr", "fill": 0.0},
                    ],
                },
            }
        ]
    )
    source = load_data_spec(doc).spec.sources[0]
    transformer = BatchTransformer(source.schema_)
    assert transformer.input_columns() == ["user_id", "clicked", "ts"]  # user_ctr is joined, not read
    batch = events([(1, at(5)), (2, at(-5)), (3, at(5))]).append_column("clicked", pa.array([1, 0, 1]))
    out = transformer(batch, "<test>")
    assert out.column("user_ctr").to_pylist() == [0.25, 0.0, 0.0]  # no value yet, or no key: the fill


def test_the_contract_names_what_a_join_gets_wrong(tmp_path: Path) -> None:
    step = {
        "type": "as_of_join",
        "table": {
            "type": "delta",
            "catalog": {"type": "sql", "uri": "sqlite:///x", "warehouse": "file:///w"},
        },
        "key": "user_id",
        "time": "updated_at",
        "columns": ["user_ctx"],
    }
    schema = {
        "sparse": ["user_id"],
        "dense": ["user_ctr"],
        "label": {"column": "clicked"},
        "transforms": [step],
    }
    source = {
        "name": "s",
        "type": "files",
        "format": "parquet",
        "uri": str(tmp_path),
        "path_template": "{date}",
        "granularity": "day",
        "schema": schema,
    }
    with pytest.raises(SpecError) as err:
        load_data_spec(spec_doc([source]))
    text = str(err.value)
    assert "transforms[0].table.uri: required for a delta table" in text
    assert "transforms[0].table.catalog: not used by a delta table" in text
    step["table"] = {"type": "files", "uri": str(tmp_path)}
    with pytest.raises(SpecError) as err:
        load_data_spec(spec_doc([source]))
    text = str(err.value)
    assert "unknown column 'user_ctx'" in text and "did you mean 'user_ctr'?" in text
    assert "an as_of_join needs the schema's event_time" in text
