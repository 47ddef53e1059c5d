"""The job's events as the master records them.

Events are written by the reconcile loop only: the store has one writer per job. Other threads (the
backend's watchdog) queue theirs, and the loop writes them at the start of its next pass. The newest
few are kept for the status, which carries them so a reader sees recent history without a second
request.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from airflow_provider_primus.contracts.status import EventType, payload_model
from airflow_provider_primus.master.store import JobStore

log = logging.getLogger(__name__)

__all__ = ["EventLog"]

TAIL = 20  # events carried in the status


class EventLog:
    def __init__(self, store: JobStore, job: str) -> None:
        self.store, self.job = store, job
        self._tail: deque[dict[str, Any]] = deque(maxlen=TAIL)
        self._queued: list[tuple[str, str, str | None, dict[str, Any]]] = []
        self._lock = threading.Lock()
        # Events by type (and scaling decisions by action) since the job began, for the metrics'
        # counters: seeded from the store, so a master restart is not a counter reset.
        self._counts: Counter[tuple[str, str | None]] = Counter()
        after = 0
        while batch := store.events(job, after=after, limit=10_000):
            for event in batch:
                self._count(event.type, event.data)
            after = batch[-1].seq

    def _count(self, type_: str, data: Mapping[str, Any]) -> None:
        with self._lock:
            self._counts[(type_, None)] += 1
            if type_ == EventType.SCALE_DECISION.value and data.get("action"):
                self._counts[(type_, str(data["action"]))] += 1

    def counts(self) -> dict[tuple[str, str | None], int]:
        with self._lock:
            return dict(self._counts)

    def emit(
        self,
        type_: EventType,
        message: str,
        executor: str | None = None,
        data: BaseModel | Mapping[str, Any] | None = None,
    ) -> None:
        """Record an event now (the loop's thread). ``data`` must fit the type's payload model
        (contracts/status.py): readers rely on it, so a payload that does not fit is a bug found here."""
        payload = payload_model(type_).model_validate(
            data.model_dump(mode="json") if isinstance(data, BaseModel) else dict(data or {})
        )
        body = payload.model_dump(mode="json", exclude_none=True)
        event = self.store.add_event(self.job, type_.value, message, executor, body)
        self._tail.append(event.to_dict())
        self._count(type_.value, body)
        log.info("%s %s", type_.value, message)

    def queue(self, type_: str, message: str, executor: str | None, data: dict[str, Any]) -> None:
        """Record an event at the loop's next pass (any thread); types from outside the master (a
        backend's) are checked then."""
        with self._lock:
            self._queued.append((type_, message, executor, data))

    def flush(self) -> None:
        with self._lock:
            queued, self._queued = self._queued, []
        for i, (type_, message, executor, data) in enumerate(queued):
            try:
                self._foreign(type_, message, executor, data)
            except Exception:  # the store is away: the rest waits for the next pass, in order
                with self._lock:
                    self._queued = queued[i:] + self._queued
                raise

    def _foreign(self, type_: str, message: str, executor: str | None, data: Mapping[str, Any]) -> None:
        """An event from a backend or a trainer: typed when its type is known, kept as it came
        otherwise (a newer component's), never dropped."""
        try:
            known = EventType(type_)
        except ValueError:
            self._as_it_came(type_, message, executor, data)
            return
        try:
            self.emit(known, message, executor, data)  # validates before it writes
        except ValidationError as exc:  # a component's bug; the event still tells something
            log.warning("%s event from %s with an unexpected payload: %s", type_, executor, exc)
            self._as_it_came(type_, message, executor, data)

    def _as_it_came(self, type_: str, message: str, executor: str | None, data: Mapping[str, Any]) -> None:
        event = self.store.add_event(self.job, type_, message, executor, dict(data))
        self._tail.append(event.to_dict())

    def from_trainer(
        self, executor: str, incarnation: str, report: Mapping[str, Any], seen: dict[str, int]
    ) -> None:
        """Job events a trainer raised (stream outages, offset resets), each recorded once: its
        reports repeat the newest ones with increasing ``seq``; ``seen`` (persisted with the status)
        holds the last seq recorded per incarnation, so a restarted master does not record them again."""
        last = int(seen.get(incarnation, 0))
        for event in report.get("events") or []:
            if int(event["seq"]) > last:
                last = int(event["seq"])
                self._foreign(
                    str(event["type"]), str(event["message"]), executor, dict(event.get("data") or {})
                )
        seen[incarnation] = last

    def tail(self) -> list[dict[str, Any]]:
        return list(self._tail)
