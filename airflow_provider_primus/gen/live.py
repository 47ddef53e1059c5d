"""The click log's stream produced live: event time = now, a steady rate with one burst.

``produce_stream`` (events.py) replays the stream days with their own event times, as fast as a rate
allows: right for benchmarks, which compare training modes on the same data. A demo needs the
opposite: events that happen *now*, so freshness reads in seconds and the charts move at the pace
of the wall clock, and a change of load the system must answer. ``produce_live`` takes the stream
days' rows in production order (:func:`iter_stream`, so the world's drift and cold start are in
them), stamps each with the moment it is sent, and paces them by a :class:`Schedule`.

The world's days are compressed into the demo's minutes: one stream day lasts ``day_s`` seconds of
wall time whatever the rate, so the drift a batch-only model misses accumulates as it would over
days, and a burst is more traffic of the same day, not days of drift crammed into seconds. A day's
rows are cycled when the schedule asks for more of them than the world has (the same users and items
clicking again). When the world's stream days run out, production stops (size the world for the
run; the demo gives it enough days for hours).

Run as ``python -m airflow_provider_primus.gen.live JSON`` (the demo does, in its own process
group): SIGTERM or SIGINT stops it after flushing what was sent, and it prints the count.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_primus.data.sources.kafka_client import KafkaTarget, tool_client
from airflow_provider_primus.gen.clicklog import SCHEMA, World
from airflow_provider_primus.gen.events import encode_events, ensure_topic, iter_stream

__all__ = ["Schedule", "produce_live"]

_TICK_S = 0.05  # rows are sent in chunks of one tick's worth: no sleep per message


@dataclass(frozen=True)
class Schedule:
    """``rate`` rows/s, except ``burst_rate`` rows/s from ``burst_at_s`` for ``burst_s`` seconds
    after the start; ``duration_s`` ends production (None: until stopped or the world runs out)."""

    rate: float = 100.0
    burst_at_s: float | None = 90.0
    burst_s: float = 30.0
    burst_rate: float = 3000.0
    duration_s: float | None = None
    day_s: float = 60.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.day_s) and self.day_s > 0):
            raise ValueError(f"day_s must be a finite number > 0, got {self.day_s}")
        for name in ("rate", "burst_s", "burst_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        for name in ("burst_at_s", "duration_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0 or null, got {value}")

    def rate_at(self, t: float) -> float:
        in_burst = self.burst_at_s is not None and self.burst_at_s <= t < self.burst_at_s + self.burst_s
        return self.burst_rate if in_burst else self.rate

    def due(self, t: float) -> float:
        """Rows that should have been sent ``t`` seconds after the start (the integral of the rate)."""
        rows = self.rate * t
        if self.burst_at_s is not None and t > self.burst_at_s:
            overlap = min(t, self.burst_at_s + self.burst_s) - self.burst_at_s
            rows += (self.burst_rate - self.rate) * overlap
        return rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Days:
    """The stream days in production order; ``take`` cycles through the rows of the day asked for."""

    def __init__(self, world: World) -> None:
        self._days: Iterator[pa.Table] = iter_stream(world)
        self._index = -1
        self._table: pa.Table | None = None
        self._cursor = 0

    def take(self, day: int, rows: int) -> pa.Table | None:
        """Up to ``rows`` rows of stream day ``day`` (None once the world has no such day)."""
        while self._index < day or self._table is None or self._table.num_rows == 0:
            self._table = next(self._days, None)
            if self._table is None:
                return None
            self._index, self._cursor = self._index + 1, 0
        if self._cursor >= self._table.num_rows:
            self._cursor = 0
        chunk = self._table.slice(self._cursor, min(rows, 1000))
        self._cursor += chunk.num_rows
        return chunk


def produce_live(
    world: World,
    bootstrap_servers: KafkaTarget,
    topic: str,
    schedule: Schedule,
    *,
    stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.time,
) -> int:
    """Produce the world's stream days to ``topic`` as they happen now; the number of messages.

    Every row's ``ts`` (and the record timestamp) is the wall-clock millisecond it is handed to the
    producer; rows are sent in ticks of 50 ms, as many as the schedule makes due. Returns when
    ``stop()`` says so, the schedule's duration is over or the stream days are exhausted, after
    flushing; the first send error is raised then, so a broken broker is not a success.
    """
    from airflow_provider_primus.data.sources.kafka_client import producer as new_producer

    ensure_topic(bootstrap_servers, topic)
    producer = new_producer(bootstrap_servers, client_id="primus-live", linger_ms=10, batch_size=256 * 1024)
    errors: list[BaseException] = []
    sent = 0
    days = _Days(world)
    t0 = time.monotonic()
    try:
        while not stop():
            elapsed = time.monotonic() - t0
            if schedule.duration_s is not None and elapsed >= schedule.duration_s:
                break
            want = int(schedule.due(elapsed)) - sent
            while want > 0 and not stop():
                chunk = days.take(int(elapsed // schedule.day_s), want)
                if chunk is None:
                    return sent  # the world's stream days are exhausted (flushed below)
                now_ms = int(clock() * 1000)
                stamps = np.full(chunk.num_rows, now_ms, dtype=np.int64)
                ts = pa.array(stamps * 1000, pa.int64()).cast(SCHEMA.field("ts").type)
                chunk = chunk.set_column(SCHEMA.get_field_index("ts"), "ts", ts)
                keys = chunk.column("user_id").to_numpy().tolist()
                for value, key in zip(encode_events(chunk), keys, strict=True):
                    future = producer.send(topic, value=value, key=str(key).encode(), timestamp_ms=now_ms)
                    future.add_errback(errors.append)
                sent += chunk.num_rows
                want -= chunk.num_rows
            time.sleep(_TICK_S)
    finally:
        producer.flush()
        producer.close()
        if errors:
            raise errors[0]
    return sent


def main(argv: list[str]) -> int:
    """``{"world": {...World fields, "start": ISO}, "bootstrap": ..., "topic": ..., "schedule": {...}}``,
    and optionally ``"security"``: a source's ``security`` mapping (the password by variable name)."""
    from airflow_provider_primus.contracts.kafka import KafkaSecurity
    from airflow_provider_primus.process import StopRequested

    args = json.loads(argv[0])
    fields = dict(args["world"])
    fields["start"] = datetime.fromisoformat(fields["start"])
    stop = StopRequested()
    sent = produce_live(
        World.from_defaults(**fields),
        tool_client(
            args["bootstrap"],
            KafkaSecurity.model_validate(args["security"]) if args.get("security") else None,
            owner="primus live producer",
        ),
        args["topic"],
        Schedule(**args.get("schedule", {})),
        stop=lambda: stop.requested,
    )
    print(sent, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
