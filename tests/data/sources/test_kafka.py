"""The offset lookups' two failures, against real servers: a topic the broker says it does not have
is terminal and names the topic; a bootstrap address where nothing listens is an outage, reported
within the lookup's timeout and retried by the stream like any other."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_primus.data.sources.kafka import (
    BrokerUnavailableError,
    KafkaPlanError,
    TopicNotFoundError,
    consumer_lag,
    resolve_offsets,
)
from airflow_provider_primus.embedded.kafka import BrokerState
from airflow_provider_primus.errors import PrimusError, TerminalError, is_terminal
from airflow_provider_primus.training.stream.reconnect import retriable

pytestmark = pytest.mark.timeout(120)


def _resolve(servers: str, topic: str, timeout_ms: int) -> object:
    return resolve_offsets(
        kafka=servers,
        topic=topic,
        start_policy="earliest",
        start_timestamp=None,
        group_id=None,
        window_start=None,
        window_end=None,
        timeout_ms=timeout_ms,
    )


def _lag(servers: str, topic: str, timeout_ms: int) -> object:
    return consumer_lag(kafka=servers, topic=topic, group_id=f"g-{topic}", timeout_ms=timeout_ms)


LOOKUPS: dict[str, Callable[[str, str, int], Any]] = {"resolve_offsets": _resolve, "consumer_lag": _lag}


@pytest.fixture
def unanswered() -> Iterator[str]:
    """A loopback address where nothing listens: the port is bound (so no one else takes it) but
    never listened on, so every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.kafka
@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_an_unknown_topic_is_terminal_and_named(
    kafka_broker: BrokerState, new_topic: Callable[..., str], lookup: str
) -> None:
    new_topic("present")  # the broker holds topics, just not this one
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    with pytest.raises(TopicNotFoundError) as caught:
        LOOKUPS[lookup](kafka_broker.bootstrap_servers, missing, 10_000)
    error = caught.value
    assert error.topic == missing and missing in str(error)
    assert kafka_broker.bootstrap_servers in str(error)
    assert isinstance(error, TerminalError) and is_terminal(error)
    assert isinstance(error, KafkaPlanError)  # what callers of the lookups already catch
    assert not retriable(error)  # the stream fails on it instead of waiting it out


@pytest.mark.kafka
def test_a_present_topic_resolves_through_the_same_lookup(
    kafka_broker: BrokerState, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("here", partitions=3)
    assert _resolve(kafka_broker.bootstrap_servers, topic, 10_000) == [
        (0, 0, None),
        (1, 0, None),
        (2, 0, None),
    ]
    assert _lag(kafka_broker.bootstrap_servers, topic, 10_000) == {0: 0, 1: 0, 2: 0}


@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_a_broker_that_cannot_be_reached_is_an_outage_within_the_timeout(
    unanswered: str, lookup: str
) -> None:
    t0 = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as caught:
        LOOKUPS[lookup](unanswered, "events", 2_000)
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"took {elapsed:.1f} s for a 2 s timeout"
    error = caught.value
    assert unanswered in str(error)
    assert isinstance(error, PrimusError) and not is_terminal(error)
    assert not isinstance(error, KafkaPlanError)  # not a planning mistake: the broker is away
    assert retriable(error)  # counted and waited out as a stream outage
