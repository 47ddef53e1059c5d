"""Kafka sources: topic partitions resolved to offset ranges by the broker itself.

A bounded window [start, end) becomes, per partition, [offset of the first record at or after
start, offset of the first record at or after end) via the broker's offsets-for-times (ListOffsets
with a timestamp); an open-ended plan starts where the source's start policy says and has no end.

Every client here is made by ``kafka_client.py`` from a source (its security settings) or from plain
bootstrap servers (the embedded broker).

Two failures look alike to kafka-python (an empty answer, or a timeout) and call for opposite
handling: a topic the broker says it does not have (:class:`TopicNotFoundError`) stays missing
however often it is asked, so it is terminal; a broker that does not answer
(:class:`BrokerUnavailableError`) may be back in a second, so it is an outage to retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from kafka import TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from airflow_provider_primus.data.sources.kafka_client import (
    KafkaClient,
    KafkaTarget,
    admin_client,
    kafka_client,
)
from airflow_provider_primus.data.sources.kafka_client import consumer as _consumer
from airflow_provider_primus.data.sources.kafka_client import producer as _producer
from airflow_provider_primus.errors import PrimusError, TerminalError

# How long kafka-python waits for a first broker when a client sets nothing shorter.
KAFKA_PYTHON_BOOTSTRAP_TIMEOUT_MS = 30_000
# What kafka-python raises when no broker answers: a bootstrap or a request that timed out, a
# connection refused or lost (``NoBrokersAvailable``: kafka-python before 3.0). A broker's own error
# answer (a topic or partition it does not know, a leader moving) is no outage and is left as it is.
_UNANSWERED: tuple[type[BaseException], ...] = tuple(
    getattr(kafka_errors, name)
    for name in (
        "KafkaTimeoutError",
        "KafkaConnectionError",
        "NodeNotReadyError",
        "RequestTimedOutError",
        "NoBrokersAvailable",
    )
    if hasattr(kafka_errors, name)
)


class KafkaPlanError(PrimusError):
    pass


class TopicNotFoundError(KafkaPlanError, TerminalError):
    """The broker answered and holds no such topic (or none this client may see). Terminal: asking
    again asks the same broker; the topic must be created or the source changed first."""

    def __init__(self, topic: str, servers: str) -> None:
        super().__init__(f"topic {topic!r} does not exist on {servers}")
        self.topic, self.servers = topic, servers


class BrokerUnavailableError(PrimusError):
    """No broker of the bootstrap list answered in time (nothing listening, a broker restarting, a
    partitioned network): an outage, which the stream waits out like one that starts mid-run."""


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


@contextmanager
def _offsets_consumer(
    kafka: KafkaTarget, timeout_ms: int, **overrides: Any
) -> Iterator[tuple[Any, KafkaClient]]:
    """A consumer that never subscribes nor commits, for offset and metadata questions, and its
    client settings; closed on the way out. A broker that does not answer (at bootstrap, within
    ``timeout_ms`` at most, or later) is a :class:`BrokerUnavailableError`."""
    client = kafka_client(kafka)
    # Never longer than kafka-python's own wait, nor than a secured client's shorter one.
    bootstrap_ms = client.kwargs().get("bootstrap_timeout_ms", KAFKA_PYTHON_BOOTSTRAP_TIMEOUT_MS)
    try:
        consumer: Any = _consumer(
            client,
            enable_auto_commit=False,
            bootstrap_timeout_ms=min(timeout_ms, bootstrap_ms),
            **overrides,
        )
        try:
            yield consumer, client
        finally:
            consumer.close()
    except _UNANSWERED as exc:
        raise BrokerUnavailableError(f"no Kafka broker at {client.servers} answered: {exc}") from exc


def topic_partitions(consumer: Any, topic: str, servers: str) -> list[TopicPartition]:
    """The topic's partitions in partition order, from the broker's metadata (``consumer``: any
    consumer; ``servers``: for the message). Raises :class:`TopicNotFoundError` when the broker's
    answer has no such topic."""
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise TopicNotFoundError(topic, servers)
    return [TopicPartition(topic, p) for p in sorted(parts)]


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
    with _offsets_consumer(
        kafka,
        timeout_ms,
        group_id=group_id if start_policy == "committed" else None,
        request_timeout_ms=timeout_ms + 1000,
        client_id="primus-planner",
    ) as (consumer, client):
        tps = topic_partitions(consumer, topic, client.servers)
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
    with _offsets_consumer(
        kafka, timeout_ms, group_id=group_id, request_timeout_ms=timeout_ms, client_id="primus-lag"
    ) as (consumer, client):
        tps = topic_partitions(consumer, topic, client.servers)
        end = consumer.end_offsets(tps, timeout_ms=timeout_ms)
        beginning = consumer.beginning_offsets(tps, timeout_ms=timeout_ms)
        lag: dict[int, int] = {}
        for tp in tps:
            committed = consumer.committed(tp, timeout_ms=timeout_ms)
            base = beginning[tp] if committed is None else max(committed, beginning[tp])
            lag[tp.partition] = max(0, end[tp] - base)
        return lag
