"""A file rewritten after planning is refused, not trained: real files planned by the real planner,
then rewritten with the same schema and the same row count (what the plan's row count cannot see)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.errors import FileChangedError
from airflow_provider_primus.data.graph import _SLICE, TASK_SCHEMA, TaskGraph
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.hadoop.filesystem import _replacing_webhdfs
from tests.data.conftest import files_source, hour_dir, spec_doc, table, write

COLUMNS = ["user_id", "price"]


def _plan(root: Path, hours: list, fmt: str) -> TaskGraph:
    for i, t in enumerate(hours[:2]):
        write(hour_dir(root, t) / f"part-0.{fmt}", fmt, 50, offset=i * 50)
    spec = load_data_spec(spec_doc([files_source("s", root, fmt)]))
    return plan(spec, hours[0], hours[1] + timedelta(hours=1), PlanOptions(min_rows=1, target_rows=1000))


def _ids(task: Task, fmt: str) -> list[int]:
    return [
        i for b in read_task(task, fmt=fmt, columns=COLUMNS, batch_rows=16) for i in b["user_id"].to_pylist()
    ]


def _task_of(graph: TaskGraph, path: Path) -> Task:
    [task] = [t for t in graph.tasks if any(s.path == str(path) for s in t.slices)]
    return task


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_a_file_rewritten_after_planning_is_refused_and_an_unchanged_one_reads(
    tmp_path: Path, hours, fmt: str
) -> None:
    graph = _plan(tmp_path, hours, fmt)
    changed = hour_dir(tmp_path, hours[1]) / f"part-0.{fmt}"
    unchanged = hour_dir(tmp_path, hours[0]) / f"part-0.{fmt}"
    # Same schema, same row count, other rows (ids 1000..1049 were never planned).
    write(changed, fmt, 50, offset=1000)
    with pytest.raises(FileChangedError, match="changed after planning") as err:
        _ids(_task_of(graph, changed), fmt)
    assert err.value.path == str(changed) and str(changed) in str(err.value)
    assert "source 's'" in str(err.value)
    assert _ids(_task_of(graph, unchanged), fmt) == list(range(50))


def test_a_same_size_rewrite_with_the_modification_time_kept_is_caught_by_the_footer(
    tmp_path: Path, hours
) -> None:
    """A copy tool that keeps modification times (``cp -p``, ``rsync -t``) or a rewrite within one
    timestamp tick: size and time match; the Parquet footer's checksum does not."""
    path = hour_dir(tmp_path, hours[0]) / "part-0.parquet"
    path.parent.mkdir(parents=True)
    plain = {"compression": "none", "use_dictionary": False}
    pq.write_table(table(50), path, **plain)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path)]))
    graph = plan(spec, hours[0], hours[0] + timedelta(hours=1), PlanOptions(min_rows=1))
    [task] = graph.tasks
    [piece] = task.slices
    assert piece.mtime_ns is not None and piece.footer_checksum
    before = path.stat()
    pq.write_table(table(50, offset=10_000), path, **plain)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(FileChangedError, match=r"changed after planning.*footer checksum"):
        _ids(task, "parquet")


def test_the_identity_survives_the_plan_file_and_a_plan_written_before_it_still_loads(
    tmp_path: Path, hours
) -> None:
    graph = _plan(tmp_path / "store", hours, "parquet")
    out = tmp_path / "graph.parquet"
    graph.write(out)
    back = TaskGraph.read(out)
    assert back.tasks == graph.tasks and all(s.checked for t in back.tasks for s in t.slices)
    # A plan file of the previous release: slices without mtime_ns / footer_checksum.
    old_slice = pa.struct([f for f in _SLICE if f.name not in ("mtime_ns", "footer_checksum")])
    old_schema = pa.schema(
        [pa.field("slices", pa.list_(old_slice)) if f.name == "slices" else f for f in TASK_SCHEMA],
        metadata=pq.read_schema(out).metadata,
    )
    rows = pq.read_table(out).to_pylist()
    for row in rows:
        for s in row["slices"]:
            del s["mtime_ns"], s["footer_checksum"]
    old = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist(rows, old_schema), old)
    loaded = TaskGraph.read(old)
    assert [t.task_id for t in loaded.tasks] == [t.task_id for t in graph.tasks]
    assert not any(s.checked for t in loaded.tasks for s in t.slices)  # not recorded: not checked
    changed = hour_dir(tmp_path / "store", hours[1]) / "part-0.parquet"
    write(changed, "parquet", 50, offset=1000)
    assert _ids(_task_of(loaded, changed), "parquet") == list(range(1000, 1050))  # as before this check


def test_a_cached_plan_keeps_the_identity_it_was_planned_with(tmp_path: Path, hours) -> None:
    from airflow_provider_primus.data.cache import PlanCache

    for i, t in enumerate(hours[:2]):
        write(hour_dir(tmp_path / "store", t) / "part-0.parquet", "parquet", 50, offset=i * 50)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path / "store")]))
    cache = PlanCache(tmp_path / "cache.sqlite")
    try:
        first = plan(spec, hours[0], hours[2], PlanOptions(cache=cache, min_rows=1))
        changed = hour_dir(tmp_path / "store", hours[1]) / "part-0.parquet"
        write(changed, "parquet", 50, offset=1000)
        again = plan(spec, hours[0], hours[2], PlanOptions(cache=cache, min_rows=1))
    finally:
        cache.close()
    assert again.stats["s"].cached_partitions == 2 and again.tasks == first.tasks
    # The cache holds the files as planned; the rewritten one is refused, not trained.
    with pytest.raises(FileChangedError, match="changed after planning"):
        _ids(_task_of(again, changed), "parquet")


def test_webhdfs_listings_carry_the_modification_time() -> None:
    """WebHDFS's FileStatus (as LISTSTATUS and GETFILESTATUS answer it) gives ``modificationTime`` in
    ms; fsspec leaves it under that name, so without the mapping a listing has no mtime to plan."""
    status = json.loads(
        '{"accessTime":1733312345000,"blockSize":134217728,"length":2048,"modificationTime":1733312345678,'
        '"owner":"primus","pathSuffix":"part-0.parquet","permission":"644","replication":1,"type":"FILE"}'
    )
    info = _replacing_webhdfs()._process_info(status)
    import pyarrow.fs as pafs

    entry = pafs.FileInfo("/x", pafs.FileType.File, size=info["size"], mtime=info["mtime"])
    assert entry.mtime_ns == 1733312345678 * 1_000_000 and entry.size == 2048
