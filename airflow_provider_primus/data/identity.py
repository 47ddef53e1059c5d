"""A planned file's identity where the filesystem has no ETag (local disk, HDFS), and its check.

The plan numbers a task's rows by the files it saw; a file rewritten afterwards with the same schema
(and, for Parquet, the same row count) would be read without complaint and its new rows trained in
place of the planned ones. Object stores say which version of an object a read gets (its ETag,
``data/objectstore.py``); a filesystem only says its size and modification time, so that is what the
planner records, plus, for a local Parquet file, a checksum of its footer: the footer holds every
row group's offsets, sizes and statistics, so a same-size rewrite within one timestamp tick (or by a
tool that keeps modification times) still shows. It is read where it is cheap: a local disk, where
the planner has just read those bytes anyway; on HDFS it would be one more round trip per file.

The reader checks after it has opened a file (a rewrite before that is caught whatever way it was
written) and, for CSV and JSON lines, after reading the whole file and before handing out a row.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_primus.data.errors import FileChangedError
from airflow_provider_primus.data.model import FileSlice

__all__ = ["check_unchanged", "footer_checksum", "mtime_ns"]

_MAGICS = (b"PAR1", b"PARE")  # plain and encrypted footers


def mtime_ns(entry: pafs.FileInfo) -> int | None:
    """The listing's modification time in nanoseconds, None when the filesystem gives none."""
    value = entry.mtime_ns
    return int(value) if value is not None else None


def footer_checksum(handle: Any) -> str:
    """A digest of a Parquet file's footer (its metadata, length and magic), read from its tail; ""
    when the tail is not a Parquet footer (the reader's own checks name that corruption)."""
    size = int(handle.size())
    if size < 12:
        return ""
    tail = bytes(handle.read_at(8, size - 8))
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] not in _MAGICS or length > size - 12:
        return ""
    footer = bytes(handle.read_at(length, size - 8 - length))
    return hashlib.blake2b(footer + tail, digest_size=16).hexdigest()


def _moment(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


def check_unchanged(
    fs: pafs.FileSystem, path: str, piece: FileSlice, source: str, handle: Any = None
) -> None:
    """Raise ``FileChangedError`` when ``path`` is not the file the plan saw: another size, another
    modification time or (``handle``: the opened file) another footer. A slice planned without an
    identity (an older plan) is not checked."""
    if not piece.checked:
        return
    info = fs.get_file_info(path)
    found: list[str] = []
    if info.type != pafs.FileType.File:
        found.append("it is gone")
    else:
        if info.size is not None and int(info.size) != piece.size:
            found.append(f"size {piece.size} bytes planned, {int(info.size)} now")
        now = mtime_ns(info)
        if piece.mtime_ns is not None and now is not None and now != piece.mtime_ns:
            found.append(f"modified {_moment(piece.mtime_ns)} planned, {_moment(now)} now")
        if piece.footer_checksum and handle is not None and not found:
            digest = footer_checksum(handle)
            if digest != piece.footer_checksum:
                found.append(
                    f"Parquet footer checksum {piece.footer_checksum} planned, {digest or 'none'} now"
                )
    if found:
        raise FileChangedError(
            path,
            f"source {source!r}: the file changed after planning ({'; '.join(found)}): its rows are "
            "not the planned ones, so none is read; re-plan the window",
        )
