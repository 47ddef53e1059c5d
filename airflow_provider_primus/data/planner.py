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
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_primus.data.cache import PlanCache, decode_files, fingerprint
from airflow_provider_primus.data.errors import CorruptFileError, PlanCancelled
from airflow_provider_primus.data.graph import SourceStats, TaskGraph
from airflow_provider_primus.data.model import FileInfo, FilePartition, MissingPartition, Task, task_id
from airflow_provider_primus.data.sizing import tasks_for_partition
from airflow_provider_primus.data.sources.files import (
    describe_file,
    list_partition_with_policy,
    open_filesystem,
    partition_times,
)
from airflow_provider_primus.data.sources.kafka import resolve_offsets


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
    progress: Callable[[Progress], None] | None = None
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


def _source_fingerprint(source: Any) -> str:
    return fingerprint(
        source.uri, source.path_template, source.format, source.granularity, str(source.success_marker)
    )


def plan(
    spec_doc: Any, start: datetime, end: datetime | None, options: PlanOptions | None = None
) -> TaskGraph:
    opts = options or PlanOptions()
    spec = spec_doc.spec
    target = opts.target_rows or spec.planning.target_rows_per_task
    min_rows = opts.min_rows or spec.planning.min_rows_per_task
    workers = opts.workers or spec.planning.workers
    priorities = {m.source: m.priority for m in spec.mixture}
    if end is None and any(s.type == "files" for s in spec.sources):
        raise ValueError("a plan over files sources needs an end time")
    graph = TaskGraph(name=spec_doc.metadata.name, start=start, end=end)
    groups: dict[str, list[datetime]] = {}
    to_cache: list[tuple[str, datetime, tuple[FileInfo, ...]]] = []
    from_cache: list[tuple[str, datetime, str, str]] = []  # source, time, path, encoded files
    fs_by_source: dict[str, pafs.FileSystem] = {}  # resolved once per source, reused by footer reads

    def add_tasks(source: str, tasks: list[Task]) -> None:
        stats = graph.stats[source]
        stats.tasks += len(tasks)
        stats.rows += sum(t.rows or 0 for t in tasks)
        stats.bytes += sum(t.bytes for t in tasks)
        graph.tasks.extend(tasks)

    def finish_partition(p: _Pending | FilePartition, cached: bool = False) -> None:
        if isinstance(p, _Pending):
            files = tuple(sorted(p.infos.values(), key=lambda f: f.path))
            part = FilePartition(p.source.name, p.time, p.path, files)
            to_cache.append((p.fingerprint, p.time, files))
        else:
            part = p
        stats = graph.stats[part.source]
        stats.partitions += 1
        stats.cached_partitions += int(cached)
        stats.files += len(part.files)
        groups.setdefault(part.source, []).append(part.time)
        add_tasks(
            part.source,
            tasks_for_partition(
                part, target_rows=target, min_rows=min_rows, priority=priorities.get(part.source, 0)
            ),
        )

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="primus-plan") as pool:
        futures: dict[Future[Any], tuple[str, Any]] = {}
        # Completed futures arrive here in completion order: O(1) per result, where polling
        # ``wait()`` over thousands of pending futures would cost O(pending) per result.
        completed: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()

        def track(fut: Future[Any], what: tuple[str, Any]) -> None:
            futures[fut] = what
            fut.add_done_callback(completed.put)

        total = 0
        done = 0
        for source in spec.sources:
            graph.stats[source.name] = SourceStats()
            if source.type == "kafka":
                kfut: Future[Any] = pool.submit(
                    resolve_offsets,
                    bootstrap_servers=source.bootstrap_servers,
                    topic=source.topic,
                    start_policy=source.start.policy,
                    start_timestamp=source.start.timestamp,
                    group_id=source.group_id,
                    window_start=start,
                    window_end=end,
                )
                track(kfut, ("kafka", source))
                total += 1
                continue
            fs, root = (opts.filesystem or open_filesystem)(source.uri)
            fs_by_source[source.name] = fs
            fp = _source_fingerprint(source)
            times = list(partition_times(start, end or start, source.granularity))
            total += len(times)
            cached = {} if opts.cache is None or opts.refresh else opts.cache.get_many(fp, times)
            for t in times:
                path = f"{root}/{source.render_path(t)}"
                if t in cached:
                    from_cache.append((source.name, t, path, cached[t]))
                    continue
                lfut: Future[Any] = pool.submit(
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
                track(lfut, ("list", _Pending(source, t, path, fp)))

        def report() -> None:
            if opts.progress is not None:
                opts.progress(Progress(done, total, len(graph.tasks)))

        report()
        cached_left = collections.deque(from_cache)
        try:
            while futures or cached_left:
                if opts.cancel.is_set():
                    raise PlanCancelled("planning cancelled")
                # I/O completions first (each may start the next round trip); cached partitions
                # are sized in the gaps, so they overlap the new partitions' round trips.
                try:
                    finished = [completed.get(timeout=0.5 if not cached_left else 0)]
                except queue.Empty:
                    if cached_left:
                        name, t, path, encoded = cached_left.popleft()
                        finish_partition(FilePartition(name, t, path, decode_files(encoded)), cached=True)
                        done += 1
                        report()
                    continue
                for fut in finished:
                    kind, item = futures.pop(fut)
                    if kind == "kafka":
                        ranges = fut.result()
                        add_tasks(item.name, _kafka_tasks(item, ranges, target, priorities.get(item.name, 0)))
                        graph.stats[item.name].partitions += len(ranges)
                        done += 1
                    elif kind == "list":
                        found = fut.result()
                        if isinstance(found, MissingPartition):
                            graph.missing.append(found)
                            graph.stats[item.source.name].missing_partitions += 1
                            done += 1
                            continue
                        item.waiting = len(found)
                        if not found:
                            finish_partition(item)
                            done += 1
                        fs = fs_by_source[item.source.name]
                        for entry in found:
                            ffut = pool.submit(describe_file, fs, entry, item.source.format)
                            track(ffut, ("footer", (item, entry)))
                    else:  # footer
                        pending, entry = item
                        try:
                            info: FileInfo = fut.result()
                        except CorruptFileError as exc:
                            # Kept as a whole-file task so execution reports and quarantines it.
                            graph.problems.append(str(exc))
                            graph.stats[pending.source.name].unreadable_files += 1
                            info = FileInfo(entry.path, int(entry.size or 0))
                        pending.infos[info.path] = info
                        pending.waiting -= 1
                        if pending.waiting == 0:
                            finish_partition(pending)
                            done += 1
                report()
        except BaseException:
            opts.cancel.set()  # wakes partitions waiting under policy 'wait'
            for fut in futures:
                fut.cancel()
            raise

    if opts.cache is not None and to_cache:
        opts.cache.put_many(to_cache)
    if spec.ordered:
        for source, times in groups.items():
            keys = sorted(set(times))
            graph.edges.extend(
                (f"{source}@{a.isoformat()}", f"{source}@{b.isoformat()}") for a, b in pairwise(keys)
            )
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
