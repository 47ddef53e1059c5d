"""DataPartitionTrigger on real files: it waits while partitions land, and says what never did."""

from __future__ import annotations

import asyncio
import importlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_provider_primus.triggers.partitions import DataPartitionTrigger
from tests.triggers.conftest import Lake, make_lake


def first_event(trigger: DataPartitionTrigger, timeout_s: float = 10.0) -> dict[str, Any]:
    async def main() -> TriggerEvent:
        return await asyncio.wait_for(anext(trigger.run()), timeout_s)

    payload: dict[str, Any] = asyncio.run(main()).payload
    return payload


def trigger_for(lake: Lake, **kw: Any) -> DataPartitionTrigger:
    return DataPartitionTrigger(str(lake.spec_path), "clicks", lake.start, lake.end, **kw)


def test_serialize_round_trips(lake: Lake) -> None:
    trigger = trigger_for(lake, poll_interval=5.0, timeout_s=60.0)
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert isinstance(again, DataPartitionTrigger)
    assert again.serialize() == (classpath, kwargs)
    assert kwargs == {
        "spec_path": str(lake.spec_path),
        "source": "clicks",
        "start": lake.start,
        "end": lake.end,
        "poll_interval": 5.0,
        "timeout_s": 60.0,
    }


def test_succeeds_once_the_markers_appear(lake: Lake) -> None:
    for t in lake.hours:
        lake.land(t, marker=False)  # data without markers: still being written

    def writer() -> None:
        time.sleep(0.3)  # the trigger has polled a few times by now
        for t in lake.hours:
            (Path(lake.path(t)) / "_SUCCESS").touch()
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    thread.start()
    try:
        event = first_event(trigger_for(lake, poll_interval=0.02))
    finally:
        thread.join()
    assert time.monotonic() - started >= 0.3, "it reported success before the markers existed"
    assert event == {"status": "success", "source": "clicks", "partitions": lake.paths()}
    # Idempotent: a second run (a triggerer restart) yields the same event.
    assert first_event(trigger_for(lake, poll_interval=0.02)) == event


def test_times_out_naming_what_is_missing(lake: Lake) -> None:
    lake.land(lake.hours[0])
    lake.land(lake.hours[2], marker=False)
    started = time.monotonic()
    event = first_event(trigger_for(lake, poll_interval=0.05, timeout_s=0.3))
    assert 0.3 <= time.monotonic() - started < 3
    assert event["status"] == "error"
    assert event["missing"] == [lake.path(lake.hours[1]), lake.path(lake.hours[2])]
    assert "timed out" in event["message"] and "2 of 3 partitions missing" in event["message"]
    assert "no success marker _SUCCESS" in event["message"]


def test_without_a_marker_a_partition_needs_a_data_file(tmp_path: Path) -> None:
    lake = make_lake(tmp_path, hours=2)
    (Path(lake.path(lake.hours[0])) / "_temporary").mkdir(parents=True)  # a writer still writing
    lake.land(lake.hours[1], marker=False)
    event = first_event(trigger_for(lake, poll_interval=0.02, timeout_s=0.1))
    assert event["missing"] == [lake.path(lake.hours[0])]
    assert "no parquet data files yet" in event["message"]
    lake.land(lake.hours[0], marker=False)
    assert first_event(trigger_for(lake, poll_interval=0.02))["partitions"] == lake.paths()


@pytest.mark.parametrize(
    ("source", "spec", "expected"),
    [
        ("nope", None, "unknown source 'nope'; known sources: clicks, stream"),
        ("stream", None, "'stream' is a kafka source"),
        ("clicks", "apiVersion: primus.dev/v1alpha1\nkind: PrimusData\n", "invalid PrimusData"),
    ],
)
def test_an_unanswerable_question_is_an_error_at_once(
    lake: Lake, source: str, spec: str | None, expected: str
) -> None:
    if spec is not None:
        lake.spec_path.write_text(spec)
    started = time.monotonic()
    event = first_event(DataPartitionTrigger(str(lake.spec_path), source, lake.start, lake.end))
    assert time.monotonic() - started < 5  # no waiting for the (absent) timeout
    assert event["status"] == "error" and event["missing"] == []
    assert expected in event["message"]


def test_a_bad_range_is_an_error(lake: Lake) -> None:
    event = first_event(DataPartitionTrigger(str(lake.spec_path), "clicks", lake.end, lake.start))
    assert event["status"] == "error" and "must be after start" in event["message"]
    event = first_event(DataPartitionTrigger(str(lake.spec_path), "clicks", "yesterday", lake.end))
    assert event["status"] == "error" and "ISO 8601" in event["message"]
