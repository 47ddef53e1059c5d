"""A stream never skips records silently: a position the partition no longer holds, or offsets of a
log that was replaced, are handled by the source's ``offset_reset`` policy with an event; a commit
that the broker cannot take does not stop training. All against the real broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.training.stream.source import StreamOffsetLost, StreamSource
from tests.training.conftest import T0, events, kafka_source, produce, to_json

pytestmark = pytest.mark.timeout(120)


def _source(bootstrap: str, topic: str, policy: str) -> KafkaSource:
    return kafka_source(bootstrap, topic, group_id=f"{topic}-g", offset_reset=policy)


def _produce(bootstrap: str, topic: str, rows: int) -> None:
    produce(bootstrap, topic, to_json(events(0, rows, T0, seed=1)))


def _drain(src: StreamSource, want: int) -> list[int]:
    """Offsets of every row the source serves, until ``want`` rows or it has no more."""
    got: list[int] = []
    while len(got) < want and src.fill(want - len(got), timeout_s=20) > 0:
        for batch in src.take(want - len(got)):
            assert batch.positions is not None
            got.extend(int(p) for p in batch.positions)
    return got


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, type_: str, message: str, data: dict[str, Any]) -> None:
        self.seen.append((type_, message, data))

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [d for t, _, d in self.seen if t == type_]


def _topic_id(bootstrap: str, topic: str) -> str:
    consumer: Any = KafkaConsumer(bootstrap_servers=bootstrap, client_id="primus-tests")
    try:
        consumer.partitions_for_topic(topic)
        return str(consumer._client.cluster.topic_id(topic))
    finally:
        consumer.close()


@pytest.fixture
def topic_of_100(kafka_broker: Any, new_topic: Callable[..., str]) -> tuple[str, str]:
    topic = new_topic("reset")
    _produce(kafka_broker.bootstrap_servers, topic, 100)
    return kafka_broker.bootstrap_servers, topic


def test_a_replaced_log_fails_by_default_with_a_clear_message(topic_of_100: tuple[str, str]) -> None:
    bootstrap, topic = topic_of_100
    old_log = {"cluster_id": None, "topic_id": "00000000-0000-0000-0000-000000000001"}
    src = StreamSource(
        _source(bootstrap, topic, "fail"), start_offsets={0: 40}, log_identity=old_log, bounded=True
    )
    try:
        with pytest.raises(StreamOffsetLost) as caught:
            src.fill(10, timeout_s=20)
        message = str(caught.value)
        assert "topic was recreated" in message and "offset_reset" in message and "40" in message
        assert src.take(10) == []  # nothing served from the new log at the old position
    finally:
        src.close()


@pytest.mark.parametrize(("policy", "first", "skipped"), [("earliest", 0, 0), ("latest", None, 100)])
def test_a_replaced_log_resumes_by_policy_with_the_skip_recorded(
    topic_of_100: tuple[str, str], policy: str, first: int | None, skipped: int
) -> None:
    bootstrap, topic = topic_of_100
    seen = Events()
    src = StreamSource(
        _source(bootstrap, topic, policy),
        start_offsets={0: 40},
        log_identity={"topic_id": "00000000-0000-0000-0000-000000000001"},
        bounded=True,
        on_event=seen,
    )
    try:
        offsets = _drain(src, 100)
        assert offsets == ([] if first is None else list(range(first, 100)))
        (reset,) = seen.of("StreamOffsetReset")
        assert reset["skipped"] == skipped and reset["log_replaced"] and reset["offset"] == 40
        state = src.checkpoint_state()
        assert state["skipped_records"] == skipped
        assert state["log"]["topic_id"] == _topic_id(bootstrap, topic)  # the new log from now on
    finally:
        src.close()


def test_records_deleted_under_a_checkpoint_are_counted_when_resumed_from_earliest(
    topic_of_100: tuple[str, str],
) -> None:
    bootstrap, topic = topic_of_100
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="primus-tests")
    try:
        admin.delete_records({TopicPartition(topic, 0): 60})  # retention passed the checkpoint
    finally:
        admin.close()
    identity = {"topic_id": _topic_id(bootstrap, topic)}

    strict = StreamSource(_source(bootstrap, topic, "fail"), start_offsets={0: 50}, log_identity=identity)
    try:
        with pytest.raises(StreamOffsetLost, match="records before it were deleted"):
            strict.fill(10, timeout_s=20)
    finally:
        strict.close()

    seen = Events()
    src = StreamSource(
        _source(bootstrap, topic, "earliest"),
        start_offsets={0: 50},
        log_identity=identity,
        bounded=True,
        on_event=seen,
    )
    try:
        assert _drain(src, 100) == list(range(60, 100))
        (reset,) = seen.of("StreamOffsetReset")
        assert (reset["offset"], reset["resumed_at"], reset["skipped"]) == (50, 60, 10)
        assert not reset["log_replaced"]
    finally:
        src.close()


def test_the_checkpointed_position_of_the_same_log_resumes_exactly(topic_of_100: tuple[str, str]) -> None:
    bootstrap, topic = topic_of_100
    identity = {"topic_id": _topic_id(bootstrap, topic)}
    seen = Events()
    src = StreamSource(
        _source(bootstrap, topic, "fail"),
        start_offsets={0: 40},
        log_identity=identity,
        bounded=True,
        on_event=seen,
    )
    try:
        assert _drain(src, 100) == list(range(40, 100))
        assert seen.of("StreamOffsetReset") == []
        src.commit(src.trained_offsets())
    finally:
        src.close()  # the last commit is tried once on close
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"{topic}-g", client_id="primus-tests")
    try:
        assert consumer.committed(TopicPartition(topic, 0)) == 100
    finally:
        consumer.close()


def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again under the same name (a broker whose data was wiped):
    the consumer's position now points past the end of a shorter, other log."""
    from kafka.admin import NewTopic

    old = _topic_id(bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="primus-tests")
    try:
        admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while True:  # the name is free once the deletion has gone through
            try:
                admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
                break
            except TopicAlreadyExistsError:
                if _topic_id(bootstrap, topic) != old:  # created again already, by a client's request
                    break
                assert time.monotonic() < deadline, f"{topic} was not deleted"
                time.sleep(0.2)
    finally:
        admin.close()


@pytest.mark.parametrize("policy", ["earliest", "fail"])
def test_a_log_truncated_under_a_running_consumer_is_handled_in_place(
    topic_of_100: tuple[str, str], policy: str
) -> None:
    """The broker's log is cut back below the position of a consumer that is reading it (kafka-python
    raises ``LogTruncationError`` from its poll): the source's ``offset_reset`` applies in the fetch
    thread with a ``StreamOffsetReset`` event, as for a position that is gone, and the trainer is
    not crashed by an "ingest failed"."""
    bootstrap, topic = topic_of_100
    seen = Events()
    src = StreamSource(_source(bootstrap, topic, policy), start_offsets={0: 0}, on_event=seen)
    try:
        assert _drain(src, 100) == list(range(100))
        _recreate(bootstrap, topic)
        _produce(bootstrap, topic, 10)
        deadline = time.monotonic() + 60
        # Until the fetch thread meets the new log, the source has nothing more (not an error).
        if policy == "fail":
            with pytest.raises(StreamOffsetLost, match="offset_reset: earliest or latest"):
                while time.monotonic() < deadline:
                    src.fill(10, timeout_s=1)
            return
        while not seen.of("StreamOffsetReset") and time.monotonic() < deadline:
            src.fill(10, timeout_s=1)
        (reset,) = seen.of("StreamOffsetReset")
        assert (reset["offset"], reset["resumed_at"]) == (100, 0)
        got: list[int] = []
        while len(got) < 10 and time.monotonic() < deadline:  # the seek reaches the decoder next
            got += _drain(src, 10 - len(got))
        assert got == list(range(10))  # the new log, from its first record
    finally:
        src.close()


def test_a_topic_recreated_under_buffered_rows_reports_one_skipped_figure_and_a_fresh_lag(
    topic_of_100: tuple[str, str],
) -> None:
    """The topic is deleted and created again while 60 of its rows are read but not yet trained,
    under ``offset_reset: earliest``: those rows are dropped (their offsets name other records now).
    The ``StreamOffsetReset`` event, the stream's block of the status, its checkpoint and the job's
    metrics all say the same number of records skipped; and once the new log is read the lag is 0,
    counted from the new log's end, not from the old log's high watermark."""
    from prometheus_client.parser import text_string_to_metric_families

    from airflow_provider_primus.master.metrics import JobMetrics, render

    bootstrap, topic = topic_of_100
    seen = Events()
    src = StreamSource(_source(bootstrap, topic, "earliest"), on_event=seen)
    try:
        assert src.fill(100, timeout_s=30) == 100
        assert sum(len(b) for b in src.take(40)) == 40
        _recreate(bootstrap, topic)
        _produce(bootstrap, topic, 10)
        deadline = time.monotonic() + 60
        while not seen.of("StreamOffsetReset"):
            assert time.monotonic() < deadline, (
                f"no StreamOffsetReset after the topic was recreated: {seen.seen}"
            )
            src.wait(0.5)
        (reset,) = seen.of("StreamOffsetReset")
        assert (reset["resumed_at"], reset["log_replaced"]) == (0, True), reset
        got: list[int] = []
        while len(got) < 10 and time.monotonic() < deadline:  # the new records reach the broker next
            got += _drain(src, 10 - len(got))
        assert got == list(range(10))  # the new log, from its first record
        health, checkpoint = src.health(), src.checkpoint_state()
        status = {"progress": {"trainer_metrics": {"stream": health}}}
        samples = {
            s.name: s.value
            for family in text_string_to_metric_families(
                render(JobMetrics("job", lambda: status, dict)).decode()
            )
            for s in family.samples
        }
        figures = {
            "event": reset["skipped"],
            "status": health["skipped_records"],
            "checkpoint": checkpoint["skipped_records"],
            "metrics": int(samples["primus_stream_skipped_records_total"]),
        }
        assert figures == dict.fromkeys(figures, 60)  # the 60 rows of the old log never trained
        deadline = time.monotonic() + 30
        while src.health()["lag"] != {"0": 0}:  # the next probe's answer, at most a second away
            assert time.monotonic() < deadline, f"lag after the reset: {src.health()['lag']}"
            src.wait(0.5)
        assert src.lag_records(timeout_s=5) == 0
    finally:
        src.close()
