"""Kafka sources: topic partitions resolved to offset ranges by the broker itself.

A bounded window [start, end) becomes, per partition, [offset of the first record at or after
start, offset of the first record at or after end) via the broker's offsets-for-times (ListOffsets
with a timestamp); an open-ended plan starts where the source's start policy says and has no end.

Every client here is made by ``kafka_client.py`` from a source (its security settings) or from plain
bootstrap servers (the embedded broker).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kafka import TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from airflow_provider_primus.data.sources.kafka_client import KafkaTarget, admin_client, kafka_client
from airflow_provider_primus.data.sources.kafka_client import consumer as _consumer
from airflow_provider_primus.data.sources.kafka_client import producer as _producer
from airflow_provider_primus.errors import PrimusError


class KafkaPlanError(PrimusError):
    pass


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def resolve_offsets(
    *,
    kafka: KafkaTarget,
    topic: str,
    start_policy: str,
    start_timestamp: datetime | None,
    group_id: str | None,
    window_start: datetime | None,
    window_end: datetime | None,
    timeout_ms: int = 30_000,
) -> list[tuple[int, int, int | None]]:
    """[(partition, start_offset, end_offset | None)] in partition order. ``kafka``: the source (its
    client settings) or plain bootstrap servers."""
    client = kafka_client(kafka)
    consumer: Any = _consumer(
        client,
        group_id=group_id if start_policy == "committed" else None,
        enable_auto_commit=False,
        request_timeout_ms=timeout_ms + 1000,
        client_id="primus-planner",
    )
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise KafkaPlanError(f"topic {topic!r} does not exist on {client.servers}")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        beginning = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)

        def at(t: datetime) -> dict[TopicPartition, int]:
            found = consumer.offsets_for_times({tp: _ms(t) for tp in tps})
            # No record at or after t: the range starts (or ends) at the current end.
            return {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in tps}

        if window_end is not None:  # bounded replay of [window_start, window_end)
            start = at(window_start) if window_start is not None else beginning
            stop = at(window_end)
            return [(tp.partition, start[tp], max(start[tp], stop[tp])) for tp in tps]
        if start_policy == "timestamp":
            if start_timestamp is None and window_start is None:
                raise KafkaPlanError("start policy 'timestamp' needs a timestamp")
            start = at(start_timestamp or window_start)  # type: ignore[arg-type]
        elif start_policy == "earliest":
            start = beginning
        elif start_policy == "latest":
            start = end
        elif start_policy == "committed":
            start = {
                tp: (consumer.committed(tp) if consumer.committed(tp) is not None else beginning[tp])
                for tp in tps
            }
        else:
            raise KafkaPlanError(f"unknown start policy {start_policy!r}")
        return [(tp.partition, start[tp], None) for tp in tps]
    finally:
        consumer.close()


def produce(kafka: KafkaTarget, topic: str, values: Iterable[bytes]) -> int:
    """Send ``values`` to ``topic`` and wait until the broker has them all; raises the first send
    error, so a broker that refused records is never reported as a success. Returns the count."""
    producer = _producer(kafka, linger_ms=5)
    errors: list[BaseException] = []
    sent = 0
    try:
        for value in values:
            producer.send(topic, value).add_errback(errors.append)
            sent += 1
        producer.flush()
    finally:
        producer.close()
    if errors:
        raise errors[0]
    return sent


def ensure_topic(
    kafka: KafkaTarget,
    topic: str,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
) -> bool:
    """Create ``topic`` (replication factor 1) unless it exists; True when this call created it."""
    admin: Any = admin_client(kafka, client_id="primus-admin")
    try:
        if topic in admin.list_topics():
            return False
        try:
            admin.create_topics(
                [
                    NewTopic(
                        topic,
                        num_partitions=partitions,
                        replication_factor=1,
                        topic_configs=dict(configs or {}),
                    )
                ]
            )
        except TopicAlreadyExistsError:  # created concurrently by someone else
            return False
        return True
    finally:
        admin.close()


def consumer_lag(
    *,
    kafka: KafkaTarget,
    topic: str,
    group_id: str,
    timeout_ms: int = 10_000,
) -> dict[int, int]:
    """Records not yet committed by ``group_id``, per partition: end offset - committed offset.

    A partition the group never committed counts from its beginning offset (everything still there is
    unconsumed; counting from 0 would include records retention already deleted). The consumer never
    subscribes, so asking does not join the group or move its offsets.
    """
    client = kafka_client(kafka)
    consumer: Any = _consumer(
        client,
        group_id=group_id,
        enable_auto_commit=False,
        request_timeout_ms=timeout_ms,
        client_id="primus-lag",
    )
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise KafkaPlanError(f"topic {topic!r} does not exist on {client.servers}")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        end = consumer.end_offsets(tps, timeout_ms=timeout_ms)
        beginning = consumer.beginning_offsets(tps, timeout_ms=timeout_ms)
        lag: dict[int, int] = {}
        for tp in tps:
            committed = consumer.committed(tp, timeout_ms=timeout_ms)
            base = beginning[tp] if committed is None else max(committed, beginning[tp])
            lag[tp.partition] = max(0, end[tp] - base)
        return lag
    finally:
        consumer.close()
