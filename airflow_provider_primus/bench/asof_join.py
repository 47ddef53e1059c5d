"""What an as-of join adds to a data executor's transform, in one run.

The same generated batches (``rows`` click rows: a user key, an event time, an item, a price and a
label) go through two transformers of the same schema: one whose ``user_ctr`` is read from the data,
one that joins it as of each row's event time from a feature table of ``feature_rows`` updates over
``keys`` users (a Parquet file, as ``type: files``). Passes alternate over ``repeats`` rounds and the
figures are medians; the feature table's load and index build are timed apart (a process does it
once per ``refresh_s``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.asof import AsOfJoinStep
from airflow_provider_primus.data.transforms import BatchTransformer

__all__ = ["join_speeds"]

START = datetime(2026, 1, 1, tzinfo=UTC)
DAY_US = 86_400_000_000
BATCH_ROWS = 65_536  # a data executor's decode chunk (data/reader.py READ_ROWS)


def _batches(rows: int, keys: int, seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    start = int(START.timestamp() * 1_000_000)
    out = []
    for lo in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - lo)
        out.append(
            pa.RecordBatch.from_pydict(
                {
                    "user_id": rng.integers(0, keys, n),
                    "item_id": rng.integers(0, 100_000, n),
                    "price": rng.random(n),
                    "user_ctr": rng.random(n),
                    "clicked": rng.integers(0, 2, n),
                    "ts": pa.array(start + rng.integers(0, DAY_US, n), pa.timestamp("us", tz="UTC")),
                }
            )
        )
    return out


def _schema(join: dict[str, Any] | None) -> SourceSchema:
    transforms: list[dict[str, Any]] = [{"column": "user_id", "hash_bucket": 1_000_003}]
    if join is not None:
        transforms = [join, {"column": "user_ctr", "fill": 0.0}, *transforms]
    return SourceSchema.model_validate(
        {
            "sparse": ["user_id", "item_id"],
            "dense": ["price", "user_ctr"],
            "label": {"column": "clicked"},
            "event_time": "ts",
            "transforms": transforms,
        }
    )


def _pass(transformer: BatchTransformer, batches: list[pa.RecordBatch]) -> float:
    t0 = time.perf_counter()
    for batch in batches:
        transformer(
            batch.drop_columns(["user_ctr"]) if "user_ctr" not in transformer.input_columns() else batch
        )
    return time.perf_counter() - t0


def join_speeds(*, rows: int, feature_rows: int, keys: int, repeats: int, seed: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 1)
    start = int(START.timestamp() * 1_000_000)
    features = pa.table(
        {
            "user_id": rng.integers(0, keys, feature_rows),
            "updated_at": pa.array(
                start + rng.integers(-DAY_US, DAY_US, feature_rows), pa.timestamp("us", tz="UTC")
            ),
            "user_ctr": rng.random(feature_rows),
        }
    )
    batches = _batches(rows, keys, seed)
    with tempfile.TemporaryDirectory(prefix="primus-bench-join-") as tmp:
        path = Path(tmp) / "user_features.parquet"
        pq.write_table(features, path)
        join = {
            "type": "as_of_join",
            "table": {"type": "files", "uri": str(path)},
            "key": "user_id",
            "time": "updated_at",
            "columns": ["user_ctr"],
            "refresh_s": None,
        }
        schema = _schema(join)
        t0 = time.perf_counter()
        AsOfJoinStep(schema.joins[0], schema.event_time).index()
        build_s = time.perf_counter() - t0
        joined, plain = BatchTransformer(schema), BatchTransformer(_schema(None))
        _pass(joined, batches[:1]), _pass(plain, batches[:1])  # warm both
        with_join, without = [], []
        for _ in range(repeats):
            with_join.append(_pass(joined, batches))
            without.append(_pass(plain, batches))
    join_s, plain_s = statistics.median(with_join), statistics.median(without)
    return {
        "rows": rows,
        "feature_rows": feature_rows,
        "keys": keys,
        "join_rows_s": round(rows / join_s),
        "plain_rows_s": round(rows / plain_s),
        "join_cost_ratio": round(join_s / plain_s, 3),
        "index_build_s": round(build_s, 3),
        "repeats": repeats,
    }
