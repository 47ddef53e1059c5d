"""The live producer: events stamped with the moment they are sent, at the schedule's rate with its
burst, world days advancing with wall time whatever the rate."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from airflow_provider_primus.gen.events import iter_stream
from airflow_provider_primus.gen.live import Schedule, _Days, produce_live
from tests.gen.test_clicklog import SMALL


def test_the_schedule_integrates_its_rate_and_burst() -> None:
    s = Schedule(rate=100.0, burst_at_s=10.0, burst_s=5.0, burst_rate=1000.0)
    assert s.due(10.0) == pytest.approx(1000.0)
    assert s.due(15.0) == pytest.approx(1000.0 + 5000.0)
    assert s.due(20.0) == pytest.approx(6000.0 + 500.0)
    assert (s.rate_at(9.9), s.rate_at(12.0), s.rate_at(15.0)) == (100.0, 1000.0, 100.0)
    with pytest.raises(ValueError, match="day_s"):
        Schedule(day_s=0)
    with pytest.raises(ValueError, match="rate"):
        Schedule(rate=0)


def test_days_advance_by_index_and_cycle_their_rows() -> None:
    first, second = (t.column("sample_id").to_pylist() for t in iter_stream(SMALL))
    days = _Days(SMALL)
    taken: list[int] = []
    while len(taken) < len(first) + 10:  # more than the day holds: its rows again, from the top
        chunk = days.take(0, 700)
        assert chunk is not None
        taken += chunk.column("sample_id").to_pylist()
    assert taken[: len(first)] == first and taken[len(first) :] == first[: len(taken) - len(first)]
    chunk = days.take(1, 5)
    assert chunk is not None and chunk.column("sample_id").to_pylist() == second[:5]
    assert days.take(2, 5) is None  # the world has two stream days


@pytest.mark.kafka
def test_events_happen_now_at_the_schedules_pace(kafka_broker: Any, new_topic: Any) -> None:
    topic = new_topic("live")
    schedule = Schedule(rate=200.0, burst_at_s=0.5, burst_s=0.5, burst_rate=2000.0, duration_s=2.0)
    began = time.time()
    sent = produce_live(SMALL, kafka_broker.bootstrap_servers, topic, schedule)
    ended = time.time()
    # The schedule's rows (one 50 ms tick of slack at the end), never more.
    assert schedule.due(1.9) <= sent <= schedule.due(2.0) + 1
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap_servers, consumer_timeout_ms=5000)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    records = [r for r in consumer]
    consumer.close()
    assert len(records) == sent
    for record in records:
        event = json.loads(record.value)
        stamped = record.timestamp / 1000
        assert began - 0.01 <= stamped <= ended + 0.01  # the moment it was sent, not the world's
        assert event["ts"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(stamped)))
