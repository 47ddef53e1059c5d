"""The job store: the job object is the single source of truth the master reconciles against.

A job object has four parts, like a Kubernetes object: ``spec`` (as submitted, immutable),
``desired`` (runtime intent others may change: manual replicas, suspend, stop, appended windows —
on Kubernetes these become spec fields), ``status`` (written by the master only) and ``version``
(every write bumps it; a write names the version it read and fails on a mismatch — optimistic
concurrency, so two writers never silently overwrite each other). Events are an append-only log.

``JobStore`` is the interface; ``SqliteJobStore`` keeps it in one SQLite file under PRIMUS_HOME,
shared safely by the master, the CLI and Airflow workers (WAL mode, short transactions).

A store file deleted (or replaced) under running users is noticed at their next access: a
connection keeps working on the unlinked file, where nobody else can read what it writes. The first
user to notice copies every job and event the old file held (its open connection still reads it)
into the file now at the path, and says so (``take_notices``); the master turns that into an event.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_primus.contracts.status import Desired, JobStatus
from airflow_provider_primus.contracts.status import Event as StatusEvent
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import primus_home

if TYPE_CHECKING:
    from airflow_provider_primus.tls import JobCa

log = logging.getLogger(__name__)


class JobNotFound(KeyError, PrimusError):
    def __str__(self) -> str:
        return f"no job named {self.args[0]!r}"


class JobExists(ValueError, PrimusError):
    pass


class Conflict(PrimusError):
    """The object changed since it was read: re-read, re-apply, retry."""


@dataclass
class JobRecord:
    name: str
    version: int
    spec: dict[str, Any]
    desired: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    created: float = 0.0

    @property
    def job_status(self) -> JobStatus:
        """The status as the typed model every reader shares (contracts/status.py)."""
        return JobStatus.read(self.status)

    @property
    def job_desired(self) -> Desired:
        """The runtime intent as its typed model (contracts/status.py), as the master acts on it."""
        return Desired.read(self.desired)


@dataclass(frozen=True)
class Event:
    seq: int
    t: float  # wall clock, seconds
    job: str
    type: str
    message: str
    executor: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def event(self) -> StatusEvent:
        """The typed event (its payload per type: ``.event.payload()``)."""
        return StatusEvent.model_validate(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.t,
            "type": self.type,
            "executor": self.executor,
            "message": self.message,
            "data": self.data,
        }


class JobStore(Protocol):
    kind: str  # the backend its jobs run on: "local" or "kubernetes"

    def create(
        self, name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None
    ) -> JobRecord: ...
    def get(self, name: str) -> JobRecord: ...
    def find(self, labels: Mapping[str, str] | None = None) -> list[JobRecord]: ...
    def update(
        self,
        name: str,
        version: int,
        *,
        status: Mapping[str, Any] | None = None,
        desired: Mapping[str, Any] | None = None,
    ) -> JobRecord: ...
    def delete(self, name: str) -> None: ...
    def watch(self, name: str, since_version: int, timeout_s: float) -> JobRecord | None: ...
    def add_event(
        self,
        job: str,
        type: str,
        message: str,
        executor: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Event: ...
    def events(self, job: str, after: int = 0, limit: int = 1000) -> list[Event]: ...
    def close(self) -> None:
        """Release this user's resources (a connection, watch threads); the store stays usable."""
        ...

    def provision(self, name: str, token: str, stored: Mapping[str, Any], *, ca: JobCa | None = None) -> None:
        """What a just-created job needs beside its record (Kubernetes: token and TLS Secrets,
        documents)."""
        ...


def modify(
    store: JobStore, name: str, change: Callable[[JobRecord], Mapping[str, Any]], *, part: str = "desired"
) -> JobRecord:
    """Read-modify-write with retries on conflict: ``change`` returns the new ``desired``/``status``."""
    for _ in range(50):
        record = store.get(name)
        new = dict(change(record))
        try:
            if part == "desired":
                return store.update(name, record.version, desired=new)
            return store.update(name, record.version, status=new)
        except Conflict:
            continue
    raise Conflict(f"job {name!r}: too many concurrent writers")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    spec TEXT NOT NULL,
    desired TEXT NOT NULL,
    status TEXT NOT NULL,
    labels TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    t REAL NOT NULL,
    type TEXT NOT NULL,
    executor TEXT,
    message TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job, seq);
"""


def default_store_path() -> Path:
    return primus_home() / "jobs.sqlite"


class SqliteJobStore:
    kind = "local"  # the backend its jobs run on

    def __init__(self, path: Path | None = None, poll_s: float = 0.05) -> None:
        self.path = path or default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.poll_s = poll_s
        self._local = threading.local()
        self._notices: list[str] = []
        self._recreated: set[tuple[int, int] | None] = set()
        self._notices_lock = threading.Lock()
        self._db().executescript(_SCHEMA)  # idempotent; executescript manages its own transaction

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None and self._identity() != self._local.identity:
            db = self._replaced(db)
        if db is None:
            if not self.path.exists():  # a deleted store's journal files must not join a new file
                for suffix in ("-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db, self._local.identity = db, self._identity()
        return db

    def _replaced(self, old: sqlite3.Connection) -> sqlite3.Connection:
        """The file this thread's connection writes was deleted or replaced: carry what it holds over
        to the file at the path. The old connection stays open until ``close``: closing the last one
        of a deleted WAL database removes ``<path>-wal`` by name, which may by then be the new file's."""
        jobs = old.execute("SELECT * FROM jobs").fetchall()
        events = old.execute("SELECT seq, job, t, type, executor, message, data FROM events").fetchall()
        retired: list[sqlite3.Connection] = getattr(self._local, "retired", [])
        self._local.retired, self._local.db = [*retired, old], None
        gone = "deleted" if self._identity() is None else "replaced"
        db = self._db()
        db.executescript(_SCHEMA)
        with self._tx() as tx:
            before = tx.total_changes
            tx.executemany("INSERT OR IGNORE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)", jobs)
            tx.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", events)
            copied = tx.total_changes - before
        notice = (
            f"the job store {self.path} was {gone} while in use; recreated it from an open copy "
            f"({len(jobs)} job(s), {len(events)} event(s); {copied} row(s) were missing from it)"
        )
        with self._notices_lock:  # one notice per new file, however many threads found it
            if self._local.identity in self._recreated:
                return db
            self._recreated.add(self._local.identity)
            self._notices.append(notice)
        log.warning("%s", notice)
        return db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @staticmethod
    def _record(row: tuple[Any, ...]) -> JobRecord:
        name, version, spec, desired, status, labels, created = row
        return JobRecord(
            name,
            version,
            json.loads(spec),
            json.loads(desired),
            json.loads(status),
            json.loads(labels),
            created,
        )

    def create(
        self, name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None
    ) -> JobRecord:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name = ?", (name,)).fetchone():
                raise JobExists(f"a job named {name!r} already exists")
            db.execute(
                "INSERT INTO jobs VALUES (?, 1, ?, '{}', '{}', ?, ?)",
                (name, json.dumps(spec), json.dumps(dict(labels or {})), time.time()),
            )
        return self.get(name)

    def get(self, name: str) -> JobRecord:
        row = self._db().execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise JobNotFound(name)
        return self._record(row)

    def find(self, labels: Mapping[str, str] | None = None) -> list[JobRecord]:
        rows = self._db().execute("SELECT * FROM jobs ORDER BY name").fetchall()
        records = [self._record(r) for r in rows]
        wanted = dict(labels or {})
        return [r for r in records if all(r.labels.get(k) == v for k, v in wanted.items())]

    def update(
        self,
        name: str,
        version: int,
        *,
        status: Mapping[str, Any] | None = None,
        desired: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        with self._tx() as db:
            row = db.execute("SELECT version FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise JobNotFound(name)
            if row[0] != version:
                raise Conflict(f"job {name!r} is at version {row[0]}, not {version}")
            if status is not None:
                db.execute("UPDATE jobs SET status = ? WHERE name = ?", (json.dumps(status), name))
            if desired is not None:
                db.execute("UPDATE jobs SET desired = ? WHERE name = ?", (json.dumps(desired), name))
            db.execute("UPDATE jobs SET version = version + 1 WHERE name = ?", (name,))
        return self.get(name)

    def provision(self, name: str, token: str, stored: Mapping[str, Any], *, ca: JobCa | None = None) -> None:
        """Nothing: a local job's token and CA files and documents are on this machine already."""

    def take_notices(self) -> list[str]:
        """What happened to the store file since the last call (a deletion it recovered from)."""
        with self._notices_lock:
            notices, self._notices = self._notices, []
        return notices

    def close(self) -> None:
        """Close this thread's connection (each thread that used the store has its own), then the
        ones left on a deleted file."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        for old in getattr(self._local, "retired", []):
            old.close()
        self._local.retired = []

    def delete(self, name: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE name = ?", (name,))
            db.execute("DELETE FROM events WHERE job = ?", (name,))

    def watch(self, name: str, since_version: int, timeout_s: float) -> JobRecord | None:
        """The record once its version is newer than ``since_version``; None on timeout. Polls the
        file (SQLite has no cross-process notifications); a poll is one indexed read."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.get(name)
            if record.version > since_version:
                return record
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_s)

    def add_event(
        self,
        job: str,
        type: str,
        message: str,
        executor: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Event:
        t = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO events (job, t, type, executor, message, data) VALUES (?, ?, ?, ?, ?, ?)",
                (job, t, type, executor, message, json.dumps(dict(data or {}))),
            )
            seq = int(cur.lastrowid or 0)
        return Event(seq, t, job, type, message, executor, dict(data or {}))

    def events(self, job: str, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = (
            self._db()
            .execute(
                "SELECT seq, t, job, type, message, executor, data FROM events WHERE job = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (job, after, limit),
            )
            .fetchall()
        )
        return [Event(s, t, j, ty, m, e, json.loads(d)) for s, t, j, ty, m, e, d in rows]
