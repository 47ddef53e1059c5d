"""Multi-hot (list) columns through ``BatchTransformer``: hashing, truncation, nulls, wrong types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.transforms import BatchTransformer, SchemaMismatchError, hash_ids


def schema(multi_hot: list[dict[str, Any]], transforms: list[dict[str, Any]] | None = None) -> SourceSchema:
    return SourceSchema.model_validate(
        {
            "sparse": ["u"],
            "multi_hot": multi_hot,
            "dense": ["p"],
            "label": {"column": "y"},
            "transforms": transforms or [],
        }
    )


def batch(items: pa.Array | list[Any], rows: int = 3) -> pa.RecordBatch:
    lists = items if isinstance(items, pa.Array) else pa.array(items)
    return pa.record_batch(
        {"u": pa.array(range(rows)), "items": lists, "p": pa.array([0.5] * rows), "y": pa.array([1] * rows)}
    )


def test_list_ids_are_hashed_like_single_ids_and_keep_their_rows() -> None:
    t = BatchTransformer(schema([{"column": "items"}], [{"column": "items", "hash_bucket": 1000}]))
    out = t(batch([[5, 7], [], [9]]))
    assert out.schema.names == ["u", "items", "p", "label"]
    single = hash_ids(pa.array([5, 7, 9]), 1000).to_pylist()
    assert out.column("items").to_pylist() == [single[:2], [], single[2:]]
    assert out.column("items").type == pa.list_(pa.int32())


def test_string_lists_hash_like_string_ids() -> None:
    t = BatchTransformer(schema([{"column": "items"}], [{"column": "items", "hash_bucket": 100}]))
    out = t(batch([["a"], ["b", "a"], None]))
    a, b = hash_ids(pa.array(["a", "b"]), 100).to_pylist()
    assert out.column("items").to_pylist() == [[a], [b, a], []]


def test_null_lists_are_empty_and_null_ids_are_dropped() -> None:
    t = BatchTransformer(schema([{"column": "items"}]))
    out = t(batch([None, [1, None, 3], [None]]))
    assert out.column("items").to_pylist() == [[], [1, 3], []]
    assert out.column("items").type == pa.list_(pa.int64())


def test_max_length_keeps_the_first_ids_after_nulls_are_dropped() -> None:
    t = BatchTransformer(schema([{"column": "items", "max_length": 2}]))
    out = t(batch([[1, 2, 3, 4], [None, 5, None, 6, 7], [8]]))
    assert out.column("items").to_pylist() == [[1, 2], [5, 6], [8]]


def test_sliced_and_large_lists_keep_their_offsets() -> None:
    t = BatchTransformer(schema([{"column": "items", "max_length": 3}]))
    whole = pa.array([[0], [1, 2], [3, 4, 5, 6], [7]], type=pa.large_list(pa.int64()))
    out = t(batch(whole.slice(1, 3)))
    assert out.column("items").to_pylist() == [[1, 2], [3, 4, 5], [7]]


def test_a_column_of_nulls_reads_as_empty_lists() -> None:
    t = BatchTransformer(schema([{"column": "items"}], [{"column": "items", "hash_bucket": 10}]))
    out = t(batch(pa.nulls(3)))
    assert out.column("items").to_pylist() == [[], [], []]


def test_cast_applies_to_every_id() -> None:
    t = BatchTransformer(
        schema(
            [{"column": "items"}],
            [{"column": "items", "cast": "string"}, {"column": "items", "hash_bucket": 100}],
        )
    )
    out = t(batch([[5], [], [6, 5]]))
    five, six = hash_ids(pa.array(["5", "6"]), 100).to_pylist()
    assert out.column("items").to_pylist() == [[five], [], [six, five]]


def test_a_column_that_is_not_a_list_names_the_column_and_file() -> None:
    t = BatchTransformer(schema([{"column": "items"}], [{"column": "items", "hash_bucket": 10}]))
    with pytest.raises(SchemaMismatchError) as exc:
        t(batch([1, 2, 3]), "s3://b/day=1/part-0.parquet")
    assert exc.value.column == "items" and exc.value.path == "s3://b/day=1/part-0.parquet"
    assert "a multi_hot column must hold lists of IDs; found type int64" in str(exc.value)


def test_unhashed_ids_follow_the_sparse_rules() -> None:
    t = BatchTransformer(schema([{"column": "items"}]))
    assert t(batch([[1.0], [], [2.0]])).column("items").to_pylist() == [[1], [], [2]]
    with pytest.raises(SchemaMismatchError, match=r"'items'.*double; cannot cast to int64"):
        t(batch([[1.5], [], []]))
    with pytest.raises(SchemaMismatchError, match=r"'items'.*multi_hot IDs must be integers.*lists of list"):
        t(batch(pa.array([[[0]]]), rows=1))


def test_lists_of_floats_cannot_be_hashed() -> None:
    t = BatchTransformer(schema([{"column": "items"}], [{"column": "items", "hash_bucket": 10}]))
    with pytest.raises(SchemaMismatchError, match=r"'items'.*hash_bucket needs integer or string.*double"):
        t(batch([[1.5], [], []]))


def test_json_lines_arrays_are_read_as_list_columns(tmp_path: Path) -> None:
    from airflow_provider_primus.data.model import FileSlice
    from airflow_provider_primus.data.reader import read_task
    from tests.data.test_reader import files_task

    path = tmp_path / "part-0.jsonl"
    rows = [
        {"u": 1, "items": [3, 4], "p": 0.5, "y": 1},
        {"u": 2, "items": None, "p": 0.5, "y": 0},
        {"u": 3, "p": 1.0, "y": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = files_task(FileSlice(str(path), path.stat().st_size))
    [batch] = list(read_task(task, fmt="jsonl", columns=["u", "items", "p", "y"], batch_rows=10))
    out = BatchTransformer(schema([{"column": "items", "max_length": 1}]))(batch)
    assert out.column("items").to_pylist() == [[3], [], []]
