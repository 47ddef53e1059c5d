"""A multi-hot (list) column through the data service: real executor processes read it from
Parquet, transform it, send it over Flight (Arrow IPC) and the loader hands each row its own IDs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.service.loader import PrimusDataLoader
from airflow_provider_primus.data.transforms import BatchTransformer
from tests.data.service.conftest import T0, ExecutorProcess, start_dispatcher

ROWS_PER_FILE = 1200


def table(first_id: int, rows: int, seed: int) -> pa.Table:
    """Lists of 0..30 IDs, some null, some holding nulls: every case the transformer handles."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 31, rows)
    recent: list[Any] = [
        [None if rng.random() < 0.05 else int(v) for v in rng.integers(0, 10**9, n)] for n in lengths
    ]
    for i in range(0, rows, 17):
        recent[i] = None
    return pa.table(
        {
            "row_id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, 10_000, rows, dtype=np.int64)),
            "recent": pa.array(recent, type=pa.list_(pa.int64())),
            "price": pa.array(rng.random(rows)),
            "rating": pa.array(rng.integers(1, 6, rows, dtype=np.int64)),
        }
    )


def write_store(root: Path, files: list[pa.Table]) -> Path:
    part = root / "store" / T0.strftime("%Y-%m-%d") / T0.strftime("%H")
    part.mkdir(parents=True)
    for f, t in enumerate(files):
        pq.write_table(t, part / f"part-{f}.parquet", row_group_size=400)
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "lists"},
        "spec": {
            "planning": {"target_rows_per_task": 600, "min_rows_per_task": 100},
            "sources": [
                {
                    "name": "clicks",
                    "type": "files",
                    "format": "parquet",
                    "uri": str(root / "store"),
                    "path_template": "{date}/{hour}",
                    "granularity": "hour",
                    "schema": {
                        "sparse": ["user_id"],
                        "multi_hot": [{"column": "recent", "pooling": "mean", "max_length": 20}],
                        "dense": ["price"],
                        "label": {"rule": "rating >= 4"},
                        "transforms": [
                            {"column": "user_id", "hash_bucket": 1000},
                            {"column": "recent", "hash_bucket": 5000},
                        ],
                    },
                }
            ],
        },
    }
    spec_path = root / "data.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    return spec_path


def expected_lists(spec_path: Path, tables: list[pa.Table]) -> dict[int, list[int]]:
    """Each row's IDs as the transformer makes them in this process (the executors' must agree)."""
    schema = load_data_spec(spec_path).spec.sources[0].schema_
    out = BatchTransformer(schema, passthrough=["row_id"])(
        pa.concat_tables(tables).combine_chunks().to_batches()[0]
    )
    return dict(zip(out.column("row_id").to_pylist(), out.column("recent").to_pylist(), strict=True))


def test_list_ids_reach_the_loader_row_for_row(tmp_path: Path, token: str, executors: list[Any]) -> None:
    tables = [table(f * ROWS_PER_FILE, ROWS_PER_FILE, seed=f) for f in range(2)]
    spec_path = write_store(tmp_path, tables)
    expected = expected_lists(spec_path, tables)
    assert any(len(v) == 20 for v in expected.values()) and any(not v for v in expected.values())
    graph = plan(load_data_spec(spec_path), T0, T0 + timedelta(hours=1), PlanOptions())
    server = start_dispatcher(graph, token)
    try:
        executors += [ExecutorProcess(f"e{i}", server.location, spec_path, token) for i in range(2)]
        loader = PrimusDataLoader(
            server.location, token, sparse=["user_id"], dense=["price"], extra=["row_id"], stall_timeout_s=60
        )
        got: dict[int, list[int]] = {}
        for batch in loader:
            bag = batch.bags["recent"]
            assert bag.offsets.shape[0] == len(batch) and bag.ids.dtype == bag.offsets.dtype
            ends = [*bag.offsets.tolist()[1:], bag.ids.shape[0]]
            for row_id, start, end in zip(
                batch.extra["row_id"].tolist(), bag.offsets.tolist(), ends, strict=True
            ):
                got[int(row_id)] = bag.ids[start:end].tolist()
        assert got == expected
    finally:
        server.stop()


def test_a_column_that_is_not_a_list_is_quarantined_naming_file_and_column(
    tmp_path: Path, token: str, executors: list[Any]
) -> None:
    good = table(0, ROWS_PER_FILE, seed=1)
    odd = table(ROWS_PER_FILE, 300, seed=2)
    odd = odd.set_column(odd.schema.get_field_index("recent"), "recent", pa.array(np.arange(300)))
    spec_path = write_store(tmp_path, [good, odd])
    graph = plan(load_data_spec(spec_path), T0, T0 + timedelta(hours=1), PlanOptions())
    server = start_dispatcher(graph, token, max_attempts=1, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, spec_path, token))
        loader = PrimusDataLoader(
            server.location, token, sparse=["user_id"], dense=["price"], extra=["row_id"], stall_timeout_s=60
        )
        assert sum(len(b) for b in loader) == ROWS_PER_FILE
        [errors] = DispatcherClient(server.location, token).status()["quarantined"].values()
        assert "part-1.parquet" in errors[0] and "'recent'" in errors[0]
        assert "a multi_hot column must hold lists of IDs; found type int64" in errors[0]
    finally:
        server.stop()
