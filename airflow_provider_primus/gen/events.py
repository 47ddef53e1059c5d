"""The click log's stream days as Kafka messages: production order, JSON encoding, producing.

Separate from the world (``clicklog.py``): how events are ordered, encoded and sent changes with the
stream's consumers, not with what the world generates.

Stream messages (:func:`produce_stream`) are compact JSON objects with the table's columns in order::

    {"sample_id":400000,"user_id":1234,"item_id":56,"hour":0,"user_activity":2.0794415,
     "item_price":19.99,"clicked":0,"ts":"2026-01-21T00:00:03.123Z"}

``ts`` is ISO 8601 in UTC with exactly three fractional digits and a ``Z``: readable in a console
consumer, lossless because event times are whole milliseconds, and one type in every block of a JSON
reader (pyarrow infers ``timestamp[s]`` from whole-second strings but keeps fractional ones as
strings, so a varying format would give blocks of different types). Floats
are the shortest text that reads back to the same float32; a null ``item_price`` is ``null``. The key
is the decimal ASCII of ``user_id`` and the record timestamp is the event time in epoch milliseconds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_primus.data.sources.kafka_client import KafkaTarget
from airflow_provider_primus.gen.clicklog import SCHEMA, World, generate_day

__all__ = ["encode_events", "ensure_topic", "iter_stream", "produce_stream"]


def iter_stream(world: World) -> Iterator[pa.Table]:
    """The stream days' rows in production order: label availability, then event time, then
    ``sample_id``. Without a label delay that is plain event-time order.

    A delayed click can become known on a later day than its impression, so rows not yet available by
    the next day's start are carried into that day's merge rather than emitted early.
    """
    delay_ms = round(world.label_delay_s * 1000)
    carry: pa.Table | None = None
    last = world.days - 1
    for day in range(world.history_days, world.days):
        table = generate_day(world, day)
        if carry is not None:
            table = pa.concat_tables([carry, table])
        ts_ms = table.column("ts").to_numpy().astype("datetime64[ms]").astype(np.int64)
        available = ts_ms + delay_ms * table.column("clicked").to_numpy()
        order = np.lexsort((table.column("sample_id").to_numpy(), ts_ms, available))
        table = table.take(pa.array(order))
        if day == last:
            yield table
            return
        cut = int(np.searchsorted(available[order], int(world.day_start(day + 1).timestamp() * 1000)))
        yield table.slice(0, cut)
        carry = table.slice(cut)


def encode_events(table: pa.Table) -> list[bytes]:
    """The JSON value of each row (see the module docstring for the format)."""
    cols = {name: table.column(name) for name in SCHEMA.names}
    ts = cols["ts"].to_numpy().astype("datetime64[ms]")
    ts_text = np.char.add(np.datetime_as_string(ts, unit="ms"), "Z")
    price = cols["item_price"].fill_null(0.0).to_numpy().astype(np.float32).astype(str).astype(object)
    price[pc.is_null(cols["item_price"]).to_numpy(zero_copy_only=False)] = "null"
    activity = cols["user_activity"].to_numpy().astype(np.float32).astype(str)
    ints = [cols[name].to_numpy().tolist() for name in ("sample_id", "user_id", "item_id", "hour", "clicked")]
    return [
        (
            f'{{"sample_id":{sid},"user_id":{uid},"item_id":{iid},"hour":{h},"user_activity":{act},'
            f'"item_price":{p},"clicked":{c},"ts":"{t}"}}'
        ).encode()
        for sid, uid, iid, h, c, act, p, t in zip(
            *ints, activity.tolist(), price.tolist(), ts_text.tolist(), strict=True
        )
    ]


def _malformed(good: bytes, kth: int) -> bytes:
    """The ``kth`` dead letter, cycling through the three ways a producer gets a message wrong."""
    kind = kth % 3
    if kind == 0:  # a truncated write: never valid JSON, since the object is not closed
        return good[: len(good) // 2]
    row = json.loads(good)
    if kind == 1:  # valid JSON, but not an object
        return json.dumps(list(row.values()), separators=(",", ":")).encode()
    del row["user_id"]  # an object missing a required field
    return json.dumps(row, separators=(",", ":")).encode()


def ensure_topic(bootstrap_servers: KafkaTarget, topic: str, partitions: int = 1) -> bool:
    """Create ``topic`` unless it exists; True when this call created it.

    Retention by time is off for it: records carry their *event* time as Kafka timestamp, months in
    the past for a synthetic world, and the broker's default 7-day retention would delete them at its
    next check (within 5 minutes) — in the middle of a benchmark. Timestamps ahead of the broker's
    clock are accepted too (by default Kafka refuses those more than an hour ahead): a world whose
    stream days run until tomorrow is produced live, today.
    """
    from airflow_provider_primus.data.sources.kafka import ensure_topic as create

    configs = {"retention.ms": "-1", "message.timestamp.after.max.ms": str(2**63 - 1)}
    return create(bootstrap_servers, topic, partitions, configs)


def produce_stream(
    world: World,
    bootstrap_servers: KafkaTarget,
    topic: str,
    *,
    rate: float = 0.0,
    dead_letter_every: int = 0,
    partitions: int = 1,
    on_rows: Callable[[int], None] | None = None,
) -> int:
    """Produce the stream days to ``topic`` in :func:`iter_stream` order; the number of messages.

    ``rate`` is rows per second (0: as fast as the producer goes), paced against a monotonic clock in
    chunks of ~50 ms so a slow consumer demo is realistic without one sleep per message.
    ``dead_letter_every=N`` replaces messages N, 2N, ... (1-based, counted over the whole stream) with
    a truncated JSON text, a JSON array, and an object missing ``user_id``, in turn; each keeps its
    row's key and timestamp, so the count and the partitioning do not change. Raises the first send
    error after flushing, so a broken broker is not reported as a success. ``on_rows(n)``: n more
    rows were handed to the producer (a progress display).
    """
    if rate < 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a finite number >= 0, got {rate}")
    if dead_letter_every < 0:
        raise ValueError(f"dead_letter_every must be >= 0, got {dead_letter_every}")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    from airflow_provider_primus.data.sources.kafka_client import producer as new_producer

    ensure_topic(bootstrap_servers, topic, partitions)
    producer = new_producer(bootstrap_servers, client_id="primus-gen", linger_ms=20, batch_size=256 * 1024)
    errors: list[BaseException] = []
    chunk = max(1, int(rate / 20)) if rate > 0 else 0
    sent = 0
    t0 = time.monotonic()
    try:
        for table in iter_stream(world):
            values = encode_events(table)
            keys = table.column("user_id").to_numpy().tolist()
            stamps = (table.column("ts").to_numpy().astype("datetime64[ms]").astype(np.int64)).tolist()
            for good, key, stamp in zip(values, keys, stamps, strict=True):
                sent += 1
                bad = dead_letter_every and sent % dead_letter_every == 0
                value = _malformed(good, sent // dead_letter_every - 1) if bad else good
                future = producer.send(topic, value=value, key=str(key).encode(), timestamp_ms=stamp)
                future.add_errback(errors.append)
                if chunk and sent % chunk == 0:
                    ahead = t0 + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
            if on_rows is not None:
                on_rows(table.num_rows)
        producer.flush()
    finally:
        producer.close()
    if errors:
        raise errors[0]
    return sent
