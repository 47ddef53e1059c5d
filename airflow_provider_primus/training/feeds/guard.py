"""The freshness guard and the replay gate: when history gives way to a lagging stream, and in a
replay how far ahead of history the stream may run.

Separate from the loop: these are the freshness rules of the training spec (``Freshness``), decided
before each step from the feeds alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from airflow_provider_primus.contracts.training import Freshness
from airflow_provider_primus.training.feeds.feed import Feed, FileFeed, StreamFeed

__all__ = ["freshness_guard", "update_gate"]


def update_gate(stream: StreamFeed | None, feeds: Iterable[Feed], replay: bool) -> None:
    """In a replay, hold back stream rows newer than the history still being trained. ``replay`` is
    the clock in force (training/clock.py): under ``auto`` it can turn to the wall clock mid-run, and
    then nothing is held back any more."""
    if stream is None:
        return
    if not replay:
        stream.gate_ms = None
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
