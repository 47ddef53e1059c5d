"""The planner: a time range and a source mixture → the data task graph.

Listing partitions and reading footers are I/O-bound round trips (20 ms+ each on object stores), so
every one of them is a separate job on a thread pool, and results stream into the graph as they
arrive: a partition's tasks are built as soon as its last footer is read, not after all listings.
The coordinator (the calling thread) is the only writer of the graph, so no locks are needed there.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_primus.data.cache import (
    CachedPartition,
    CacheEntry,
    PlanCache,
    decode_files,
    decode_tasks,
    fingerprint,
)
from airflow_provider_primus.data.errors import (
    CorruptFileError,
    MissingPartitionError,
    PlanCancelled,
    TableRewrittenError,
)
from airflow_provider_primus.data.event_time import check_ranges
from airflow_provider_primus.data.graph import SourceStats, TaskGraph
from airflow_provider_primus.data.iopool import Lane
from airflow_provider_primus.data.model import FileInfo, FilePartition, MissingPartition, Task, task_id
from airflow_provider_primus.data.objectstore import ResolvedAccess
from airflow_provider_primus.data.sizing import group_key, tasks_for_partition
from airflow_provider_primus.data.sources.files import (
    describe_file,
    is_local,
    is_object_store,
    list_partition_with_policy,
    listing_stamp,
    open_source_filesystem,
    partition_times,
)
from airflow_provider_primus.data.sources.iceberg import TablePlan
from airflow_provider_primus.data.sources.kafka import resolve_offsets
from airflow_provider_primus.data.sources.tables import plan_table_source, table_fingerprint


@dataclass(frozen=True)
class Progress:
    partitions_done: int
    partitions_total: int
    tasks: int


@dataclass
class PlanOptions:
    workers: int | None = None  # default: the spec's planning.workers
    target_rows: int | None = None
    min_rows: int | None = None
    cache: PlanCache | None = None
    refresh: bool = False
    # Replace the filesystem resolved from each source's URI (the benchmark's delayed adapter).
    filesystem: Callable[[str], tuple[pafs.FileSystem, str]] | None = None
    # Airflow connections the operator resolved (id -> key pair, endpoint, region): never stored.
    credentials: Mapping[str, ResolvedAccess] | None = field(default=None, repr=False)
    progress: Callable[[Progress], None] | None = None
    # Replace how a table source's table is loaded (the benchmark's delayed FileIO).
    tables: Callable[[Any], Any] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Pending:
    """A partition whose footers are still being read."""

    source: Any
    time: datetime
    path: str
    fingerprint: str
    infos: dict[str, FileInfo] = field(default_factory=dict)
    waiting: int = 0
    # Object stores: the cached partition this listing re-validates (see ``_revalidate``).
    cached: CachedPartition | None = None


_STARTING_WAIT_S = 0.0005


def _statistics_column(source: Any) -> str | None:
    """The event-time column a Parquet footer's statistics can judge: none for other formats (no
    footer) or when a transform changes the column (the statistics describe the raw values)."""
    event_time = source.schema_.event_time
    if source.type != "files" or source.format != "parquet" or event_time is None:
        return None
    if source.schema_.python_steps or any(t.column == event_time.column for t in source.schema_.column_steps):
        return None
    return str(event_time.column)


def _source_fingerprint(source: Any) -> str:
    parts = [source.uri, source.path_template, source.format, source.granularity, str(source.success_marker)]
    storage = getattr(source, "storage", None)
    if storage is not None and storage.endpoint:  # another endpoint holds other objects
        parts.append(storage.endpoint)
    return fingerprint(*parts)


def _unchanged(cached: tuple[FileInfo, ...], listing: list[pafs.FileInfo]) -> dict[str, FileInfo]:
    """The cached files the listing shows unchanged (same path, size and modification stamp)."""
    by_path = {f.path: f for f in cached}
    out = {}
    for entry in listing:
        old = by_path.get(entry.path)
        if (
            old is not None
            and old.stamp
            and old.size == int(entry.size or 0)
            and old.stamp == listing_stamp(entry)
        ):
            out[entry.path] = old
    return out


def plan(
    spec_doc: Any, start: datetime, end: datetime | None, options: PlanOptions | None = None
) -> TaskGraph:
    opts = options or PlanOptions()
    spec = spec_doc.spec
    target = opts.target_rows or spec.planning.target_rows_per_task
    min_rows = opts.min_rows or spec.planning.min_rows_per_task
    workers = opts.workers or spec.planning.workers
    priorities = {m.source: m.priority for m in spec.mixture}
    if end is None and any(s.type != "kafka" for s in spec.sources):
        raise ValueError("a plan over files or table sources needs an end time")
    graph = TaskGraph(name=spec_doc.metadata.name, start=start, end=end)
    groups: dict[str, list[datetime]] = {}
    to_cache: list[CacheEntry] = []
    from_cache: list[tuple[Any, str, datetime, str, CachedPartition]] = []  # source, fp, time, root, entry
    # How a source's partitions are cut into tasks: cached tasks are reused only under the same one.
    sizing = {
        s.name: fingerprint(s.name, str(target), str(min_rows), str(priorities.get(s.name, 0)))
        for s in spec.sources
    }
    # Event-time ranges per source from the footers' statistics: (path, kind, low, high).
    checked = {s.name: c for s in spec.sources if (c := _statistics_column(s)) is not None}
    ranges: dict[str, list[tuple[str, str, float, float]]] = {name: [] for name in checked}

    def note_ranges(source: str, files: tuple[FileInfo, ...]) -> None:
        column = checked.get(source)
        if column is None:
            return
        for f in files:
            if f.event_time is not None and f.event_time[0] == column:
                ranges[source].append((f.path, f.event_time[1], f.event_time[2], f.event_time[3]))

    def add_tasks(source: str, tasks: list[Task]) -> None:
        stats = graph.stats[source]
        stats.tasks += len(tasks)
        stats.rows += sum(t.rows or 0 for t in tasks)
        stats.bytes += sum(t.bytes for t in tasks)
        graph.tasks.extend(tasks)

    def add_partition(source: str, t: datetime, files: int, tasks: list[Task], cached: bool) -> None:
        stats = graph.stats[source]
        stats.partitions += 1
        stats.cached_partitions += int(cached)
        stats.files += files
        groups.setdefault(source, []).append(t)
        add_tasks(source, tasks)

    def size_partition(part: FilePartition, fp: str, cached: bool = False) -> None:
        """Cut files into tasks, and keep both for the next plan."""
        tasks = tasks_for_partition(
            part, target_rows=target, min_rows=min_rows, priority=priorities.get(part.source, 0)
        )
        to_cache.append((fp, part.time, part.files, sizing[part.source], tasks))
        add_partition(part.source, part.time, len(part.files), tasks, cached)
        note_ranges(part.source, part.files)

    def finish_pending(p: _Pending) -> None:
        files = tuple(sorted(p.infos.values(), key=lambda f: f.path))
        size_partition(FilePartition(p.source.name, p.time, p.path, files), p.fingerprint)

    def finish_cached(source: Any, fp: str, t: datetime, root: str, entry: CachedPartition) -> None:
        name = source.name
        if entry.tasks is None:  # cached under another sizing: cut again from the cached files
            part = FilePartition(name, t, f"{root}/{source.render_path(t)}", decode_files(entry.files))
            size_partition(part, fp, cached=True)
            return
        files, tasks = decode_tasks(
            entry.tasks, source=name, group=group_key(name, t), priority=priorities.get(name, 0), time=t
        )
        add_partition(name, t, files, tasks, cached=True)
        if name in checked:  # the tasks alone do not carry the statistics
            note_ranges(name, decode_files(entry.files))

    def finish_table(source: Any, found: TablePlan) -> None:
        """A table's windows into tasks. Not kept in the partition cache: a window's files are the
        snapshot's, and the manifests (cached by path) make a re-plan cheap already."""
        stats = graph.stats[source.name]
        stats.round_trips += found.round_trips
        fp = table_fingerprint(source)
        order = {str(snap): i for i, (snap, _) in enumerate(found.operations)}
        before = opts.cache.get_table_windows(fp) if opts.cache is not None else {}
        rewritten: list[str] = []
        since: str | None = None  # the oldest snapshot a rewritten window was planned from
        planned: dict[datetime, list[str]] = {}
        for t in partition_times(start, end or start, source.granularity):
            files = tuple(sorted(found.windows.get(t, ()), key=lambda f: f.path))
            earlier = before.get(t)
            if earlier is not None and earlier[0] != str(found.snapshot_id):
                gone = set(earlier[1]) - {f.path for f in files}
                if gone:
                    if since is None or order.get(earlier[0], -1) < order.get(since, -1):
                        since = earlier[0]
                    rewritten.append(
                        f"{t.isoformat()} ({len(gone)} of its {len(earlier[1])} files planned from snapshot "
                        f"{earlier[0]} are gone in snapshot {found.snapshot_id})"
                    )
            where = f"{source.where()}@{t.isoformat()}"
            if not files:
                reason = (
                    "the table has no snapshot"
                    if found.snapshot_id is None
                    else f"no data file in snapshot {found.snapshot_id}"
                )
                missing = MissingPartition(source.name, t, where, reason)
                if source.missing.policy != "skip":
                    raise MissingPartitionError(missing)
                graph.missing.append(missing)
                stats.missing_partitions += 1
                continue
            planned[t] = [f.path for f in files]
            part = FilePartition(source.name, t, where, files)
            tasks = tasks_for_partition(
                part, target_rows=target, min_rows=min_rows, priority=priorities.get(source.name, 0)
            )
            add_partition(source.name, t, len(files), tasks, cached=False)
        if rewritten:
            ops = found.operations[order.get(str(since), -1) + 1 :]
            history = ", ".join(op for _, op in ops) or "unknown: the snapshot planned from has expired"
            message = (
                f"source {source.name!r}: {source.where()} rewrote files of windows planned before "
                f"(operations since snapshot {since}: {history}): " + "; ".join(rewritten)
            )
            if source.on_rewrite.policy == "fail":
                raise TableRewrittenError(
                    message + ". Their rows may be trained already; set on_rewrite.policy 'replan' "
                    "to plan the new files (and train those rows again), or plan another range"
                )
            graph.problems.append(message + "; planned again from the new files")
            stats.rewritten_partitions += len(rewritten)
        if opts.cache is not None and planned:
            opts.cache.put_table_windows(fp, str(found.snapshot_id), planned)

    with Lane(workers) as lane:
        total = 0
        done = 0
        for source in spec.sources:
            graph.stats[source.name] = SourceStats()
            if source.type == "kafka":
                lane.submit(
                    ("kafka", source),
                    resolve_offsets,
                    kafka=source,
                    topic=source.topic,
                    start_policy=source.start.policy,
                    start_timestamp=source.start.timestamp,
                    group_id=source.group_id,
                    window_start=start,
                    window_end=end,
                )
                total += 1
                continue
            if source.type in ("iceberg", "delta"):
                lane.submit(
                    ("table", source),
                    plan_table_source,
                    source,
                    start,
                    end or start,
                    cache=opts.cache,
                    workers=workers,
                    table=opts.tables(source) if opts.tables is not None else None,
                    cancel=opts.cancel,
                )
                total += 1
                continue
            if opts.filesystem is not None:
                fs, root = opts.filesystem(source.uri)
            else:
                fs, root = open_source_filesystem(source, opts.credentials)
            # On an object store a cached partition is listed again: the store's word on each object
            # (size, modification time; the ETag is kept from its footer read) decides whether its
            # files are reused, so a rewritten object is re-planned. Local partitions are immutable
            # unless --refresh (a listing per day would undo what incremental planning saves).
            versioned = is_object_store(source.uri)
            fp = _source_fingerprint(source)
            times = list(partition_times(start, end or start, source.granularity))
            total += len(times)
            cached = {}
            if opts.cache is not None and not opts.refresh:
                cached = opts.cache.get_many(fp, times, sizing[source.name])
            for t in times:
                if t in cached and not versioned:
                    from_cache.append((source, fp, t, root, cached[t]))
                    continue
                path = f"{root}/{source.render_path(t)}"
                lane.submit(
                    ("list", (_Pending(source, t, path, fp, cached=cached.get(t)), fs)),
                    list_partition_with_policy,
                    fs,
                    path,
                    fmt=source.format,
                    success_marker=source.success_marker,
                    policy=source.missing.policy,
                    timeout_s=source.missing.timeout_s,
                    source=source.name,
                    time_key=t,
                    cancelled=opts.cancel,
                )

        def report() -> None:
            if opts.progress is not None:
                opts.progress(Progress(done, total, len(graph.tasks)))

        report()
        cached_left = collections.deque(from_cache)
        try:
            while lane.pending or cached_left:
                if opts.cancel.is_set():
                    raise PlanCancelled("planning cancelled")
                # Results first (a listing's result sends its footer reads); cached partitions are
                # decoded in the gaps, so they overlap the new partitions' round trips.
                try:
                    if not lane.pending:
                        raise queue.Empty
                    # Cached partitions wait while runners are still starting: computing now
                    # would hold the GIL they need to send their round trips.
                    wait = 0.5 if not cached_left else (_STARTING_WAIT_S if lane.starting else 0)
                    (kind, item), result, error = lane.get(timeout=wait)
                except queue.Empty:
                    if cached_left:
                        finish_cached(*cached_left.popleft())
                        done += 1
                        report()
                    continue
                if kind == "footer":
                    pending, entry = item
                    if isinstance(error, CorruptFileError):
                        # Kept as a whole-file task so execution reports and quarantines it.
                        graph.problems.append(str(error))
                        graph.stats[pending.source.name].unreadable_files += 1
                        info: FileInfo = FileInfo(entry.path, int(entry.size or 0))
                    elif error is not None:
                        raise error
                    else:
                        info = result
                    pending.infos[info.path] = info
                    pending.waiting -= 1
                    if pending.waiting == 0:
                        finish_pending(pending)
                        done += 1
                elif error is not None:
                    raise error
                elif kind == "table":
                    finish_table(item, result)
                    done += 1
                elif kind == "kafka":
                    add_tasks(item.name, _kafka_tasks(item, result, target, priorities.get(item.name, 0)))
                    graph.stats[item.name].partitions += len(result)
                    done += 1
                else:  # list
                    pending, fs = item
                    if isinstance(result, MissingPartition):
                        graph.missing.append(result)
                        graph.stats[pending.source.name].missing_partitions += 1
                        done += 1
                    elif not result:
                        finish_pending(pending)
                        done += 1
                    else:
                        src = pending.source
                        versioned = is_object_store(src.uri)
                        before = () if pending.cached is None else decode_files(pending.cached.files)
                        reuse = _unchanged(before, result)
                        if pending.cached is not None and len(reuse) == len(result) == len(before):
                            # The store shows every cached object unchanged: the cached tasks stand.
                            root = pending.path[: -len(src.render_path(pending.time)) - 1]
                            finish_cached(src, pending.fingerprint, pending.time, root, pending.cached)
                            done += 1
                            report()
                            continue
                        pending.infos.update(reuse)
                        todo = [entry for entry in result if entry.path not in reuse]
                        pending.waiting = len(todo)
                        if not todo:
                            finish_pending(pending)
                            done += 1
                        column = checked.get(src.name)
                        for entry in todo:
                            lane.submit(
                                ("footer", (pending, entry)),
                                describe_file,
                                fs,
                                entry,
                                src.format,
                                column,
                                versioned=versioned,
                                checksum_footer=is_local(src.uri),
                                source=src.name,
                            )
                report()
        except BaseException:
            opts.cancel.set()  # wakes partitions waiting under policy 'wait'
            raise

    if opts.cache is not None and to_cache:
        opts.cache.put_many(to_cache)
    for source in spec.sources:
        if source.name not in checked:
            continue
        finding = check_ranges(source.name, source.schema_.event_time, ranges[source.name])
        if finding is not None:
            graph.event_times.append(finding)
            graph.stats[source.name].implausible_event_time_files = finding.implausible
    if spec.ordered:
        for source, times in groups.items():
            keys = sorted(set(times))
            graph.edges.extend((group_key(source, a), group_key(source, b)) for a, b in pairwise(keys))
    graph.canonicalize()
    return graph


def _kafka_tasks(
    source: Any, ranges: list[tuple[int, int, int | None]], target: int, priority: int
) -> list[Task]:
    """Bounded ranges are cut into chunks of about ``target`` offsets; open ranges stay one task."""
    tasks: list[Task] = []
    for partition, start, end in ranges:
        group = f"{source.name}@{source.topic}"
        bounds: list[tuple[int, int | None]] = []
        if end is None:
            bounds.append((start, None))
        else:
            bounds.extend((lo, min(lo + target, end)) for lo in range(start, end, target))
        for lo, hi in bounds:
            tasks.append(
                Task(
                    task_id=task_id(source.name, source.topic, str(partition), str(lo), str(hi)),
                    source=source.name,
                    kind="kafka",
                    group=group,
                    priority=priority,
                    rows=None if hi is None else hi - lo,
                    topic=source.topic,
                    partition=partition,
                    start_offset=lo,
                    end_offset=hi,
                )
            )
    return tasks


__all__ = ["PlanCancelled", "PlanOptions", "Progress", "plan"]
