"""Iceberg tables as history: planned from their manifests, re-planned incrementally, their rewrites,
schema evolution and row-level deletes each met as docs/data.md says. Real tables (pyiceberg, a SQL
catalog on SQLite, a warehouse on local disk)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.data.cache import PlanCache
from airflow_provider_primus.data.errors import MissingPartitionError, TableError, TableRewrittenError
from airflow_provider_primus.data.graph import TaskGraph
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from airflow_provider_primus.data.transforms import SchemaMismatchError
from tests.data.conftest import spec_doc
from tests.data.sources.iceberg_tables import T0, catalog, create, rows, source

pytest.importorskip("pyiceberg")


def planned(root: Path, hours: int, cache: PlanCache | None = None, **kw: Any) -> TaskGraph:
    spec = load_data_spec(spec_doc([source(root, **kw)]))
    return plan(
        spec, T0, T0 + timedelta(hours=hours), PlanOptions(cache=cache, min_rows=1, target_rows=10_000)
    )


def read_ids(root: Path, graph: TaskGraph, columns: tuple[str, ...] = ("row_id",), **kw: Any) -> pa.Table:
    src = load_data_spec(spec_doc([source(root, **kw)])).spec.source("history")
    fs, _ = history_filesystem(src)
    parts = [
        pa.Table.from_batches([b])
        for t in graph.tasks
        for b in read_task(
            t, fmt="parquet", columns=list(columns), batch_rows=1000, filesystem=fs, fields=read_fields(src)
        )
    ]
    return pa.concat_tables(parts) if parts else pa.table({c: [] for c in columns})


def test_a_range_is_planned_from_the_manifests_one_window_per_hour_partition(tmp_path: Path) -> None:
    table = create(tmp_path)
    table.append(rows([0, 1, 2], first_id=0))
    table.append(rows([3, 4], first_id=60))
    graph = planned(tmp_path, 4)  # hours 0-3 of 0-4
    stats = graph.stats["history"]
    assert stats.partitions == 4 and stats.files == 4 and stats.rows == 80
    assert sorted({t.group for t in graph.tasks}) == [
        f"history@{(T0 + timedelta(hours=h)).isoformat()}" for h in range(4)
    ]
    # Metadata, the manifest list, the two manifests: no listing, no footer read.
    assert stats.round_trips == 4
    assert sorted(read_ids(tmp_path, graph).column("row_id").to_pylist()) == list(range(80))
    assert not graph.missing and not graph.problems


def test_a_table_not_partitioned_by_time_is_windowed_by_each_files_lower_bound(tmp_path: Path) -> None:
    table = create(tmp_path, partition=None)
    for h in range(3):
        table.append(rows([h], first_id=20 * h))
    graph = planned(tmp_path, 2, granularity="hour")
    assert graph.stats["history"].partitions == 2
    assert sorted(read_ids(tmp_path, graph).column("row_id").to_pylist()) == list(range(40))


def test_a_new_snapshot_is_planned_incrementally_reading_only_its_manifest(tmp_path: Path) -> None:
    table = create(tmp_path)
    for day in range(3):
        table.append(rows(list(range(24 * day, 24 * day + 24)), per_hour=2, first_id=48 * day))
    cache = PlanCache(tmp_path / "cache.sqlite")
    first = planned(tmp_path, 72, cache)
    assert first.stats["history"].round_trips == 2 + 3
    table.append(rows(list(range(72, 96)), per_hour=2, first_id=144))  # the next day lands
    again = planned(tmp_path, 96, cache)
    # The metadata file and the new manifest list, then only the one manifest not decoded before.
    assert again.stats["history"].round_trips == 2 + 1
    assert again.stats["history"].rows == 192
    assert again.tasks[: len(first.tasks)] != [] and set(first.tasks) <= set(again.tasks)
    full = planned(tmp_path, 96)
    assert full.tasks == again.tasks
    cache.close()


@pytest.mark.parametrize("policy", ["fail", "replan"])
def test_an_overwrite_of_planned_files_is_never_silently_read_again(tmp_path: Path, policy: str) -> None:
    table = create(tmp_path)
    table.append(rows([0, 1], first_id=0))
    table.append(rows([0, 1], first_id=40))  # two files per hour, as a streaming writer leaves them
    cache = PlanCache(tmp_path / "cache.sqlite")
    before = planned(tmp_path, 2, cache, on_rewrite={"policy": policy})
    assert before.stats["history"].files == 4
    # Compaction: the hour's rows rewritten into one file each (what an overwrite also does).
    table.overwrite(table.scan().to_arrow())
    if policy == "fail":
        with pytest.raises(
            TableRewrittenError, match=r"rewrote files of windows planned before.*2026-03-01T00:00"
        ) as err:
            planned(tmp_path, 2, cache, on_rewrite={"policy": policy})
        assert "operations since snapshot" in str(err.value) and "delete, append" in str(err.value)
        assert "on_rewrite.policy 'replan'" in str(err.value)
        return
    after = planned(tmp_path, 2, cache, on_rewrite={"policy": policy})
    assert after.stats["history"].rewritten_partitions == 2
    assert any("planned again from the new files" in p for p in after.problems)
    assert sorted(read_ids(tmp_path, after).column("row_id").to_pylist()) == list(range(80))
    cache.close()


def test_columns_are_read_by_field_id_across_renames_and_additions(tmp_path: Path) -> None:
    from pyiceberg.types import LongType

    table = create(tmp_path)
    table.append(rows([0], first_id=0))
    with table.update_schema() as update:
        update.rename_column("item_id", "item")
        update.add_column("campaign", LongType())
    table = catalog(tmp_path).load_table("lake.clicks")
    newer = rows([1], first_id=20).rename_columns(["row_id", "user_id", "item", "price", "clicked", "ts"])
    table.append(newer.append_column("campaign", pa.array([7] * 20, pa.int64())))
    schema = {"sparse": ["user_id", "item", "campaign"], "label": {"column": "clicked"}, "event_time": "ts"}
    graph = planned(tmp_path, 2, schema=schema)
    out = read_ids(tmp_path, graph, ("row_id", "item", "campaign"), schema=schema).sort_by("row_id")
    assert out.column("item").to_pylist() == [i % 31 for i in range(40)]  # the old files' item_id
    assert out.column("campaign").to_pylist() == [None] * 20 + [7] * 20  # added later: null before


def test_a_column_the_table_lacks_and_a_required_one_a_file_lacks_are_named(tmp_path: Path) -> None:
    from pyiceberg.types import LongType

    table = create(tmp_path)
    table.append(rows([0]))
    schema = {"sparse": ["user_id", "advertiser"], "label": {"column": "clicked"}, "event_time": "ts"}
    with pytest.raises(TableError, match=r"table 'lake.clicks' has no column 'advertiser'"):
        planned(tmp_path, 1, schema=schema)
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.add_column("advertiser", LongType(), required=True)
    graph = planned(tmp_path, 1, schema=schema)
    with pytest.raises(SchemaMismatchError, match=r"advertiser.*required by the table but not in this file"):
        read_ids(tmp_path, graph, ("advertiser",), schema=schema)


def test_row_level_deletes_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    """pyiceberg writes deletes copy-on-write; the table here gets a real position-delete file the way
    Spark's merge-on-read leaves one, in a delete manifest of its own."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2

    table = create(tmp_path)
    table.append(rows([0]))
    data_file = next(iter(table.scan().plan_files())).file
    deletes = tmp_path / "warehouse" / "pos-deletes.parquet"
    pq.write_table(pa.table({"file_path": [data_file.file_path], "pos": pa.array([3], pa.int64())}), deletes)
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=f"file://{deletes}",
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        record_count=1,
        file_size_in_bytes=deletes.stat().st_size,
    )
    delete_file.spec_id = data_file.spec_id
    original = ManifestWriterV2.content
    ManifestWriterV2.content = lambda self: ManifestContent.DELETES  # type: ignore[method-assign]
    try:
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            append.append_data_file(delete_file)
    finally:
        ManifestWriterV2.content = original  # type: ignore[method-assign]
    with pytest.raises(
        TableError, match=r"row-level delete files .*refused rather than trained with deleted rows"
    ):
        planned(tmp_path, 1)


def test_time_travel_missing_windows_and_refs(tmp_path: Path) -> None:
    table = create(tmp_path)
    table.append(rows([0]))
    first = table.current_snapshot().snapshot_id
    table.append(rows([1], first_id=20))
    assert planned(tmp_path, 2, snapshot_id=first).stats["history"].rows == 20
    assert planned(tmp_path, 2).stats["history"].rows == 40
    with pytest.raises(TableError, match=r"no branch or tag 'nightly' \(refs: main\)"):
        planned(tmp_path, 2, ref="nightly")
    gaps = planned(tmp_path, 3)  # hour 2 has no file: a gap by default
    assert [m.time for m in gaps.missing] == [T0 + timedelta(hours=2)]
    with pytest.raises(MissingPartitionError, match="no data file in snapshot"):
        planned(tmp_path, 3, missing={"policy": "fail"})


def test_the_contract_refuses_what_it_cannot_mean(tmp_path: Path) -> None:
    bad = source(tmp_path, table="clicks", snapshot_id=1, ref="main")
    bad["catalog"] = {"type": "sql", "properties": {"s3.secret-access-key": "x"}}
    bad["schema"].pop("event_time")
    with pytest.raises(SpecError) as err:
        load_data_spec(spec_doc([bad]))
    text = str(err.value)
    assert "must be 'namespace.table'" in text
    assert "must not hold secrets (s3.secret-access-key)" in text
