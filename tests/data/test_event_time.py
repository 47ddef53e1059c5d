"""Plausibility of event times and the unit that fits, on real Arrow arrays."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from airflow_provider_primus.contracts.schema import EventTime
from airflow_provider_primus.data.event_time import (
    EventTimeFinding,
    check_ranges,
    check_values,
    fitting_units,
    implausible,
)

NOW = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
SECONDS = int(datetime(1997, 9, 1, tzinfo=UTC).timestamp())  # a 1997 log in epoch seconds


def ts(unit: str | None = None) -> EventTime:
    return EventTime.model_validate({"column": "ts", "unit": unit} if unit else "ts")


def test_plausible_is_from_1990_to_a_day_ahead() -> None:
    day = 86_400_000
    edges = np.array([631_152_000_000 - 1, 631_152_000_000, NOW + day, NOW + day + 1], dtype=np.int64)
    assert implausible(edges, NOW) == 2
    assert implausible(np.array([0, NOW], dtype=np.int64), NOW) == 1  # a null read as the epoch counts
    assert implausible(np.array([], dtype=np.int64), NOW) == 0


def test_fitting_units_tell_the_common_mix_ups_apart() -> None:
    assert fitting_units(SECONDS, SECONDS + 3600, NOW) == ("s",)
    assert fitting_units(SECONDS * 1000, SECONDS * 1000 + 1, NOW) == ("ms",)
    assert fitting_units(SECONDS * 10**6, SECONDS * 10**6, NOW) == ("us",)
    assert fitting_units(SECONDS * 10**9, SECONDS * 10**9, NOW) == ("ns",)
    assert fitting_units(0, 5, NOW) == ()


def test_seconds_without_a_unit_are_found_and_the_fitting_unit_named() -> None:
    values = pa.array([SECONDS, SECONDS + 60, None], pa.int64())
    finding = check_values("history", ts(), values, NOW)
    assert finding is not None
    assert (finding.implausible, finding.checked, finding.fits) == (2, 2, ("s",))  # nulls not judged
    message = finding.message()
    assert "source 'history'" in message and "'ts'" in message and "1970-01-11" in message
    assert "read as epoch milliseconds (no unit declared)" in message
    assert "declare event_time: {column: ts, unit: s}" in message
    assert check_values("history", ts("s"), values, NOW) is None


def test_milliseconds_declared_as_seconds_are_found_too() -> None:
    finding = check_values("events", ts("s"), pa.array([SECONDS * 1000], pa.int64()), NOW)
    assert finding is not None and finding.fits == ("ms",)
    assert "(unit: s)" in finding.message() and "unit: ms}" in finding.message()


def test_timestamps_and_iso_strings_need_no_unit() -> None:
    good = datetime(2026, 3, 1, tzinfo=UTC)
    assert check_values("h", ts("s"), pa.array([good], pa.timestamp("us", tz="UTC")), NOW) is None
    assert check_values("h", ts(), pa.array(["2026-03-01T00:00:00Z"]), NOW) is None
    old = check_values("h", ts("s"), pa.array(["1970-01-11T00:00:00Z"]), NOW)
    assert old is not None and not old.integers and old.fits == ()
    assert "1970-01-11" in old.message() and "declare" not in old.message()
    future = check_values("h", ts(), pa.array([datetime(2027, 6, 1)], pa.timestamp("ms")), NOW)
    assert future is not None and future.implausible == 1


def test_file_ranges_count_files_and_name_one() -> None:
    ranges = [
        ("/d/b.parquet", "int", float(SECONDS), float(SECONDS + 10)),
        ("/d/a.parquet", "int", float(SECONDS - 10), float(SECONDS)),
        ("/d/c.parquet", "ms", float(NOW - 1000), float(NOW)),
    ]
    finding = check_ranges("history", ts(), ranges, NOW)
    assert finding is not None
    assert (finding.what, finding.implausible, finding.checked, finding.example) == (
        "files",
        2,
        3,
        "/d/a.parquet",
    )
    assert finding.fits == ("s",) and "2 of 3 files" in finding.message()
    assert EventTimeFinding.from_dict(finding.as_dict()) == finding
    assert check_ranges("history", ts("s"), ranges[:2], NOW) is None
