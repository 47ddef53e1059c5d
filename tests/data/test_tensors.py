"""to_tensors on BatchTransformer output: shapes, dtypes, values, empty groups and zero rows."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
import torch

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.tensors import TensorBatch, to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer

SCHEMA = SourceSchema.model_validate(
    {
        "sparse": ["u", "i"],
        "dense": ["p", "q", "r"],
        "label": {"rule": "r >= 4"},
        "event_time": "ts",
        "transforms": [{"column": "i", "hash_bucket": 1000}],
    }
)
T = datetime(2026, 3, 1, tzinfo=UTC)


def raw(n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "u": pa.array(range(n), pa.int64()),
            "i": pa.array([f"item{k % 3}" for k in range(n)]),
            "p": pa.array([k / 2 for k in range(n)], pa.float64()),
            "q": pa.array([None if k == 1 else k for k in range(n)], pa.int32()),
            "r": pa.array([k % 6 for k in range(n)], pa.int64()),
            "ts": pa.array([int(T.timestamp() * 1000) + k for k in range(n)], pa.int64()),
            "row_id": pa.array(range(100, 100 + n), pa.int64()),
            "key": pa.array([f"k{k}" for k in range(n)]),
        }
    )


def convert(n: int) -> tuple[pa.RecordBatch, TensorBatch]:
    out = BatchTransformer(SCHEMA, passthrough=("row_id", "key"))(raw(n))
    return out, to_tensors(out, sparse=SCHEMA.sparse, dense=SCHEMA.dense, extra=("row_id", "key"))


def test_shapes_dtypes_and_values() -> None:
    out, tb = convert(6)
    assert len(tb) == 6
    assert tb.sparse.dtype == torch.int64 and tuple(tb.sparse.shape) == (6, 2)
    assert tb.dense.dtype == torch.float32 and tuple(tb.dense.shape) == (6, 3)
    assert tb.labels.dtype == torch.float32 and tuple(tb.labels.shape) == (6,)
    assert tb.sparse.is_contiguous() and tb.dense.is_contiguous()
    assert tb.sparse[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert tb.sparse[:, 1].tolist() == out.column("i").to_pylist()
    assert tb.sparse[0, 1] == tb.sparse[3, 1]  # same item, same bucket
    assert tb.dense[:, 0].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert torch.isnan(tb.dense[1, 1]) and tb.dense[2, 1] == 2.0  # an unfilled dense null is NaN
    assert tb.dense[:, 2].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert tb.labels.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert tb.event_time_ms is not None and tb.event_time_ms.dtype == torch.int64
    assert tb.event_time_ms.tolist() == [int(T.timestamp() * 1000) + k for k in range(6)]
    assert tb.extra["row_id"].tolist() == list(range(100, 106))
    assert tb.extra["key"].tolist() == [f"k{k}" for k in range(6)]


def test_tensors_do_not_write_into_arrow_buffers() -> None:
    out, tb = convert(4)
    labels_before = out.column("label").to_pylist()
    tb.labels += 1  # a trainer may scale labels in place: Arrow's (shared, read-only) buffers must not change
    tb.sparse[0, 0] = 7
    assert tb.labels.tolist() == [x + 1 for x in labels_before]
    assert out.column("label").to_pylist() == labels_before
    assert out.column("u").to_pylist()[0] == 0


def test_zero_rows() -> None:
    _, tb = convert(0)
    assert len(tb) == 0
    assert tuple(tb.sparse.shape) == (0, 2) and tuple(tb.dense.shape) == (0, 3)
    assert tuple(tb.labels.shape) == (0,)
    assert tb.event_time_ms is not None and tuple(tb.event_time_ms.shape) == (0,)
    assert tb.extra["row_id"].shape == (0,)


def test_event_times_become_milliseconds_in_the_declared_unit() -> None:
    seconds = int(T.timestamp())
    for unit, scale in (("s", 1), ("ms", 1000), ("us", 10**6), ("ns", 10**9)):
        schema = SourceSchema.model_validate(
            {"dense": ["p"], "label": {"column": "y"}, "event_time": {"column": "ts", "unit": unit}}
        )
        raw = pa.record_batch({"p": [1.0, 2.0], "y": [1, 0], "ts": [seconds * scale, (seconds + 1) * scale]})
        tb = to_tensors(BatchTransformer(schema)(raw), sparse=[], dense=["p"])
        assert tb.event_time_ms is not None
        assert tb.event_time_ms.tolist() == [seconds * 1000, seconds * 1000 + 1000], unit


def test_empty_feature_groups_and_no_event_time() -> None:
    out = BatchTransformer(SourceSchema.model_validate({"dense": ["p"], "label": {"column": "y"}}))(
        pa.record_batch({"p": [1.0, 2.0, 3.0], "y": [1, 0, 1]})
    )
    tb = to_tensors(out, sparse=[], dense=["p"])
    assert tuple(tb.sparse.shape) == (3, 0) and tb.sparse.dtype == torch.int64
    assert tb.event_time_ms is None and tb.extra == {}
    tb = to_tensors(out, sparse=[], dense=[])
    assert tuple(tb.dense.shape) == (3, 0) and tb.dense.dtype == torch.float32
    assert tb.labels.tolist() == [1.0, 0.0, 1.0]


def test_sliced_batches_convert_their_own_rows() -> None:
    out, _ = convert(10)
    tb = to_tensors(out.slice(3, 4), sparse=SCHEMA.sparse, dense=SCHEMA.dense, extra=("row_id",))
    assert tb.sparse[:, 0].tolist() == [3, 4, 5, 6]
    assert tb.extra["row_id"].tolist() == [103, 104, 105, 106]


def test_untransformed_input_is_refused() -> None:
    batch = pa.record_batch(
        {"u": pa.array([1, None], pa.int64()), "label": pa.array([1.0, 0.0], pa.float32())}
    )
    with pytest.raises(ValueError, match="'u' has 1 nulls"):
        to_tensors(batch, sparse=["u"], dense=[])
    with pytest.raises(KeyError, match="'p'"):
        to_tensors(batch.slice(0, 1), sparse=["u"], dense=["p"])


def test_large_batch_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    n = 50_000
    ids = rng.integers(0, 1_000_000, size=(n, 26))
    dense = rng.random((n, 13), dtype=np.float32)
    cols = {f"s{j}": pa.array(ids[:, j]) for j in range(26)} | {
        f"d{j}": pa.array(dense[:, j]) for j in range(13)
    }
    batch = pa.record_batch({**cols, "label": pa.array(np.ones(n, np.float32))})
    tb = to_tensors(batch, sparse=[f"s{j}" for j in range(26)], dense=[f"d{j}" for j in range(13)])
    assert np.array_equal(tb.sparse.numpy(), ids) and np.array_equal(tb.dense.numpy(), dense)
