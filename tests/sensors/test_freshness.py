"""StreamFreshnessSensor on a real topic and consumer group, and on a job's stored watermark."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowException
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_provider_primus.embedded.kafka import BrokerState
from airflow_provider_primus.master.store import SqliteJobStore, modify
from airflow_provider_primus.sensors.freshness import StreamFreshnessSensor
from tests.data.conftest import spec_doc


def kafka_spec(tmp_path: Path, bootstrap: str, topic: str, group: str | None) -> Path:
    source: dict[str, Any] = {
        "name": "events",
        "type": "kafka",
        "bootstrap_servers": bootstrap,
        "topic": topic,
        "event_time_field": "ts",
        "start": {"policy": "committed"},
        "schema": {"sparse": ["user_id"], "label": {"column": "clicked"}},
    }
    if group:
        source["group_id"] = group
    path = tmp_path / "stream.yaml"
    path.write_text(yaml.safe_dump(spec_doc([source])))
    return path


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteJobStore:
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path / "primus"))
    return SqliteJobStore()


def running_job(store: SqliteJobStore, spec_path: Path | None, watermark: datetime | None) -> None:
    """The job object a streaming job's master keeps: the data document it reads, its trainer's watermark."""
    store.create("stream", {"spec": {"data": str(spec_path)} if spec_path else {}})
    metrics = {"watermark": watermark.isoformat() if watermark else None}
    status = {"phase": "Running", "progress": {"trainer_metrics": metrics}}
    modify(store, "stream", lambda r: status, part="status")


def test_consumer_lag_is_end_minus_committed(
    kafka_broker: BrokerState, new_topic: Callable[..., str], tmp_path: Path, store: SqliteJobStore
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic("fresh", partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for _ in range(10):
        producer.send(topic, value=b"{}", partition=0)
    for _ in range(5):
        producer.send(topic, value=b"{}", partition=1)
    producer.flush()
    producer.close()
    group = f"g-{topic}"
    committer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "", -1)})  # partition 1: never
    committer.close()
    spec_path = kafka_spec(tmp_path, bootstrap, topic, group)

    # (10 - 4) on partition 0, and all 5 of partition 1, which the group never committed
    at_limit = StreamFreshnessSensor(task_id="fresh", spec_path=str(spec_path), max_lag_records=11).poke({})
    assert at_limit.is_done and at_limit.xcom_value == {"lag_records": 11}
    assert (
        not StreamFreshnessSensor(task_id="fresh", spec_path=str(spec_path), max_lag_records=10)
        .poke({})
        .is_done
    )

    # Only the job named: its data document gives the source; both measures must pass.
    running_job(store, spec_path, datetime.now(UTC) - timedelta(seconds=30))
    both = StreamFreshnessSensor(task_id="fresh", job="stream", max_lag_records=11, max_event_lag_s=300)
    result = both.poke({})
    assert result.is_done and result.xcom_value["lag_records"] == 11
    assert 30 <= result.xcom_value["event_lag_s"] < 300
    stale = StreamFreshnessSensor(task_id="fresh", job="stream", max_lag_records=11, max_event_lag_s=10)
    assert not stale.poke({}).is_done


def test_event_lag_from_the_watermark(store: SqliteJobStore) -> None:
    running_job(store, None, datetime.now(UTC) - timedelta(seconds=120))
    result = StreamFreshnessSensor(task_id="fresh", job="stream", max_event_lag_s=600).poke({})
    assert result.is_done and 120 <= result.xcom_value["event_lag_s"] < 600
    assert not StreamFreshnessSensor(task_id="fresh", job="stream", max_event_lag_s=60).poke({}).is_done

    modify(store, "stream", lambda r: {"phase": "Running"}, part="status")  # nothing trained yet
    nothing = StreamFreshnessSensor(task_id="fresh", job="stream", max_event_lag_s=600).poke({})
    assert not nothing.is_done and nothing.xcom_value == {"event_lag_s": None}

    modify(store, "stream", lambda r: {"phase": "Failed", "message": "broker gone"}, part="status")
    with pytest.raises(AirflowException, match="'stream' is Failed, not running: broker gone"):
        StreamFreshnessSensor(task_id="fresh", job="stream", max_event_lag_s=600).poke({})
    with pytest.raises(AirflowException, match="no job named 'other'"):
        StreamFreshnessSensor(task_id="fresh", job="other", max_event_lag_s=600).poke({})


def test_a_source_without_a_group_cannot_be_measured(tmp_path: Path) -> None:
    spec_path = kafka_spec(tmp_path, "127.0.0.1:9", "t", group=None)
    with pytest.raises(AirflowException, match="has no group_id"):
        StreamFreshnessSensor(task_id="fresh", spec_path=str(spec_path), max_lag_records=0).poke({})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job": "j"}, "give max_lag_records and/or max_event_lag_s"),
        ({"spec_path": "s.yaml", "max_event_lag_s": 60}, "max_event_lag_s needs job"),
        ({"max_lag_records": 5}, "needs spec_path"),
        ({"job": "j", "max_lag_records": -1}, "must be >= 0"),
    ],
)
def test_a_sensor_that_could_never_measure_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StreamFreshnessSensor(task_id="fresh", **kwargs)
