"""The data service's rows per second with and without a multi-hot column, in one run.

The same Parquet files (``primus bench dataplane``'s click log, 26 IDs and 13 dense values a row,
plus ``recent``: a list of ``LIST_LENGTH`` IDs a row) are served twice over one task graph: once
by a schema that declares ``recent`` as a multi-hot column (hashed, capped at ``LIST_LENGTH``), once
by one that leaves it out (Parquet then never reads it). The two variants alternate over
``rounds`` rounds, one executor process each time, and the figures are medians: what a 20-long list
adds to reading, transforming, sending over Flight and converting to tensors.
"""

from __future__ import annotations

import logging
import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.bench.dataplane import (
    HASH_BUCKETS,
    ROW_GROUP_ROWS,
    START,
    click_table,
    run_service,
    spec_document,
)
from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.planner import PlanOptions, plan

log = logging.getLogger(__name__)

__all__ = ["LIST_COLUMN", "LIST_LENGTH", "list_column_speeds"]

LIST_COLUMN = "recent"
LIST_LENGTH = 20
FILES = 2
BATCH_ROWS = 4096


def _write(root: Path, rows: int) -> None:
    per_file = -(-rows // FILES)
    part = root / START.strftime("%Y-%m-%d") / START.strftime("%H")
    part.mkdir(parents=True, exist_ok=True)
    for index in range(FILES):
        table = click_table(index, per_file, START)
        rng = np.random.default_rng(index)
        ids = pa.array(rng.integers(0, 10_000_000, per_file * LIST_LENGTH, dtype=np.int64))
        offsets = pa.array(np.arange(0, per_file * LIST_LENGTH + 1, LIST_LENGTH, dtype=np.int32))
        table = table.append_column(LIST_COLUMN, pa.ListArray.from_arrays(offsets, ids))
        pq.write_table(table, part / f"part-{index:03d}.parquet", row_group_size=ROW_GROUP_ROWS)
    (part / "_SUCCESS").touch()


def _spec(root: Path, with_list: bool) -> Path:
    document = spec_document(root)
    schema = document["spec"]["sources"][0]["schema"]
    if with_list:
        schema["multi_hot"] = [{"column": LIST_COLUMN, "max_length": LIST_LENGTH}]
        schema["transforms"].append({"column": LIST_COLUMN, "hash_bucket": HASH_BUCKETS})
    path = root.parent / f"data-{'multi' if with_list else 'single'}-hot.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def list_column_speeds(root: Path, rows: int, rounds: int = 3) -> dict[str, Any]:
    """``multi_hot_rows_s`` and ``single_hot_rows_s`` (medians over ``rounds``) of ``rows`` rows."""
    log.info("the data service with and without a %d-long list column", LIST_LENGTH)
    store = root / "store"
    _write(store, rows)
    specs = {name: _spec(store, name == "multi") for name in ("multi", "single")}
    graph = plan(load_data_spec(specs["single"]), START, START + timedelta(hours=1), PlanOptions())
    planned = sum(t.rows or 0 for t in graph.tasks)
    speeds: dict[str, list[float]] = {"multi": [], "single": []}
    for r in range(rounds):
        for name in ("multi", "single") if r % 2 == 0 else ("single", "multi"):
            got = run_service(
                specs[name],
                graph,
                executors=1,
                batch_rows=BATCH_ROWS,
                message_rows=BATCH_ROWS,
                window=4,
                credits=8,
            )
            if got.rows != planned:
                raise BenchmarkError(f"{name}-hot: delivered {got.rows} rows, planned {planned}")
            speeds[name].append(got.rows / got.wall_s)
    return {
        "multi_hot_rows_s": round(statistics.median(speeds["multi"])),
        "single_hot_rows_s": round(statistics.median(speeds["single"])),
        "multi_hot_list_length": LIST_LENGTH,
        "multi_hot_bench_rows": planned,
    }
