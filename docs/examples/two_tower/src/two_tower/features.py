"""Features computed in Python, once, for files and for the stream: a ``type: python`` transform.

The data document names it in a source's schema::

    transforms:
      - type: python
        function: "two_tower.features:time_and_price"
        inputs: [price]            # a raw column the schema does not declare
        outputs: [hour_of_day, log_price]
        options: {timestamp: ts, unit: ms}
      - {column: hour_of_day, hash_bucket: 24}

Data executors run it on each batch of a file and the trainer's stream decoder on each block of
Kafka events, so ``hour_of_day`` and ``log_price`` are the same numbers on both paths. It works on
whole columns with pyarrow.compute (no Python per row) and keeps every row, in order.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["time_and_price"]

_UNITS = ("s", "ms", "us", "ns")


def time_and_price(batch: pa.RecordBatch, *, timestamp: str = "ts", unit: str = "ms") -> pa.RecordBatch:
    """``batch`` with ``hour_of_day`` (0..23, UTC, from ``timestamp``: epoch integers in ``unit``,
    timestamps or ISO 8601 strings, as a JSON event carries them) and ``log_price``
    (``ln(1 + price)``; a negative price is an error, not a feature)."""
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)} (got {unit!r})")
    times = batch.column(timestamp)
    if pa.types.is_integer(times.type):
        times = pc.cast(pc.cast(times, pa.int64()), pa.timestamp(unit, tz="UTC"))
    elif pa.types.is_string(times.type) or pa.types.is_large_string(times.type):
        times = _parse_iso(times)
    hours = pc.cast(pc.hour(times), pa.int64())
    price = pc.cast(batch.column("price"), pa.float64())
    negative = pc.sum(pc.cast(pc.less(price, 0.0), pa.int64())).as_py() or 0
    if negative:
        raise ValueError(f"{negative} negative price(s): log_price needs price >= 0")
    log_price = pc.cast(pc.ln(pc.add(price, 1.0)), pa.float32())
    names = [n for n in batch.schema.names if n not in ("hour_of_day", "log_price")]
    return pa.RecordBatch.from_arrays(
        [*(batch.column(n) for n in names), hours, log_price], names=[*names, "hour_of_day", "log_price"]
    )


def _parse_iso(values: pa.Array) -> pa.Array:
    """ISO 8601 strings as UTC timestamps: with an offset as written, without one taken as UTC."""
    try:
        return pc.cast(values, pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid:
        return pc.cast(pc.cast(values, pa.timestamp("us")), pa.timestamp("us", tz="UTC"))
