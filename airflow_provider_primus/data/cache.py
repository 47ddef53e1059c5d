"""The plan cache: what a complete partition resolved to, so a daily re-plan lists only the new day.

Keyed by a fingerprint of the source's physical definition (URI, template, format, granularity,
marker; an object store's endpoint) and the partition time. Only complete partitions are cached;
missing ones are listed again next time because they may have arrived. Without a success marker a
cached local partition is assumed immutable — use ``refresh`` (``primus plan --refresh``) when files
are rewritten in place; each file keeps the size, modification time and footer checksum it was
planned with, so a reader refuses a rewritten one rather than train rows the plan never counted. On
an object store each file also keeps what the store said about it (ETag, listing size and
modification time): the planner lists a cached partition again and reuses only the files the store
shows unchanged, so a rewritten object is re-planned.

Next to a partition's files (tier 2) the cache keeps the tasks they were sized into (tier 3) and the
sizing they were cut with (source name, target and minimum rows, priority). A re-plan with the same
sizing decodes the tasks instead of sizing the files again — for a 20-day hourly history that is
most of an incremental plan's CPU, which on a small machine competes for the GIL with the new day's
round trips. Another sizing re-sizes from the cached files and replaces the tasks.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from airflow_provider_primus.data.model import FileInfo, FileSlice, TableFile, Task

SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
  fingerprint TEXT NOT NULL,
  time TEXT NOT NULL,
  files TEXT NOT NULL,
  PRIMARY KEY (fingerprint, time)
)
"""
# Table sources (data/sources/iceberg.py): a manifest's decoded live files by the manifest's path
# (manifests are immutable, so a path names one content forever), and per window the snapshot and
# the files the last plan of it held, so a later snapshot that removed them is seen.
TABLE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS manifests (path TEXT PRIMARY KEY, files TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS table_windows (fingerprint TEXT NOT NULL, time TEXT NOT NULL,"
    " snapshot TEXT NOT NULL, files TEXT NOT NULL, PRIMARY KEY (fingerprint, time))",
    # A Delta table's last planned version and its live files: a re-plan reads the commits after it.
    "CREATE TABLE IF NOT EXISTS table_states (fingerprint TEXT PRIMARY KEY, version INTEGER NOT NULL,"
    " files TEXT NOT NULL)",
)
# Added after the first release: caches written before it gain the columns (empty) on open.
TASK_COLUMNS = ("sizing", "tasks")


# fingerprint, partition time, its files, the sizing its tasks were cut with, the tasks
CacheEntry = tuple[str, datetime, tuple[FileInfo, ...], str, list[Task]]


@dataclass(frozen=True)
class CachedPartition:
    """Still encoded: decoding is left to the planner, which does it while round trips are out."""

    files: str
    tasks: str | None  # encoded tasks when they were sized the way this plan asks, else None


def fingerprint(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


class PlanCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)
        for statement in TABLE_SCHEMA:
            self._db.execute(statement)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(partitions)")}
        for column in TASK_COLUMNS:
            if column not in have:
                self._db.execute(f"ALTER TABLE partitions ADD COLUMN {column} TEXT")

    def get_many(self, fp: str, times: Iterable[datetime], sizing: str) -> dict[datetime, CachedPartition]:
        """The cached partitions among ``times``; their tasks only where cut with ``sizing``."""
        wanted = {t.isoformat(): t for t in times}
        with self._lock:
            rows = self._db.execute(
                "SELECT time, files, sizing, tasks FROM partitions WHERE fingerprint = ?", (fp,)
            ).fetchall()
        return {
            wanted[key]: CachedPartition(files, tasks if cut == sizing else None)
            for key, files, cut, tasks in rows
            if key in wanted
        }

    def put_many(self, entries: Iterable[CacheEntry]) -> None:
        """One transaction for a whole plan's new (or re-sized) partitions and their tasks."""
        rows = [
            (fp, t.isoformat(), encode_files(files), sizing, encode_tasks(len(files), tasks))
            for fp, t, files, sizing, tasks in entries
        ]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO partitions (fingerprint, time, files, sizing, tasks)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            self._db.execute("COMMIT")

    def get_manifests(self, paths: Iterable[str]) -> dict[str, list[TableFile]]:
        wanted = list(paths)
        out: dict[str, list[TableFile]] = {}
        with self._lock:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for path, files in self._db.execute(
                    f"SELECT path, files FROM manifests WHERE path IN ({marks})", chunk
                ):
                    out[path] = [TableFile.decode(row) for row in json.loads(files)]
        return out

    def put_manifests(self, manifests: Mapping[str, list[TableFile]]) -> None:
        rows = [(path, json.dumps([f.encode() for f in files])) for path, files in manifests.items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO manifests (path, files) VALUES (?, ?)", rows)
            self._db.execute("COMMIT")

    def get_table_windows(self, fp: str) -> dict[datetime, tuple[str, list[str]]]:
        """Per window planned before: the snapshot it was planned from and its files' paths."""
        with self._lock:
            rows = self._db.execute(
                "SELECT time, snapshot, files FROM table_windows WHERE fingerprint = ?", (fp,)
            ).fetchall()
        return {datetime.fromisoformat(t): (snap, json.loads(files)) for t, snap, files in rows}

    def put_table_windows(self, fp: str, snapshot: str, windows: Mapping[datetime, list[str]]) -> None:
        rows = [(fp, t.isoformat(), snapshot, json.dumps(sorted(paths))) for t, paths in windows.items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO table_windows (fingerprint, time, snapshot, files)"
                " VALUES (?, ?, ?, ?)",
                rows,
            )
            self._db.execute("COMMIT")

    def get_table_state(self, fp: str) -> tuple[int, list[TableFile]] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT version, files FROM table_states WHERE fingerprint = ?", (fp,)
            ).fetchone()
        if row is None:
            return None
        return int(row[0]), [TableFile.decode(f) for f in json.loads(row[1])]

    def put_table_state(self, fp: str, version: int, files: list[TableFile]) -> None:
        encoded = json.dumps([f.encode() for f in files])
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO table_states (fingerprint, version, files) VALUES (?, ?, ?)",
                (fp, version, encoded),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def encode_files(files: Iterable[FileInfo]) -> str:
    return json.dumps(
        [
            [f.path, f.size, f.rows, list(f.row_groups), list(f.event_time) if f.event_time else None]
            + (
                [f.version, f.stamp, f.mtime_ns, f.footer_checksum]
                if f.mtime_ns is not None or f.footer_checksum
                else [f.version, f.stamp]
                if f.version or f.stamp
                else []
            )
            for f in files
        ]
    )


def decode_files(encoded: str) -> tuple[FileInfo, ...]:
    """Files as encoded; a fifth element, the event-time range, is absent in older caches, the
    object's version and listing stamp (sixth and seventh) in caches of local files written before
    they kept a file's modification time and footer checksum (eighth and ninth): not checked."""
    out = []
    for p, s, r, g, *rest in json.loads(encoded):
        event_time = tuple(rest[0]) if rest and rest[0] else None
        version, stamp = (rest[1], rest[2]) if len(rest) >= 3 else ("", "")
        modified, checksum = (rest[3], rest[4]) if len(rest) >= 5 else (None, "")
        out.append(FileInfo(p, s, r, tuple(g), event_time, version, stamp, modified, checksum))
    return tuple(out)


def encode_tasks(files: int, tasks: Iterable[Task]) -> str:
    """What differs between a partition's tasks; source, group, priority and time come from the key."""
    return json.dumps(
        [
            files,
            [
                [
                    t.task_id,
                    t.rows,
                    t.bytes,
                    [
                        [s.path, s.size, s.row_group_start, s.row_group_end, s.rows, s.bytes]
                        + (
                            [s.version, s.mtime_ns, s.footer_checksum]
                            if s.checked
                            else [s.version]
                            if s.version
                            else []
                        )
                        for s in t.slices
                    ],
                ]
                for t in tasks
            ],
        ]
    )


def decode_tasks(
    encoded: str, *, source: str, group: str, priority: int, time: datetime
) -> tuple[int, list[Task]]:
    """The partition's file count and its tasks, equal to what sizing its files would give."""
    files, tasks = json.loads(encoded)
    return files, [
        Task(
            task_id=task_id,
            source=source,
            kind="files",
            group=group,
            priority=priority,
            rows=rows,
            bytes=size,
            slices=tuple(FileSlice(*s) for s in slices),
            partition_time=time,
        )
        for task_id, rows, size, slices in tasks
    ]
