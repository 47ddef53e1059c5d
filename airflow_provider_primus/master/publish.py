"""Status publication: the master is the only writer of a job's status, and writes only what changed.

An unchanged status is not written again until a heartbeat is due: on Kubernetes every write is an
etcd revision, and an idle job must not cost requests per pass. The heartbeat (``updated``) tells
readers the master is alive.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import psutil

from airflow_provider_primus.contracts.status import TERMINAL, JobStatus, MasterEndpoint
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.master.history import StatusHistory, default_every_s
from airflow_provider_primus.master.store import JobStore, modify
from airflow_provider_primus.master.store_health import HEARTBEAT_S

__all__ = ["JobEndedError", "MasterError", "StatusPublisher", "refuse_second_master"]


class MasterError(PrimusError):
    pass


class JobEndedError(MasterError):
    """A master started for a job that has already ended: nothing to do. A driver pod restarted
    after its job's end (a node reboot, a deleted pod) must end as the job did, not crash-loop."""

    def __init__(self, job: str, phase: str) -> None:
        super().__init__(f"job {job!r} already ended: {phase}; nothing to do")
        self.phase = phase


def refuse_second_master(job: str, master: MasterEndpoint | None) -> None:
    """One writer per status: a master whose predecessor (by pid and start time) still runs stops."""
    if master is None or not master.pid or master.pid == os.getpid():
        return
    try:
        same = abs(psutil.Process(master.pid).create_time() - master.pid_created) < 0.01
    except psutil.Error:
        return
    if same:
        raise MasterError(f"job {job!r} already has a running master (pid {master.pid})")


class StatusPublisher:
    def __init__(
        self, store: JobStore, job: str, on_status: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.store, self.job, self.on_status = store, job, on_status
        self._last: tuple[str, float] = ("", 0.0)
        self._history: StatusHistory | None = None  # resumed from the stored status at first use
        try:  # read now: a bad setting stops the master before the job starts, not at its first status
            self._history_every_s = default_every_s()
        except ValueError as exc:
            raise MasterError(str(exc)) from None

    def failed(self, previous: JobStatus, message: str, executors: dict[str, Any]) -> None:
        """A job that cannot start fails with its reason in the status it had (no heartbeat dedupe)."""
        status = {
            **previous.to_json(),
            "phase": "Failed",
            "message": message,
            "executors": executors,
            "updated": time.time(),
        }
        modify(self.store, self.job, lambda _r: status, part="status")

    def publish(self, model: JobStatus) -> bool:
        """Write the status unless it equals the last one written less than a heartbeat ago."""
        status = model.to_json()
        fingerprint, now = json.dumps(status, sort_keys=True, default=str), time.monotonic()
        if fingerprint == self._last[0] and now - self._last[1] < HEARTBEAT_S:
            return False
        status["updated"] = time.time()
        if self._history is None:
            saved = self.store.get(self.job).status.get("history") or []
            self._history = StatusHistory(saved, every_s=self._history_every_s)
        self._history.add(model, status["updated"], force=model.phase in TERMINAL)
        status["history"] = self._history.to_list()
        modify(self.store, self.job, lambda _r: status, part="status")
        self._last = (fingerprint, now)
        if self.on_status is not None:
            self.on_status(status)
        return True
