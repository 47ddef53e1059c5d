"""``DataPartitionTrigger``: waits in the triggerer until a files source's partitions for a range exist.

The readiness check is ``airflow_provider_primus.data.readiness`` — the one the sensor's ``poke`` runs —
and every call of it (spec read, listings) runs in a thread: a listing on an object store blocks for
tens of milliseconds, which on the event loop would stall every other trigger. Idempotent: it keeps
nothing outside itself, so a triggerer restart re-runs it from the start and yields the same event.
The spec file must be readable where the triggerer runs (the same path as on the workers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_primus.data.readiness import (
    Readiness,
    ReadinessError,
    check_partitions,
    load_files_source,
    parse_time,
)


class DataPartitionTrigger(BaseTrigger):
    """Yields ``{"status": "success", "partitions": [...]}`` once every partition of ``source`` in
    [start, end) is ready, or ``{"status": "error", "message", "missing": [...]}`` on timeout or when
    the question is invalid (bad spec, unknown or non-files source, bad range: waiting cannot help).

    :param spec_path: the PrimusData document (readable where the triggerer runs).
    :param source: the files source's name.
    :param start: ISO 8601 start of the range.
    :param end: ISO 8601 end, exclusive.
    :param poll_interval: seconds between two checks.
    :param timeout_s: give up after this many seconds with the missing partitions (None: never).
    """

    def __init__(
        self,
        spec_path: str,
        source: str,
        start: str,
        end: str,
        *,
        poll_interval: float = 30.0,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__()
        self.spec_path = spec_path
        self.source = source
        self.start = start
        self.end = end
        self.poll_interval = poll_interval
        self.timeout_s = timeout_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "spec_path": self.spec_path,
                "source": self.source,
                "start": self.start,
                "end": self.end,
                "poll_interval": self.poll_interval,
                "timeout_s": self.timeout_s,
            },
        )

    def _error(self, message: str, missing: list[str]) -> TriggerEvent:
        return TriggerEvent(
            {"status": "error", "source": self.source, "message": message, "missing": missing}
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        try:
            files = await asyncio.to_thread(load_files_source, self.spec_path, self.source)
            start, end = parse_time(self.start, "start"), parse_time(self.end, "end")
        except ReadinessError as exc:
            yield self._error(str(exc), [])
            return
        ready: set[str] = set()
        last_missing = -1
        while True:
            try:
                found: Readiness = await asyncio.to_thread(
                    check_partitions, files, start, end, known_ready=frozenset(ready)
                )
            except ReadinessError as exc:
                yield self._error(str(exc), [])
                return
            if found.complete:
                self.log.info("source %s: all %d partitions ready", self.source, len(found.ready))
                yield TriggerEvent(
                    {"status": "success", "source": self.source, "partitions": list(found.ready)}
                )
                return
            ready.update(found.ready)
            if len(found.missing) != last_missing:  # log progress, not every poll of a long wait
                self.log.info("source %s: %s", self.source, found.describe_missing())
                last_missing = len(found.missing)
            waited = time.monotonic() - started
            if self.timeout_s is not None and waited >= self.timeout_s:
                yield self._error(
                    f"source {self.source!r}: timed out after {waited:.1f}s; {found.describe_missing()}",
                    found.missing_paths,
                )
                return
            pause = self.poll_interval
            if self.timeout_s is not None:  # wake for the deadline, so a timeout is not late by a poll
                pause = min(pause, max(0.0, self.timeout_s - waited))
            await asyncio.sleep(pause)
