"""Turning a partition's files into balanced tasks.

Open-source Primus makes one task per file, so one skewed file becomes one straggler. Here a large
Parquet file is split into row-group ranges of about ``target_rows`` rows, and files below
``min_rows`` are grouped (within their partition, so time barriers stay exact) until a group reaches
``target_rows``. Files without a row count (CSV, JSON lines) are sized by bytes the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from airflow_provider_primus.data.model import FileInfo, FilePartition, FileSlice, Task, task_id

# CSV / JSON lines have no footer: approximate a row budget with bytes.
BYTES_PER_ROW_ESTIMATE = 100


def group_key(source: str, time: datetime) -> str:
    return f"{source}@{time.isoformat()}"


def _weight(info: FileInfo) -> int:
    return info.rows if info.rows is not None else max(1, info.size // BYTES_PER_ROW_ESTIMATE)


def _split_row_groups(info: FileInfo, target_rows: int) -> Iterator[FileSlice]:
    total = max(1, sum(info.row_groups))
    start = 0
    acc = 0
    for i, rows in enumerate(info.row_groups):
        acc += rows
        if acc >= target_rows or i == len(info.row_groups) - 1:
            yield FileSlice(
                info.path,
                info.size,
                start,
                i + 1,
                acc,
                info.size * acc // total,
                info.version,
                info.mtime_ns,
                info.footer_checksum,
            )
            start, acc = i + 1, 0


def whole(info: FileInfo) -> FileSlice:
    return FileSlice(
        info.path,
        info.size,
        rows=info.rows,
        bytes=info.size,
        version=info.version,
        mtime_ns=info.mtime_ns,
        footer_checksum=info.footer_checksum,
    )


def _make_task(
    source: str, group: str, priority: int, slices: list[FileSlice], partition: FilePartition
) -> Task:
    rows = None if any(s.rows is None for s in slices) else sum(s.rows or 0 for s in slices)
    return Task(
        task_id=task_id(source, *(s.identity() for s in slices)),
        source=source,
        kind="files",
        group=group,
        priority=priority,
        rows=rows,
        bytes=sum(s.bytes for s in slices),
        slices=tuple(slices),
        partition_time=partition.time,
    )


def tasks_for_partition(
    partition: FilePartition, *, target_rows: int, min_rows: int, priority: int = 0
) -> list[Task]:
    group = group_key(partition.source, partition.time)
    tasks: list[Task] = []
    small: list[FileSlice] = []
    small_weight = 0
    for info in sorted(partition.files, key=lambda f: f.path):
        weight = _weight(info)
        if weight > target_rows and len(info.row_groups) > 1:
            for piece in _split_row_groups(info, target_rows):
                tasks.append(_make_task(partition.source, group, priority, [piece], partition))
        elif weight < min_rows:
            small.append(whole(info))
            small_weight += weight
            if small_weight >= target_rows:
                tasks.append(_make_task(partition.source, group, priority, small, partition))
                small, small_weight = [], 0
        else:
            tasks.append(_make_task(partition.source, group, priority, [whole(info)], partition))
    if small:
        tasks.append(_make_task(partition.source, group, priority, small, partition))
    return tasks
