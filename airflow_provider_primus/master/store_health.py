"""Whether a job's stored status is current, and if not, since when and why.

The status is the master's only voice, and it is written into the very store that may be failing
(a full disk, a file made read-only, an API server away). While its passes fail the master keeps
training, so a status that simply freezes says "all is well, nothing moves". The master therefore
writes a small note beside a local store (``<store>.health/<job>.json``: a file it can still write
when the store cannot be) saying since when and why its writes fail, and removes it once they
succeed. A reader that sees the note, or a heartbeat older than a few periods, says the status is
stale instead of showing it as current.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.errors import one_line
from airflow_provider_primus.master.store import JobStore, SqliteJobStore

__all__ = ["HEARTBEAT_S", "STALE_AFTER_S", "StoreHealth", "stale_reason"]

HEARTBEAT_S = 10.0  # the master rewrites an unchanged status this often (publish.py): liveness
STALE_AFTER_S = 3 * HEARTBEAT_S  # three missed heartbeats: the master is not writing


def note_path(store: JobStore, job: str) -> Path | None:
    """Where the note for ``job`` lives; None for a store that is not a local file (Kubernetes:
    the heartbeat alone tells)."""
    if not isinstance(store, SqliteJobStore):
        return None
    return store.path.parent / f"{store.path.name}.health" / f"{job}.json"


def read_note(store: JobStore, job: str) -> dict[str, Any] | None:
    path = note_path(store, job)
    if path is None:
        return None
    try:
        note = json.loads(path.read_text())
    except (OSError, ValueError):  # none (the usual case), or half-written: the heartbeat still tells
        return None
    return note if isinstance(note, dict) and "since" in note else None


class StoreHealth:
    """The master's side: record the first failure of a run of failing passes, clear it after."""

    def __init__(self, store: JobStore, job: str) -> None:
        self.path = note_path(store, job)
        self.since: float | None = None
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if self.since is None:
            self.since = time.time()
        if self.path is None:
            return
        note = {"since": self.since, "failures": self.failures, "reason": one_line(exc, 300)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            part.write_text(json.dumps(note))
            part.replace(self.path)
        except OSError:  # the disk is what fails: the heartbeat's age will tell readers instead
            pass

    def recovered(self) -> tuple[float, int] | None:
        """After a successful pass: (seconds the status was stale, failed passes) if it was."""
        if self.since is None:
            return None
        held, failures = time.time() - self.since, self.failures
        self.since, self.failures = None, 0
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
        return held, failures


def stale_reason(status: Mapping[str, Any], note: Mapping[str, Any] | None, now: float) -> str | None:
    """``status is stale since T because …`` for a running job whose status stopped being current;
    None when it is current (or the job has ended: an ended job's status is final, not stale)."""
    if status.get("phase") in TERMINAL:
        return None
    if note is not None:
        since = float(note["since"])
        return (
            f"status is stale since {_utc(since)} because the master cannot record it: "
            f"{note.get('reason') or 'its reconcile passes fail'} ({note.get('failures', '?')} failed "
            f"pass(es) in {now - since:.0f} s)"
        )
    updated = status.get("updated")
    if isinstance(updated, int | float) and now - updated > STALE_AFTER_S:
        return (
            f"status is stale since {_utc(float(updated))} because the master has not written it for "
            f"{now - updated:.0f} s (its heartbeat is every {HEARTBEAT_S:.0f} s): is the master running?"
        )
    return None


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
