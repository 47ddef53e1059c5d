"""A stream's event-time policy applied to decoded rows: which times are believed, and what becomes of
the others (``contracts/sources.py`` ``EventTimePolicy``).

Applied where events are decoded, before anything can train on them, because the watermark is the
newest event time trained: one event stamped 2096 would otherwise be the job's "now" under a replay
clock and its freshness reference for good, and a checkpoint would carry it into every resumed run.
Judged against the wall clock at decode time (the data's believability is about the real now, not a
replay's notion of it), so a backfill of old events is out of policy only when older than the
floor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from airflow_provider_primus.contracts.sources import DEFAULT_MAX_AHEAD_S, EventTimePolicy
from airflow_provider_primus.data.event_time import iso
from airflow_provider_primus.training.clock import wall_ms

log = logging.getLogger(__name__)

__all__ = ["EventTimeJudgement", "EventTimeScreen", "sane_watermark", "watermark_allowance_s"]


@dataclass(frozen=True)
class EventTimeJudgement:
    """One block's verdict: which rows are out of policy, and the bounds they were judged by."""

    out: np.ndarray[Any, np.dtype[np.bool_]]
    now_ms: int
    floor_ms: int
    upper_ms: int

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.out))


class EventTimeScreen:
    def __init__(self, policy: EventTimePolicy, wall: Callable[[], int] = wall_ms) -> None:
        self.policy = policy
        self._wall = wall

    @property
    def clamps(self) -> bool:
        return self.policy.action == "clamp"

    def judge(self, times_ms: np.ndarray[Any, Any]) -> EventTimeJudgement:
        now = self._wall()
        floor, upper = self.policy.min_event_time_ms, now + self.policy.max_ahead_ms
        return EventTimeJudgement((times_ms > upper) | (times_ms < floor), now, floor, upper)

    def reason(self, time_ms: int, judged: EventTimeJudgement) -> str:
        """Why one event is out of policy, with the bound it broke: the dead letter's header."""
        if time_ms < judged.floor_ms:
            return (
                f"event time {iso(time_ms)} is before event_time_policy.min_event_time "
                f"({iso(judged.floor_ms)})"
            )
        return (
            f"event time {iso(time_ms)} is more than event_time_policy.max_ahead_s "
            f"({self.policy.max_ahead_s:g} s) ahead of now ({iso(judged.now_ms)})"
        )

    @staticmethod
    def clamp(times_ms: np.ndarray[Any, Any], judged: EventTimeJudgement) -> np.ndarray[Any, Any]:
        """The times moved to the nearest bound (a new array: the batch's may be read-only)."""
        clamped: np.ndarray[Any, Any] = np.clip(times_ms, judged.floor_ms, judged.upper_ms)
        return clamped


def watermark_allowance_s(policies: Iterable[EventTimePolicy]) -> float:
    """How far ahead of now a trained watermark can honestly be: the widest ``max_ahead_s`` of the
    job's streams (the default's when it has none: files carry no policy, their times are planned)."""
    return max((p.max_ahead_s for p in policies), default=DEFAULT_MAX_AHEAD_S)


def sane_watermark(watermark_ms: int, allowance_s: float, wall: Callable[[], int] = wall_ms) -> int:
    """A restored watermark no later than now + ``allowance_s``.

    A checkpoint written before the policy existed may carry a watermark from an event stamped
    decades ahead; restored as is, it would keep poisoning freshness, the guard and a replay clock
    for the rest of the job, since the watermark only ever moves forward."""
    upper = wall() + int(allowance_s * 1000)
    if watermark_ms <= upper:
        return watermark_ms
    log.warning(
        "the checkpoint's watermark %s is more than %g s ahead of now: an event time no policy "
        "screened; resuming with %s",
        iso(watermark_ms),
        allowance_s,
        iso(upper),
    )
    return upper
