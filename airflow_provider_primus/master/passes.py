"""When failing reconcile passes fail the job."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["FAILING_FOR_S", "MAX_BACKOFF_S", "MAX_PASS_ERRORS", "PassFailures"]

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
