"""A trainer's telemetry for its job's master: where its time goes, and the master's commands.

Runs in its own thread because the signal that matters most — the trainer waiting for data — is
exactly when the training loop itself is blocked and could not report.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyarrow import flight

from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.resources.own_usage import own_usage

EVENTS_KEPT = 100


class JobReporter:
    def __init__(self, client: DispatcherClient, executor: str, interval_s: float = 0.5) -> None:
        self.client = client
        self.executor = executor
        self.interval_s = interval_s
        self.commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._wait_s = 0.0
        self._busy_s = 0.0
        self._since: float | None = None
        self._state = ""
        self.rows = 0
        self.extra: dict[str, Any] = {}
        # Figures of ``metrics`` read afresh for every report, not taken from the last step's summary:
        # what a stream's broker is doing changes while no step is trained (idle, or every source
        # waiting for it), and a report must not show it as it was at the last step.
        self.live_metrics: dict[str, Callable[[], Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._event_seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="primus-reporter", daemon=True)

    def start(self) -> JobReporter:
        self._thread.start()
        return self

    @contextlib.contextmanager
    def _timed(self, state: str) -> Iterator[None]:
        with self._lock:
            self._since, self._state = time.monotonic(), state
        try:
            yield
        finally:
            with self._lock:
                assert self._since is not None
                spent = time.monotonic() - self._since
                if state == "wait":
                    self._wait_s += spent
                else:
                    self._busy_s += spent
                self._since, self._state = None, ""

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        return self._timed("wait")

    def computing(self) -> contextlib.AbstractContextManager[None]:
        return self._timed("busy")

    def event(self, type_: str, message: str, data: dict[str, Any] | None = None) -> None:
        """A job event from the trainer (a stream outage, an offset reset). Reports carry the newest
        EVENTS_KEPT with increasing ``seq``, so one the master missed comes again in the next report
        and the master records each once."""
        with self._lock:
            self._event_seq += 1
            self._events.append(
                {"seq": self._event_seq, "type": type_, "message": message, "data": data or {}}
            )
            del self._events[:-EVENTS_KEPT]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            wait, busy = self._wait_s, self._busy_s
            if self._since is not None:  # count the wait (or step) still in progress
                ongoing = time.monotonic() - self._since
                wait += ongoing if self._state == "wait" else 0.0
                busy += ongoing if self._state == "busy" else 0.0
            events = list(self._events)
            extra = dict(self.extra)
            live = dict(self.live_metrics)
        if live:  # read outside the lock: a stream's figures take the stream's own
            extra["metrics"] = {**(extra.get("metrics") or {}), **{k: read() for k, read in live.items()}}
        usage = own_usage()  # what a master that cannot see this process (a pod) learns of its use
        snap = {
            "wait_s": round(wait, 4),
            "busy_s": round(busy, 4),
            "rows": self.rows,
            "cpu_s": usage["cpu_s"],
            "rss": usage["rss"],
            "usage_source": usage["source"],
            **extra,
        }
        if events:
            snap["events"] = events
        return snap

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.report()

    def report(self) -> None:
        try:
            for command in self.client.report(self.executor, self.snapshot()):
                self.commands.put(command)
        except flight.FlightError:
            pass  # the master is away (restarting): the next report carries the totals

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.report()
