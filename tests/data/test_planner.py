"""Planning real files written by pyarrow, and Kafka topics on the real broker."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from airflow_provider_primus.bench.delayed_fs import delayed_filesystem
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data import planner
from airflow_provider_primus.data.cache import SCHEMA, PlanCache
from airflow_provider_primus.data.graph import TaskGraph
from airflow_provider_primus.data.model import FilePartition, Task
from airflow_provider_primus.data.planner import PlanCancelled, PlanOptions, plan
from airflow_provider_primus.data.sizing import tasks_for_partition
from airflow_provider_primus.data.sources.files import MissingPartitionError
from tests.data.conftest import T0, files_source, hour_dir, spec_doc, write


def build_store(
    root: Path, hours, fmt: str = "parquet", *, files: int = 2, rows: int = 50, marker: bool = True
) -> None:
    ext = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}[fmt]
    for i, t in enumerate(hours):
        for f in range(files):
            write(hour_dir(root, t) / f"part-{f}.{ext}", fmt, rows, offset=(i * files + f) * rows)
        if marker:
            (hour_dir(root, t) / "_SUCCESS").touch()


def slices_cover(graph: TaskGraph) -> list[tuple[str, int | None, int | None]]:
    return sorted((s.path, s.row_group_start, s.row_group_end) for t in graph.tasks for s in t.slices)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_plans_real_files_across_hour_partitions(tmp_path: Path, hours, fmt: str) -> None:
    build_store(tmp_path / fmt, hours, fmt)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path / fmt, fmt, success_marker="_SUCCESS")]))
    graph = plan(spec, hours[0], hours[-1] + timedelta(hours=1), PlanOptions(min_rows=1, target_rows=1000))
    totals = graph.totals()
    assert totals["partitions"] == 6 and totals["files"] == 12 and totals["tasks"] == 12
    assert not graph.missing and not graph.problems
    if fmt == "parquet":
        assert totals["rows"] == 600
    # The marker and other non-data files never become tasks.
    assert all(s.path.endswith(fmt) for t in graph.tasks for s in t.slices)


def test_day_partitions(tmp_path: Path) -> None:
    for d in range(3):
        write(tmp_path / (T0 + timedelta(days=d)).strftime("%Y-%m-%d") / "a.parquet", "parquet", 10)
    spec = load_data_spec(spec_doc([files_source("daily", tmp_path, granularity="day")]))
    graph = plan(spec, T0, T0 + timedelta(days=3), PlanOptions(min_rows=1))
    assert graph.totals()["partitions"] == 3 and graph.totals()["rows"] == 30
    assert len({t.group for t in graph.tasks}) == 3


def test_missing_marker_policy_fail(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours)
    (hour_dir(tmp_path, hours[2]) / "_SUCCESS").unlink()
    spec = load_data_spec(spec_doc([files_source("s", tmp_path, success_marker="_SUCCESS")]))
    with pytest.raises(MissingPartitionError, match="no success marker _SUCCESS") as exc:
        plan(spec, hours[0], hours[-1] + timedelta(hours=1))
    assert exc.value.missing.time == hours[2]


def test_missing_marker_policy_skip(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours)
    (hour_dir(tmp_path, hours[2]) / "_SUCCESS").unlink()
    spec = load_data_spec(
        spec_doc([files_source("s", tmp_path, success_marker="_SUCCESS", missing={"policy": "skip"})])
    )
    graph = plan(spec, hours[0], hours[-1] + timedelta(hours=1), PlanOptions(min_rows=1))
    assert [m.time for m in graph.missing] == [hours[2]]
    assert graph.totals()["partitions"] == 5 and graph.totals()["missing_partitions"] == 1
    assert str(hour_dir(tmp_path, hours[2])) not in {
        s.path.rsplit("/", 1)[0] for t in graph.tasks for s in t.slices
    }


def test_missing_marker_policy_wait_until_it_arrives(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours[:2])
    late = hour_dir(tmp_path, hours[1]) / "_SUCCESS"
    late.unlink()
    spec = load_data_spec(
        spec_doc(
            [
                files_source(
                    "s", tmp_path, success_marker="_SUCCESS", missing={"policy": "wait", "timeout_s": 30}
                )
            ]
        )
    )
    writer = threading.Timer(0.5, late.touch)  # an upstream job finishing while the planner waits
    writer.start()
    started = time.monotonic()
    graph = plan(spec, hours[0], hours[2], PlanOptions(min_rows=1))
    writer.join()
    assert graph.totals()["partitions"] == 2 and not graph.missing
    assert time.monotonic() - started < 30


def test_missing_marker_policy_wait_times_out(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours[:1], marker=False)
    spec = load_data_spec(
        spec_doc(
            [
                files_source(
                    "s", tmp_path, success_marker="_SUCCESS", missing={"policy": "wait", "timeout_s": 1}
                )
            ]
        )
    )
    with pytest.raises(MissingPartitionError, match="waited 1"):
        plan(spec, hours[0], hours[1])


def test_large_file_split_into_row_group_ranges_and_small_files_grouped(tmp_path: Path) -> None:
    part = hour_dir(tmp_path, T0)
    write(part / "big.parquet", "parquet", 1000, row_group_size=100)  # 10 row groups
    for i in range(7):
        write(part / f"small-{i}.parquet", "parquet", 10, offset=2000 + i * 10)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path)]))
    graph = plan(spec, T0, T0 + timedelta(hours=1), PlanOptions(target_rows=250, min_rows=50))
    big = [s for t in graph.tasks for s in t.slices if s.path.endswith("big.parquet")]
    # 10 row groups of 100 rows around a 250-row target: [0,3) [3,6) [6,9) [9,10).
    assert sorted((s.row_group_start, s.row_group_end) for s in big) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    covered = [g for s in big for g in range(s.row_group_start or 0, s.row_group_end or 0)]
    assert sorted(covered) == list(range(10)), "a row group planned twice or never"
    small_tasks = [t for t in graph.tasks if any("small-" in s.path for s in t.slices)]
    small_paths = sorted(s.path for t in small_tasks for s in t.slices)
    assert len(small_paths) == 7 == len(set(small_paths))
    assert len(small_tasks) == 1 and small_tasks[0].rows == 70
    assert graph.totals()["rows"] == 1070


def test_task_ids_are_deterministic_and_graph_round_trips(tmp_path: Path, hours) -> None:
    build_store(tmp_path / "a", hours)
    build_store(tmp_path / "b", hours, fmt="csv")
    doc = spec_doc(
        [files_source("a", tmp_path / "a"), files_source("b", tmp_path / "b", "csv")],
        ordered=True,
        mixture=[{"source": "a", "weight": 1.0, "priority": 2}, {"source": "b", "weight": 1.0}],
    )
    spec = load_data_spec(doc)
    end = hours[-1] + timedelta(hours=1)
    one = plan(spec, hours[0], end, PlanOptions(workers=1, min_rows=1))
    two = plan(spec, hours[0], end, PlanOptions(workers=16, min_rows=1))
    assert [t.task_id for t in one.tasks] == [t.task_id for t in two.tasks]
    assert len({t.task_id for t in one.tasks}) == len(one.tasks)
    assert {t.priority for t in one.tasks if t.source == "a"} == {2}
    # Ordered: a barrier between consecutive hours of each source.
    assert len(one.edges) == 2 * 5
    out = tmp_path / "graph.parquet"
    one.write(out)
    back = TaskGraph.read(out)
    assert back.tasks == one.tasks and back.edges == one.edges and back.summary() == one.summary()


def test_incremental_plan_lists_only_the_new_partitions_and_equals_a_full_plan(tmp_path: Path, hours) -> None:
    build_store(tmp_path / "s", hours)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path / "s", success_marker="_SUCCESS")]))
    fs, handler = delayed_filesystem(0)

    def counted(uri: str) -> tuple[pafs.FileSystem, str]:
        return fs, uri

    cache = PlanCache(tmp_path / "cache.sqlite")
    plan(spec, hours[0], hours[4], PlanOptions(cache=cache, filesystem=counted, min_rows=1))
    first_calls = handler.calls
    handler.reset()
    incremental = plan(
        spec,
        hours[0],
        hours[5] + timedelta(hours=1),
        PlanOptions(cache=cache, filesystem=counted, min_rows=1),
    )
    # Two new hours: per hour one listing (which also shows the marker) and two footers.
    assert handler.counts == {"list": 2, "open": 4}
    assert handler.calls == 2 * 3 < first_calls
    assert incremental.stats["s"].cached_partitions == 4
    full = plan(spec, hours[0], hours[5] + timedelta(hours=1), PlanOptions(min_rows=1))
    assert incremental.tasks == full.tasks
    assert incremental.summary()["tasks"] == full.summary()["tasks"]
    cache.close()


def test_cached_tasks_are_reused_under_the_same_sizing_and_cut_again_under_another(
    tmp_path: Path, hours, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_store(tmp_path / "s", hours[:4], files=3, rows=40)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path / "s", success_marker="_SUCCESS")]))
    fs, handler = delayed_filesystem(0)
    sized: list[str] = []  # partitions cut into tasks (rather than decoded from the cache)

    def counting(part: FilePartition, **kw: Any) -> list[Task]:
        sized.append(part.path)
        return tasks_for_partition(part, **kw)

    monkeypatch.setattr(planner, "tasks_for_partition", counting)
    cache = PlanCache(tmp_path / "cache.sqlite")
    window = (hours[0], hours[4])

    def cached_plan(**sizing: int) -> TaskGraph:
        sized.clear()
        handler.reset()
        return plan(spec, *window, PlanOptions(cache=cache, filesystem=lambda uri: (fs, uri), **sizing))

    grouped = cached_plan(min_rows=50, target_rows=80)
    assert grouped.stats["s"].tasks == 8 and len(sized) == 4  # per hour 3 x 40 rows: 80 + 40
    again = cached_plan(min_rows=50, target_rows=80)
    assert again.tasks == grouped.tasks and handler.calls == 0 and sized == []
    assert again.stats["s"].files == 12 and again.stats["s"].cached_partitions == 4

    # Another sizing: cut again from the cached files (still no round trip), as a fresh plan would,
    # and keep those tasks for the next plan with that sizing.
    whole = cached_plan(min_rows=1)
    assert handler.calls == 0 and len(sized) == 4
    assert whole.stats["s"].tasks == 12 and whole.stats["s"].cached_partitions == 4
    assert whole.tasks == plan(spec, *window, PlanOptions(min_rows=1)).tasks
    assert cached_plan(min_rows=1).tasks == whole.tasks and sized == []
    cache.close()


def test_a_cache_written_before_tasks_were_kept_is_upgraded_in_place(tmp_path: Path, hours) -> None:
    build_store(tmp_path / "s", hours[:2])
    spec = load_data_spec(spec_doc([files_source("s", tmp_path / "s", success_marker="_SUCCESS")]))
    window = (hours[0], hours[2])
    path = tmp_path / "cache.sqlite"
    cache = PlanCache(path)
    expected = plan(spec, *window, PlanOptions(cache=cache, min_rows=1))
    cache.close()
    with sqlite3.connect(path) as db:  # the first release's table: files only
        rows = db.execute("SELECT fingerprint, time, files FROM partitions").fetchall()
        db.execute("DROP TABLE partitions")
        db.execute(SCHEMA)
        db.executemany("INSERT INTO partitions VALUES (?, ?, ?)", rows)
    fs, handler = delayed_filesystem(0)
    cache = PlanCache(path)
    graph = plan(spec, *window, PlanOptions(cache=cache, filesystem=lambda uri: (fs, uri), min_rows=1))
    assert graph.tasks == expected.tasks and handler.calls == 0 and graph.stats["s"].cached_partitions == 2
    cache.close()


def test_unreadable_footer_is_reported_not_dropped(tmp_path: Path) -> None:
    part = hour_dir(tmp_path, T0)
    write(part / "good.parquet", "parquet", 10)
    (part / "bad.parquet").write_bytes(b"PAR1 this is not a parquet file")
    spec = load_data_spec(spec_doc([files_source("s", tmp_path)]))
    graph = plan(spec, T0, T0 + timedelta(hours=1), PlanOptions(min_rows=1))
    assert len(graph.problems) == 1 and "bad.parquet" in graph.problems[0]
    assert graph.stats["s"].unreadable_files == 1
    assert any(s.path.endswith("bad.parquet") for t in graph.tasks for s in t.slices)


def write_times(path: Path, times: pa.Array) -> None:
    """A small Parquet file whose ``ts`` column holds ``times`` (two row groups, with statistics)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(times)
    ids = list(range(n))
    table = pa.table({"user_id": ids, "item_id": ids, "price": [1.0] * n, "rating": [5] * n, "ts": times})
    pq.write_table(table, path, row_group_size=2)


def timed_source(root: Path, event_time: Any, **kw: Any) -> dict[str, Any]:
    source = files_source("history", root, **kw)
    source["schema"] = {**source["schema"], "event_time": event_time}
    return source


def test_epoch_seconds_read_as_milliseconds_are_a_planning_warning(tmp_path: Path, hours) -> None:
    seconds = int(T0.timestamp())
    for i, t in enumerate(hours[:3]):
        write_times(
            hour_dir(tmp_path, t) / "part-0.parquet", pa.array([seconds + i * 3600 + k for k in range(4)])
        )
    cache = PlanCache(tmp_path / "cache.sqlite")
    spec = load_data_spec(spec_doc([timed_source(tmp_path, "ts")]))
    window = (hours[0], hours[3])
    for _ in range(2):  # planned, then from the cache: the statistics are cached with the files
        graph = plan(spec, *window, PlanOptions(min_rows=1, cache=cache))
        assert graph.stats["history"].implausible_event_time_files == 3
        (finding,) = graph.event_times
        assert (finding.source, finding.column, finding.fits) == ("history", "ts", ("s",))
        assert (finding.implausible, finding.checked) == (3, 3) and not graph.problems
        (warning,) = graph.summary()["warnings"]
        assert "3 of 3 files" in warning and "1970-01-" in warning and "{column: ts, unit: s}" in warning
    assert TaskGraph.read(_written(graph, tmp_path)).summary() == graph.summary()
    declared = load_data_spec(spec_doc([timed_source(tmp_path, {"column": "ts", "unit": "s"})]))
    graph = plan(declared, *window, PlanOptions(min_rows=1, cache=cache))
    assert not graph.event_times and graph.stats["history"].implausible_event_time_files == 0
    cache.close()


def test_timestamp_columns_are_judged_without_a_unit(tmp_path: Path) -> None:
    good = [T0 + timedelta(minutes=k) for k in range(3)]
    write_times(hour_dir(tmp_path, T0) / "good.parquet", pa.array(good, pa.timestamp("ms", tz="UTC")))
    future = [datetime(2031, 1, 1, tzinfo=UTC)] * 3
    write_times(hour_dir(tmp_path, T0) / "late.parquet", pa.array(future, pa.timestamp("us", tz="UTC")))
    spec = load_data_spec(spec_doc([timed_source(tmp_path, "ts")]))
    graph = plan(spec, T0, T0 + timedelta(hours=1), PlanOptions(min_rows=1))
    (finding,) = graph.event_times
    assert (finding.implausible, finding.checked, finding.integers) == (1, 2, False)
    assert finding.example is not None and finding.example.endswith("late.parquet")
    assert "2031-01-01" in finding.message() and "declare" not in finding.message()


def _written(graph: TaskGraph, root: Path) -> Path:
    out = root / "graph.parquet"
    graph.write(out)
    return out


def test_kafka_partitions_planned_from_timestamps_on_the_real_broker(kafka_broker, new_topic) -> None:
    topic = new_topic("plan", partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    base_ms = int(T0.timestamp() * 1000)
    for i in range(400):  # one record per second of event time, alternating partitions
        producer.send(topic, value=b"{}", partition=i % 2, timestamp_ms=base_ms + i * 1000)
    producer.flush()
    producer.close()
    source = {
        "name": "events",
        "type": "kafka",
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "topic": topic,
        "value_format": "json",
        "event_time_field": "ts",
        "start": {"policy": "timestamp", "timestamp": (T0 + timedelta(seconds=100)).isoformat()},
        "schema": {"sparse": ["user_id"], "label": {"column": "clicked"}},
    }
    spec = load_data_spec(spec_doc([source]))
    bounded = plan(
        spec, T0 + timedelta(seconds=100), T0 + timedelta(seconds=300), PlanOptions(target_rows=40)
    )
    ranges = sorted((t.partition, t.start_offset, t.end_offset) for t in bounded.tasks)
    assert sum((e or 0) - s for _, s, e in ranges) == 200
    assert {p for p, _, _ in ranges} == {0, 1}
    assert min(s for p, s, _ in ranges if p == 0) == 50 and max(e or 0 for p, _, e in ranges if p == 0) == 150
    assert all((e or 0) - s <= 40 for _, s, e in ranges)
    stream = plan(spec, T0 + timedelta(seconds=100), None)
    assert sorted((t.partition, t.start_offset, t.end_offset) for t in stream.tasks) == [
        (0, 50, None),
        (1, 50, None),
    ]


def test_cancellation_stops_the_plan_and_wakes_waiting_partitions(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours, marker=False)  # every partition waits for a marker that never comes
    spec = load_data_spec(
        spec_doc(
            [
                files_source(
                    "s", tmp_path, success_marker="_SUCCESS", missing={"policy": "wait", "timeout_s": 600}
                )
            ]
        )
    )
    options = PlanOptions(min_rows=1)
    seen = []

    def progress(p) -> None:
        seen.append(p)
        threading.Timer(0.2, options.cancel.set).start()  # e.g. Ctrl-C or the Airflow task being killed

    options.progress = progress
    started = time.monotonic()
    with pytest.raises(PlanCancelled):
        plan(spec, hours[0], hours[-1] + timedelta(hours=1), options)
    assert time.monotonic() - started < 30, "waiting partitions were not woken by the cancellation"
    assert seen and seen[0].partitions_total == 6


def test_progress_reports_every_partition(tmp_path: Path, hours) -> None:
    build_store(tmp_path, hours)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path)]))
    seen = []
    plan(spec, hours[0], hours[-1] + timedelta(hours=1), PlanOptions(min_rows=1, progress=seen.append))
    assert seen[-1].partitions_done == seen[-1].partitions_total == 6
    assert seen[-1].tasks == 12
    assert [p.partitions_done for p in seen] == sorted(p.partitions_done for p in seen)
