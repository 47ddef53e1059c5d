"""The plan cache: what a complete partition resolved to, so a daily re-plan lists only the new day.

Keyed by a fingerprint of the source's physical definition (URI, template, format, granularity,
marker) and the partition time. Only complete partitions are cached; missing ones are listed again
next time because they may have arrived. Without a success marker a cached partition is assumed
immutable — use ``refresh`` (``primus plan --refresh``) when files are rewritten in place.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from airflow_provider_primus.data.model import FileInfo

SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
  fingerprint TEXT NOT NULL,
  time TEXT NOT NULL,
  files TEXT NOT NULL,
  PRIMARY KEY (fingerprint, time)
)
"""


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

    def get_many(self, fp: str, times: Iterable[datetime]) -> dict[datetime, str]:
        """The cached partitions among ``times``, still encoded: a query costs microseconds, so the
        planner can start the new partitions' round trips first and decode these while they run."""
        wanted = {t.isoformat(): t for t in times}
        with self._lock:
            rows = self._db.execute(
                "SELECT time, files FROM partitions WHERE fingerprint = ?", (fp,)
            ).fetchall()
        return {wanted[key]: files for key, files in rows if key in wanted}

    def put_many(self, entries: Iterable[tuple[str, datetime, tuple[FileInfo, ...]]]) -> None:
        """One transaction for a whole plan's new partitions."""
        rows = [
            (fp, t.isoformat(), json.dumps([[f.path, f.size, f.rows, list(f.row_groups)] for f in files]))
            for fp, t, files in entries
        ]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO partitions (fingerprint, time, files) VALUES (?, ?, ?)", rows
            )
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def decode_files(encoded: str) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(p, s, r, tuple(g)) for p, s, r, g in json.loads(encoded))
