"""Tier 2 (physical partitions) and tier 3 (executable tasks) as plain, immutable records.

They carry only what executors and the dispatcher need and serialize to flat columns, so a graph of
100,000+ tasks is a Parquet file, not a giant JSON document.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class FileInfo:
    """One data file of a partition: identity (path, size) plus what its footer says."""

    path: str
    size: int
    rows: int | None = None  # known for Parquet (footer); None for CSV / JSON lines
    row_groups: tuple[int, ...] = ()  # rows per row group (Parquet)
    # The event-time column's range from the footer's statistics, (column, kind, low, high): kind
    # "int" for raw integers (their unit is the schema's), "ms" for timestamps and ISO strings. Only a
    # plausibility check reads it, so it takes no part in a file's identity.
    event_time: tuple[str, str, float, float] | None = field(default=None, compare=False)
    # What an object store says about this version of the object: ``version`` its ETag (or version
    # id), part of its identity so a rewritten object gets new task IDs and readers can tell it
    # changed; ``stamp`` the listing's modification time, which a re-plan compares without reading
    # the footer again. Both empty for local files (their identity stays path and size).
    version: str = ""
    stamp: str = field(default="", compare=False)
    # Filesystems without ETags (local disk, HDFS): the listing's modification time and, for a local
    # Parquet file, a checksum of its footer. A reader compares them (with ``size``) to the file it
    # opens, so a file rewritten after planning is refused instead of trained. None / "" when the
    # filesystem does not say, or in plans and caches written before they existed: not checked.
    mtime_ns: int | None = None
    footer_checksum: str = ""


@dataclass(frozen=True)
class TableFile:
    """One live data file as a manifest describes it: ``micros`` is the start of the hour or day
    its partition names, or its event-time lower bound, in microseconds since the epoch."""

    path: str
    size: int
    rows: int
    micros: int | None

    def encode(self) -> list[Any]:
        return [self.path, self.size, self.rows, self.micros]

    @staticmethod
    def decode(row: list[Any]) -> TableFile:
        return TableFile(str(row[0]), int(row[1]), int(row[2]), None if row[3] is None else int(row[3]))


@dataclass(frozen=True)
class ColumnRef:
    """A current column of the table as its data files know it: by field id, not name, so a renamed
    column is still found in files written before the rename."""

    field_id: int
    type: Any  # the pyarrow type a file without the column reads as (nulls)
    required: bool


@dataclass(frozen=True)
class FilePartition:
    source: str
    time: datetime
    path: str
    files: tuple[FileInfo, ...]


@dataclass(frozen=True)
class MissingPartition:
    source: str
    time: datetime
    path: str
    reason: str


@dataclass(frozen=True)
class FileSlice:
    """A whole file, or the row-group range [row_group_start, row_group_end) of one."""

    path: str
    size: int  # the whole file's size: part of its identity
    row_group_start: int | None = None
    row_group_end: int | None = None
    rows: int | None = None
    bytes: int = 0  # this slice's share of the file
    version: str = ""  # the object's ETag when planned (object stores); a reader refuses another
    # What the plan saw of a file that has no ETag (see ``FileInfo``): not part of ``identity()``, so
    # task IDs stay what they were; a reader refuses a file whose size, modification time or footer
    # differ. None / "": not recorded (an older plan), not checked.
    mtime_ns: int | None = None
    footer_checksum: str = ""

    @property
    def checked(self) -> bool:
        """Whether the plan recorded this file's identity, so a reader can tell it changed."""
        return self.mtime_ns is not None or bool(self.footer_checksum)

    def identity(self) -> str:
        base = f"{self.path}|{self.size}|{self.row_group_start}|{self.row_group_end}"
        return f"{base}|{self.version}" if self.version else base


@dataclass(frozen=True)
class Task:
    task_id: str
    source: str
    kind: str  # "files" | "kafka"
    group: str  # time key ("source@2026-11-01T05:00:00+00:00"); barriers order groups
    priority: int = 0
    rows: int | None = None
    bytes: int = 0
    slices: tuple[FileSlice, ...] = ()
    topic: str | None = None
    partition: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None  # None: open-ended (stream)
    partition_time: datetime | None = field(default=None, compare=False)


def task_id(source: str, *parts: str) -> str:
    """Content-derived: the same source, file identity and range give the same id in every plan."""
    digest = hashlib.sha256("\x1f".join((source, *parts)).encode()).hexdigest()
    return f"{source}-{digest[:16]}"
