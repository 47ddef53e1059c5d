"""Delta Lake tables as history: planned from their log, re-planned by version reading only the new
commits, their compactions reported, deletion vectors refused. Real tables written with deltalake."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.cache import PlanCache
from airflow_provider_primus.data.errors import TableError, TableRewrittenError
from airflow_provider_primus.data.graph import TaskGraph
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from tests.data.conftest import spec_doc
from tests.data.sources.iceberg_tables import T0, rows

pytest.importorskip("deltalake")


def write(root: Path, hours: list[int], first_id: int = 0, mode: str = "append") -> None:
    from deltalake import write_deltalake

    table = rows(hours, first_id=first_id)
    hour = pa.array([t.strftime("%Y-%m-%d-%H") for t in table.column("ts").to_pylist()])
    write_deltalake(str(root / "clicks"), table.append_column("hour", hour), mode=mode, partition_by=["hour"])


def source(root: Path, **kw: Any) -> dict[str, Any]:
    return {
        "name": "history",
        "type": "delta",
        "uri": f"file://{root}/clicks",
        "granularity": "hour",
        "schema": {"sparse": ["user_id", "item_id"], "label": {"column": "clicked"}, "event_time": "ts"},
        **kw,
    }


def planned(root: Path, hours: int, cache: PlanCache | None = None, **kw: Any) -> TaskGraph:
    spec = load_data_spec(spec_doc([source(root, **kw)]))
    return plan(
        spec, T0, T0 + timedelta(hours=hours), PlanOptions(cache=cache, min_rows=1, target_rows=10_000)
    )


def read_ids(root: Path, graph: TaskGraph) -> list[int]:
    src = load_data_spec(spec_doc([source(root)])).spec.source("history")
    fs, _ = history_filesystem(src)
    assert read_fields(src) is None  # Delta files carry the schema's names
    return sorted(
        r
        for t in graph.tasks
        for b in read_task(t, fmt="parquet", columns=["row_id"], batch_rows=1000, filesystem=fs)
        for r in b.column(0).to_pylist()
    )


def test_a_range_is_planned_from_the_log_one_window_per_hour(tmp_path: Path) -> None:
    write(tmp_path, [0, 1], first_id=0)
    write(tmp_path, [2, 3], first_id=40)
    graph = planned(tmp_path, 3)
    stats = graph.stats["history"]
    assert stats.partitions == 3 and stats.files == 3 and stats.rows == 60
    assert read_ids(tmp_path, graph) == list(range(60))


def test_a_new_version_is_planned_by_reading_only_the_commits_since(tmp_path: Path) -> None:
    for day in range(2):
        write(tmp_path, list(range(24 * day, 24 * day + 24)), first_id=480 * day)
    cache = PlanCache(tmp_path / "cache.sqlite")
    first = planned(tmp_path, 48, cache)
    assert first.stats["history"].rows == 960
    write(tmp_path, list(range(48, 72)), first_id=960)  # the next day: one commit
    again = planned(tmp_path, 72, cache)
    # One listing of _delta_log/ for the newest version, then the one new commit.
    assert again.stats["history"].round_trips == 2
    assert again.tasks == planned(tmp_path, 72).tasks
    assert read_ids(tmp_path, again) == list(range(1440))
    unchanged = planned(tmp_path, 72, cache)
    assert unchanged.stats["history"].round_trips == 1 and unchanged.tasks == again.tasks
    cache.close()


def test_a_compaction_of_planned_files_is_reported_or_refused(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    write(tmp_path, [0, 1], first_id=0)
    write(tmp_path, [0, 1], first_id=40)
    cache = PlanCache(tmp_path / "cache.sqlite")
    assert planned(tmp_path, 2, cache).stats["history"].files == 4
    DeltaTable(str(tmp_path / "clicks")).optimize.compact()
    with pytest.raises(
        TableRewrittenError, match=r"operations since snapshot 1: OPTIMIZE\).*2026-03-01T00:00"
    ):
        planned(tmp_path, 2, cache)
    again = planned(tmp_path, 2, cache, on_rewrite={"policy": "replan"})
    assert again.stats["history"].rewritten_partitions == 2 and again.stats["history"].files == 2
    assert read_ids(tmp_path, again) == list(range(80))
    cache.close()


def test_deletion_vectors_and_time_travel(tmp_path: Path) -> None:
    write(tmp_path, [0], first_id=0)
    write(tmp_path, [1], first_id=20)
    assert planned(tmp_path, 2, version=0).stats["history"].rows == 20
    cache = PlanCache(tmp_path / "cache.sqlite")
    planned(tmp_path, 2, cache)
    # A DELETE as Spark writes it with deletion vectors on: the file stays, a vector marks the rows.
    log = tmp_path / "clicks" / "_delta_log"
    added = json.loads((log / f"{1:020d}.json").read_text().splitlines()[-1])["add"]
    vector = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    commit = [
        {"commitInfo": {"operation": "DELETE"}},
        {"remove": {"path": added["path"], "dataChange": True, "deletionTimestamp": 0}},
        {"add": {**added, "deletionVector": vector}},
    ]
    (log / f"{2:020d}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    with pytest.raises(
        TableError, match=r"has deletion vectors .*refused rather than trained with deleted rows"
    ):
        planned(tmp_path, 2, cache)
    cache.close()
