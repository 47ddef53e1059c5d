"""When failing reconcile passes fail the job, and how they and the recovery from them are told."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.master.events import EventLog

__all__ = [
    "FAILING_FOR_S",
    "MAX_BACKOFF_S",
    "MAX_PASS_ERRORS",
    "PassFailures",
    "record_failed_pass",
    "record_recovery",
]

log = logging.getLogger(__name__)

MAX_PASS_ERRORS = 20  # consecutive failed passes before the job is failed ...
FAILING_FOR_S = 180.0  # ... once they have failed this long: an API server restarting is not a failure
MAX_BACKOFF_S = 5.0  # the longest wait between failing passes


class PassFailures:
    """Consecutive failed reconcile passes, and when the job should give up on them.

    A pass fails for two kinds of reasons: the job cannot go on (a bug, a spec the cluster refuses),
    or what the master talks to is away for a while (a control plane restarting or overloaded). The
    second must not fail a long-running job, and failing it then cannot even be recorded: the status
    write fails too, the master exits, and the executors it stopped on the way out are lost to the
    next master. So the job fails only after failures that are both many and long, and the passes
    between them back off instead of hammering what is failing."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.count = 0
        self.since: float | None = None

    def clear(self) -> None:
        self.count, self.since = 0, None

    def add(self) -> bool:
        """Count one; whether the job should now fail."""
        now = self.clock()
        self.count += 1
        if self.since is None:
            self.since = now
        return self.count >= MAX_PASS_ERRORS and now - self.since >= FAILING_FOR_S

    def backoff(self, tick_s: float) -> float:
        """The wait before the next pass: the tick, doubled per failure in a row up to a bound."""
        if self.count == 0:
            return tick_s
        return min(MAX_BACKOFF_S, tick_s * float(2 ** min(self.count, 16)))

    def summary(self) -> str:
        held = self.clock() - (self.since if self.since is not None else self.clock())
        return f"{self.count} reconcile passes in a row failed over {held:.0f} s"


def record_failed_pass(events: EventLog, exc: Exception) -> None:
    """The event goes to the same store that may be what is failing: not recording it is logged,
    never a second failure of the pass."""
    try:
        events.emit(EventType.RECONCILE_ERROR, f"{type(exc).__name__}: {exc}")
    except Exception:
        log.exception("recording the failed pass")


def record_recovery(events: EventLog, held_s: float, failures: int) -> None:
    """Passes succeed again: the stored status is current once more; say how long it was not."""
    message = f"the job's status is current again after {failures} failed pass(es) over {held_s:.0f} s"
    try:
        events.emit(EventType.STORE_RECOVERED, message)
    except Exception:
        log.exception("recording the recovery")
