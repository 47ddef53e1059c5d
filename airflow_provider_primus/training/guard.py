"""The freshness guard and the replay gate: when history gives way to a lagging stream, and in a
replay how far ahead of history the stream may run.

Separate from the loop: these are the freshness rules of the training spec (``Freshness``), decided
before each step from the feeds alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from airflow_provider_primus.spec.training import Freshness
from airflow_provider_primus.training.feeds import Feed, FileFeed, StreamFeed

__all__ = ["clock_ms", "freshness_guard", "update_gate"]


def clock_ms(freshness: Freshness, watermark_ms: int) -> int:
    """Now, for freshness and the guard's age check: the wall clock, or in a replay the newest event
    time trained so far (``watermark_ms``: the replayed world's "now" as far as the model knows it)."""
    if freshness.clock == "wall":
        return int(time.time() * 1000)
    return watermark_ms


def update_gate(stream: StreamFeed | None, feeds: Iterable[Feed], freshness: Freshness) -> None:
    """In a replay, hold back stream rows newer than the history still being trained."""
    if stream is None or freshness.clock != "replay":
        return
    history = [f for f in feeds if isinstance(f, FileFeed) and not f.exhausted()]
    stream.gate_ms = max((f.watermark_ms for f in history), default=0) if history else None


def freshness_guard(
    stream: StreamFeed | None, freshness: Freshness, now_ms: Callable[[], int]
) -> tuple[bool, int, float]:
    """(lagging, lag in records, age of the next event in seconds): lagging when the stream is
    further behind than the spec allows, by records or by event age."""
    if stream is None:
        return False, 0, 0.0
    lag = stream.lag_records()
    if not stream.source.available:
        # Deferring history cannot make an absent broker serve sooner: history trains on.
        return False, lag, 0.0
    nxt = stream.next_event_ms()
    age = max(0.0, (now_ms() - nxt) / 1000.0) if nxt is not None else 0.0
    lagging = (freshness.max_lag_records is not None and lag > freshness.max_lag_records) or (
        freshness.max_event_age_s is not None and nxt is not None and age > freshness.max_event_age_s
    )
    return lagging, lag, age
