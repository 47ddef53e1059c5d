"""Whether event times are believable, and which unit would make integer ones so.

An integer event time does not say what it counts. Read in the wrong unit it still converts without
error: epoch seconds read as milliseconds land in January 1970, milliseconds read as seconds tens of
thousands of years ahead. Every time-based decision (watermarks, freshness, the guard, replay) then
goes wrong by a factor of 1000 with nothing to show for it. So every place that sees event times —
the planner (Parquet statistics), ``primus validate --sample`` and the trainer (each row it uses) —
checks them against a plausible range and reports what it finds, naming the unit that would fit.

Plausible: from 1990-01-01 to one day after now (wall clock: this is about the data, not about a
replay's notion of "now"). Both bounds are far from any unit mix-up: seconds read as milliseconds are
before 1970-02, milliseconds read as seconds after the year 50,000.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_primus.contracts.schema import DEFAULT_EVENT_TIME_UNIT, EVENT_TIME_UNITS, EventTime

__all__ = [
    "FUTURE_SLACK_MS",
    "MIN_PLAUSIBLE_MS",
    "EventTimeFinding",
    "check_values",
    "fitting_units",
    "implausible",
    "iso",
    "now_ms",
    "unit_hint",
]

MIN_PLAUSIBLE_MS = int(datetime(1990, 1, 1, tzinfo=UTC).timestamp() * 1000)
FUTURE_SLACK_MS = 86_400_000  # one day: clocks and time zones disagree by hours, not by more
# Milliseconds per unit: what one integer step of each unit is worth.
MS_PER_UNIT: dict[str, float] = {"s": 1000.0, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def now_ms() -> int:
    return int(time.time() * 1000)


def implausible(times_ms: np.ndarray[Any, Any], now: int | None = None) -> int:
    """How many of these epoch-millisecond times are before 1990 or more than a day ahead."""
    if not len(times_ms):
        return 0
    upper = (now_ms() if now is None else now) + FUTURE_SLACK_MS
    return int(np.count_nonzero((times_ms < MIN_PLAUSIBLE_MS) | (times_ms > upper)))


def fitting_units(low: float, high: float, now: int | None = None) -> tuple[str, ...]:
    """The units in which integers from ``low`` to ``high`` are all plausible event times."""
    upper = (now_ms() if now is None else now) + FUTURE_SLACK_MS
    return tuple(
        u
        for u in EVENT_TIME_UNITS
        if low * MS_PER_UNIT[u] >= MIN_PLAUSIBLE_MS and high * MS_PER_UNIT[u] <= upper
    )


def unit_hint(declared: EventTime, low_ms: float, high_ms: float) -> str:
    """What to declare when integer times from ``low_ms`` to ``high_ms`` (as read) would be
    plausible in another unit; empty when none fits. Said wherever such times are reported, so a unit
    mix-up is named rather than only counted or dead-lettered."""
    unit = declared.integer_unit
    fits = [u for u in fitting_units(low_ms / MS_PER_UNIT[unit], high_ms / MS_PER_UNIT[unit]) if u != unit]
    if not fits:
        return ""
    return (
        f"; if column {declared.column!r} holds integers, they were read as epoch "
        f"{UNIT_NAMES[unit]} but fit epoch {UNIT_NAMES[fits[0]]}: declare "
        f"event_time: {{column: {declared.column}, unit: {fits[0]}}}"
    )


def iso(ms: float) -> str:
    """A time for a message; out-of-range values (a unit mix-up) are still shown, as a number."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms:.0f} ms since the epoch"


@dataclass(frozen=True)
class EventTimeFinding:
    """Implausible event times in one source: what was checked, what was found, what would fit.

    ``what`` counts files (the planner, from statistics) or values (a sample, the trainer);
    ``low``/``high`` are the raw range as stored (integers in the column's own numbers, else epoch
    milliseconds), ``integers`` whether they are integers read in ``unit``.
    """

    source: str
    column: str
    unit: str | None  # declared; None: integers read as milliseconds, the default
    what: str  # "files" or "values"
    implausible: int
    checked: int
    low: float
    high: float
    integers: bool
    fits: tuple[str, ...] = ()
    example: str | None = None  # a file holding such values

    def message(self) -> str:
        unit = self.unit or DEFAULT_EVENT_TIME_UNIT
        read = f"epoch {UNIT_NAMES[unit]}" + (f" (unit: {unit})" if self.unit else " (no unit declared)")
        scale = MS_PER_UNIT[unit] if self.integers else 1.0
        span = f"{iso(self.low * scale)} .. {iso(self.high * scale)}"
        text = (
            f"source {self.source!r}: event time column {self.column!r}: {self.implausible} of "
            f"{self.checked} {self.what} hold implausible event times (before 1990-01-01 or more than "
            f"a day ahead): {span}"
        )
        if self.example:
            text += f", e.g. in {self.example}"
        if not self.integers:
            return text
        text += f"; the integers {self.low:.0f} .. {self.high:.0f} were read as {read}"
        others = [u for u in self.fits if u != unit]
        if others:
            fit = others[0]
            text += (
                f"; they fit epoch {UNIT_NAMES[fit]}: declare "
                f"event_time: {{column: {self.column}, unit: {fit}}}"
            )
        else:
            text += "; no unit (s, ms, us, ns) makes them plausible"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "column": self.column,
            "unit": self.unit,
            "what": self.what,
            "implausible": self.implausible,
            "checked": self.checked,
            "low": self.low,
            "high": self.high,
            "integers": self.integers,
            "fits": list(self.fits),
            "example": self.example,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EventTimeFinding:
        return cls(**{**d, "fits": tuple(d.get("fits") or ())})


def _as_ms(values: pa.Array) -> pa.Array | None:
    """Timestamps and ISO 8601 strings as epoch milliseconds (int64); None for other types."""
    typ = values.type
    try:
        if pa.types.is_timestamp(typ):
            return pc.cast(pc.cast(values, pa.timestamp("ms", tz=typ.tz), safe=False), pa.int64())
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            try:
                stamps = pc.cast(values, pa.timestamp("us", tz="UTC"))
            except pa.ArrowInvalid:
                stamps = pc.cast(values, pa.timestamp("us"))
            return pc.cast(pc.cast(stamps, pa.timestamp("ms"), safe=False), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return None


def check_values(
    source: str, event_time: EventTime, values: pa.Array | pa.ChunkedArray, now: int | None = None
) -> EventTimeFinding | None:
    """A finding when any value of a raw event-time column is implausible in the declared unit.

    Integers are read in the declared unit (default milliseconds); timestamps and ISO strings carry
    their own. Nulls are not judged here (they are missing, not wrong); values that cannot be read as
    times at all are the transformer's error to report."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.drop_null()
    if not len(values):
        return None
    now = now_ms() if now is None else now
    unit = event_time.integer_unit
    integers = pa.types.is_integer(values.type)
    if integers:
        raw = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = implausible(raw * MS_PER_UNIT[unit], now)
    else:
        millis = _as_ms(values)
        if millis is None:
            return None
        raw = np.asarray(millis.to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = implausible(raw, now)
    if not bad:
        return None
    low, high = float(raw.min()), float(raw.max())
    return EventTimeFinding(
        source=source,
        column=event_time.column,
        unit=event_time.unit,
        what="values",
        implausible=bad,
        checked=len(raw),
        low=low,
        high=high,
        integers=integers,
        fits=fitting_units(low, high, now) if integers else (),
    )


def check_ranges(
    source: str,
    event_time: EventTime,
    ranges: Sequence[tuple[str, str, float, float]],
    now: int | None = None,
) -> EventTimeFinding | None:
    """A finding over files from their ``(path, kind, low, high)`` statistics; ``kind`` is ``int``
    (raw integers, read in the declared unit) or ``ms`` (timestamps or ISO strings, already ms)."""
    if not ranges:
        return None
    now = now_ms() if now is None else now
    unit = event_time.integer_unit
    bad = []
    for path, kind, low, high in ranges:
        scale = MS_PER_UNIT[unit] if kind == "int" else 1.0
        if implausible(np.asarray([low * scale, high * scale]), now):
            bad.append((path, kind, low, high))
    if not bad:
        return None
    ints = [r for r in bad if r[1] == "int"]
    shown = ints or bad  # one kind of number in the message's range
    integers = bool(ints)
    low = min(r[2] for r in shown)
    high = max(r[3] for r in shown)
    return EventTimeFinding(
        source=source,
        column=event_time.column,
        unit=event_time.unit,
        what="files",
        implausible=len(bad),
        checked=len(ranges),
        low=low,
        high=high,
        integers=integers,
        fits=fitting_units(low, high, now) if integers else (),
        example=min(p for p, _, _, _ in bad),
    )
