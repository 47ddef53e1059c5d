"""Whether the stream's broker answers, and what its outages have cost: the stream's side of the
job status.

Kept apart from fetching: the fetch thread reports what it sees (an answer, a retriable error); this
decides when an outage starts and ends and keeps the totals the job's status shows.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Availability"]


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class Availability:
    """Not locked by itself: the stream's shared state guards it with its condition."""

    def __init__(self) -> None:
        self.available = True
        self.outages = 0
        self.unavailable_s = 0.0  # outages that have ended
        self.last_error: str | None = None
        self.last_outage_s = 0.0  # how long the outage that ended last took
        self._unavailable_since: float | None = None  # monotonic

    def update(self, available: bool, error: BaseException | None, now: float) -> bool:
        """Record what the broker just did; True when availability changed (an event is due)."""
        if available == self.available:
            if error is not None:
                self.last_error = _describe(error)
            return False
        self.available = available
        if not available:
            self.outages += 1
            self._unavailable_since = now
            self.last_error = _describe(error) if error is not None else None
        else:
            self.last_outage_s = now - (self._unavailable_since or now)
            self.unavailable_s += self.last_outage_s
            self._unavailable_since = None
        return True

    def report(self, now: float) -> dict[str, Any]:
        """For the job status: an outage still going on counts up to ``now``."""
        down_now = now - self._unavailable_since if self._unavailable_since is not None else 0.0
        return {
            "available": self.available,
            "outages": self.outages,
            "unavailable_s": round(self.unavailable_s + down_now, 3),
            "last_error": self.last_error,
        }
