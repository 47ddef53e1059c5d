"""Files sources: partition paths by time, listings, success markers and Parquet footers.

Every call here is a round trip on an object store, so the planner runs them on a thread pool; this
module only defines one unit of I/O per function so the planner can schedule them independently.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_primus.contracts.storage import OBJECT_STORE_SCHEMES, ObjectStorage, uri_scheme
from airflow_provider_primus.data.errors import CorruptFileError, MissingPartitionError, PlanCancelled
from airflow_provider_primus.data.identity import footer_checksum, mtime_ns
from airflow_provider_primus.data.model import FileInfo, MissingPartition
from airflow_provider_primus.data.objectstore import (
    ObjectStoreError,
    ResolvedAccess,
    named_failure,
    object_version,
    open_object_store,
)
from airflow_provider_primus.hadoop.filesystem import open_hdfs

__all__ = [
    "CorruptFileError",
    "MissingPartitionError",
    "describe_file",
    "list_partition_with_policy",
    "open_filesystem",
    "open_source_filesystem",
]

EXTENSIONS = {
    "parquet": (".parquet", ".pq", ".parq"),
    "csv": (".csv", ".csv.gz"),
    "jsonl": (".jsonl", ".json", ".ndjson", ".jsonl.gz"),
}


def open_filesystem(
    uri: str,
    storage: ObjectStorage | None = None,
    *,
    owner: str | None = None,
    resolved: Mapping[str, ResolvedAccess] | None = None,
) -> tuple[pafs.FileSystem, str]:
    """Any pyarrow filesystem URI (file://, s3://, gs://, hdfs://, ...) or a plain local path.

    ``s3://`` goes through ``data/objectstore.py`` with the contract's ``storage`` settings (endpoint,
    addressing, region, credentials; ``resolved``: Airflow connections the operator looked up);
    ``owner`` is what its errors name ("source 'clicks'").
    """
    if uri_scheme(uri) == "s3":
        return open_object_store(uri, storage, owner=owner or repr(uri), resolved=resolved)
    if uri_scheme(uri) == "hdfs":
        return open_hdfs(uri, owner)
    if "://" in uri:
        fs, root = pafs.FileSystem.from_uri(uri)
        return fs, root.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def open_source_filesystem(
    source: Any, resolved: Mapping[str, ResolvedAccess] | None = None
) -> tuple[pafs.FileSystem, str]:
    """A files source's filesystem and root, its errors naming the source."""
    return open_filesystem(
        source.uri, getattr(source, "storage", None), owner=f"source {source.name!r}", resolved=resolved
    )


def is_object_store(uri: str) -> bool:
    """Whether the store's own word (ETag, modification time) identifies an object's version."""
    return uri_scheme(uri) in OBJECT_STORE_SCHEMES


def is_local(uri: str) -> bool:
    """Whether the source is on a local disk, where re-reading a file's footer costs no round trip."""
    return uri_scheme(uri) == "file"


def partition_times(start: datetime, end: datetime, granularity: str) -> Iterator[datetime]:
    """Partition start times covering [start, end), aligned to the granularity."""
    step = timedelta(hours=1) if granularity == "hour" else timedelta(days=1)
    t = start.replace(minute=0, second=0, microsecond=0)
    if granularity == "day":
        t = t.replace(hour=0)
    while t < end:
        yield t
        t += step


def is_data_file(name: str, fmt: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return not base.startswith(("_", ".")) and base.endswith(EXTENSIONS[fmt])


def list_partition(
    fs: pafs.FileSystem,
    directory: str,
    *,
    fmt: str,
    success_marker: str | None,
) -> list[pafs.FileInfo] | str:
    """The partition's data files, or the reason it counts as missing.

    A marker inside the partition directory is seen in the listing itself: one round trip per
    partition instead of two. Writers put the marker last, so a listing that shows it shows the data.
    """
    if success_marker and "/" in success_marker:
        marker = fs.get_file_info(f"{directory}/{success_marker}")
        if marker.type != pafs.FileType.File:
            return f"no success marker {success_marker}"
    entries = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True, recursive=False))
    if success_marker and "/" not in success_marker:
        names = {e.base_name for e in entries if e.type == pafs.FileType.File}
        if success_marker not in names:
            return f"no success marker {success_marker}"
    if not entries and not success_marker:
        return "no such directory or no files"
    return sorted(
        (e for e in entries if e.type == pafs.FileType.File and is_data_file(e.path, fmt)),
        key=lambda e: e.path,
    )


def list_partition_with_policy(
    fs: pafs.FileSystem,
    directory: str,
    *,
    fmt: str,
    success_marker: str | None,
    policy: str,
    timeout_s: float | None,
    source: str,
    time_key: datetime,
    cancelled: Any = None,
) -> list[pafs.FileInfo] | MissingPartition:
    # policy 'wait' without timeout_s waits until the partition arrives or the plan is cancelled.
    deadline = time.monotonic() + timeout_s if timeout_s is not None else float("inf")
    poll = min(30.0, max(0.5, timeout_s / 20)) if timeout_s is not None else 10.0
    while True:
        try:
            found = list_partition(fs, directory, fmt=fmt, success_marker=success_marker)
        except ObjectStoreError:
            raise
        except OSError as exc:  # refused, unreachable after the client's retries, no such bucket
            raise named_failure(f"source {source!r}", "listing", directory, exc) from exc
        if not isinstance(found, str):
            return found
        missing = MissingPartition(source, time_key, directory, found)
        if policy == "skip":
            return missing
        if cancelled is not None and cancelled.is_set():
            raise PlanCancelled(f"planning cancelled while waiting for {directory}")
        remaining = deadline - time.monotonic()
        if policy == "fail" or remaining <= 0:
            if policy == "wait":
                missing = MissingPartition(source, time_key, directory, f"{found}; waited {timeout_s}s")
            raise MissingPartitionError(missing)
        # Waiting for an upstream writer on a remote store: there is no notification to block on.
        if cancelled is not None:
            cancelled.wait(min(poll, remaining))
        else:
            time.sleep(min(poll, remaining))


def listing_stamp(entry: pafs.FileInfo) -> str:
    """What a listing says about an object's version: its modification time (the ETag is not in
    pyarrow's listings); a re-plan compares it, with the size, to what the cache holds."""
    return str(entry.mtime_ns) if entry.mtime_ns is not None else ""


def describe_file(
    fs: pafs.FileSystem,
    entry: pafs.FileInfo,
    fmt: str,
    event_time: str | None = None,
    *,
    versioned: bool = False,
    checksum_footer: bool = False,
    source: str | None = None,
) -> FileInfo:
    """Size from the listing; rows and row groups from the Parquet footer (one open + tail reads);
    with ``event_time``, that column's range from the footer's statistics, when every row group has
    them (they cost nothing more to read: the footer is in memory).

    ``versioned`` (object stores): the object's ETag from the HEAD that opening it sends, and the
    listing's stamp. The footer is read with ranged GETs of the object's tail, never the object.
    Otherwise (local disk, HDFS) the listing's modification time and, with ``checksum_footer`` (a
    local source: :func:`is_local`), a checksum of the Parquet footer: what a reader checks to refuse
    a file rewritten after planning (``data/identity.py``).
    """
    stamp = listing_stamp(entry) if versioned else ""
    modified = None if versioned else mtime_ns(entry)
    if fmt != "parquet":
        if not versioned:
            return FileInfo(entry.path, int(entry.size or 0), mtime_ns=modified)
        try:
            with fs.open_input_file(entry.path) as handle:  # a HEAD, no body
                version = object_version(handle)
        except OSError as exc:
            raise named_failure(f"source {source!r}", "reading", entry.path, exc) from exc
        return FileInfo(entry.path, int(entry.size or 0), version=version, stamp=stamp)
    version = ""
    try:
        handle = fs.open_input_file(entry.path)
    except OSError as exc:
        if versioned:  # not the object's fault: refused, unreachable, deleted since the listing
            raise named_failure(f"source {source!r}", "reading the footer of", entry.path, exc) from exc
        raise CorruptFileError(entry.path, f"unreadable Parquet footer: {exc}") from exc
    checksum = ""
    try:
        with handle:
            version = object_version(handle) if versioned else ""
            meta = pq.ParquetFile(handle).metadata
            if checksum_footer and not versioned:  # local: the bytes were just read, in the page cache
                checksum = footer_checksum(handle)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for corrupt or truncated footers
        raise CorruptFileError(entry.path, f"unreadable Parquet footer: {exc}") from exc
    groups = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    span = _event_time_range(meta, event_time) if event_time is not None else None
    return FileInfo(
        entry.path,
        int(entry.size or 0),
        int(meta.num_rows),
        groups,
        span,
        version,
        stamp,
        modified,
        checksum,
    )


def _event_time_range(meta: pq.FileMetaData, column: str) -> tuple[str, str, float, float] | None:
    """(column, kind, low, high) from the statistics of ``column``; None when any row group lacks
    them or their type is not one an event time can be (an integer, a timestamp, an ISO string)."""
    index = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == column), None)
    if index is None or meta.num_row_groups == 0:
        return None
    lows: list[float] = []
    highs: list[float] = []
    kinds: set[str] = set()
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(index).statistics
        if stats is None or not stats.has_min_max:
            if stats is not None and stats.num_values == 0:
                continue  # a row group of nulls only: nothing to judge
            return None
        low, high = _stat_value(stats.min), _stat_value(stats.max)
        if low is None or high is None or low[0] != high[0]:
            return None
        kinds.add(low[0])
        lows.append(low[1])
        highs.append(high[1])
    if len(kinds) != 1:
        return None
    return column, kinds.pop(), min(lows), max(highs)


def _stat_value(value: Any) -> tuple[str, float] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "int", float(value)
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return "ms", moment.timestamp() * 1000
    return None
