"""Avro (schema file, and the Confluent wire format through a real Apicurio Registry) and Protobuf
streams train in mixed mode on the real broker, screened and transformed exactly as JSON events
are; every value that does not decode is dead-lettered with its reason and counted."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.data.formats import FormatFileError
from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.embedded.registry import RegistryState
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from airflow_provider_primus.training.stream.source import StreamSource
from tests.training.conftest import kafka_source
from tests.training.stream.formats_world import (
    AVRO_SCHEMA,
    MESSAGE,
    avro_bytes,
    descriptor_set,
    proto_bytes,
    proto_class,
    register,
    rows,
    training_doc,
    wire,
    write_world,
)

HISTORY_ROWS, STREAM_ROWS = 1500, 1000


def _train(root: Path, data_path: Path) -> dict[str, Any]:
    return Trainer(
        load_data_spec(data_path),
        load_training_spec(training_doc(root)),
        TrainOptions(workdir=root / "w", spec_path=data_path),
    ).run()


def _reasons(bootstrap: str, topic: str, expected: int) -> dict[bytes, str]:
    """Dead-lettered value -> its reason; exactly ``expected`` of them."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    try:
        letters = list(consumer)
    finally:
        consumer.close()
    reasons = {m.value: dict(m.headers)["primus.error"].decode() for m in letters}
    assert len(letters) == expected, reasons
    return reasons


def _check(result: dict[str, Any], bad: list[tuple[bytes, str]], bootstrap: str, topic: str) -> None:
    assert result["rows_trained"] == {"history": HISTORY_ROWS, "events": STREAM_ROWS}
    assert result["dead_lettered"] == len(bad)
    reasons = _reasons(bootstrap, f"{topic}.dlq", len(bad))
    for value, fragment in bad:
        assert fragment in reasons[value], (fragment, reasons[value])


def test_avro_with_a_schema_file_trains_and_dead_letters_what_does_not_decode(
    kafka_broker: Any, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, bootstrap = new_topic("avro-file"), kafka_broker.bootstrap_servers
    schema_file = tmp_path / "click.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    good = [avro_bytes(r) for r in rows(HISTORY_ROWS, STREAM_ROWS, seed=2)]
    label_less = avro_bytes({**rows(90_000, 1, seed=3)[0], "clicked": None})
    bad = [
        (good[0][:7], "truncated Avro"),
        (good[1] + b"\x02\x04", "byte(s) left after the record"),
        (label_less, "missing label: field 'clicked' is null"),
    ]
    produce(bootstrap, topic, good[:500] + [v for v, _ in bad] + good[500:])
    data_path = write_world(
        tmp_path, bootstrap, topic, HISTORY_ROWS, value_format="avro", avro={"schema_file": str(schema_file)}
    )
    _check(_train(tmp_path, data_path), bad, bootstrap, topic)


def test_avro_in_the_confluent_wire_format_through_the_registry(
    kafka_broker: Any, new_topic: Callable[..., str], schema_registry: RegistryState, tmp_path: Path
) -> None:
    topic, bootstrap = new_topic("avro-registry"), kafka_broker.bootstrap_servers
    schema_id = register(schema_registry, f"{topic}-value")
    # The schema evolves mid-topic: v2 adds a field (the transforms do not use it).
    v2 = {
        **AVRO_SCHEMA,
        "fields": [*AVRO_SCHEMA["fields"], {"name": "country", "type": "string", "default": ""}],
    }
    v2_id = register(schema_registry, f"{topic}-value", v2)
    assert v2_id != schema_id
    good = [
        wire(v2_id, avro_bytes({**r, "country": "NL"}, v2)) if i % 3 == 0 else wire(schema_id, avro_bytes(r))
        for i, r in enumerate(rows(HISTORY_ROWS, STREAM_ROWS, seed=4))
    ]
    bad = [
        (b"{" + good[0][1:], "magic byte is 0x7b, expected 0x00"),
        (b"\x00\x00\x01", "3 byte(s), expected at least 5"),
        (wire(987_654, avro_bytes(rows(0, 1, seed=5)[0])), "schema id 987654: unknown schema id"),
        (good[1][:9], "truncated Avro"),
    ]
    produce(bootstrap, topic, good[:300] + [v for v, _ in bad] + good[300:])
    registry = {"url": schema_registry.url, "ssl_cafile": schema_registry.ca_file}
    data_path = write_world(
        tmp_path, bootstrap, topic, HISTORY_ROWS, value_format="avro", avro={"registry": registry}
    )
    _check(_train(tmp_path, data_path), bad, bootstrap, topic)


def test_protobuf_with_a_descriptor_set_trains_and_dead_letters_bad_messages(
    kafka_broker: Any, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, bootstrap = new_topic("protobuf"), kafka_broker.bootstrap_servers
    descriptors = descriptor_set(tmp_path / "events.desc")
    cls = proto_class(descriptors)
    good = [proto_bytes(cls, r) for r in rows(HISTORY_ROWS, STREAM_ROWS, seed=6)]
    label_less = proto_bytes(cls, {**rows(90_000, 1, seed=7)[0], "clicked": None})
    bad = [
        (b"\xff\xff\xff", "not a valid protobuf acme.events.Click"),
        (label_less, "missing label: field 'clicked' is null"),
    ]
    produce(bootstrap, topic, good[:700] + [v for v, _ in bad] + good[700:])
    data_path = write_world(
        tmp_path,
        bootstrap,
        topic,
        HISTORY_ROWS,
        value_format="protobuf",
        protobuf={"descriptor_file": str(descriptors), "message": MESSAGE},
    )
    _check(_train(tmp_path, data_path), bad, bootstrap, topic)


def test_a_bad_schema_file_stops_the_stream_before_it_reads(tmp_path: Path) -> None:
    source = kafka_source(
        "127.0.0.1:9", "t", value_format="avro", avro={"schema_file": str(tmp_path / "x.avsc")}
    )
    with pytest.raises(FormatFileError, match=r"avro\.schema_file: cannot read .*x\.avsc"):
        StreamSource(source, dead_letters=False)


def test_a_registry_that_cannot_be_reached_stops_the_stream_and_dead_letters_nothing(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic, bootstrap = new_topic("avro-down"), kafka_broker.bootstrap_servers
    produce(bootstrap, topic, [wire(1, avro_bytes(r)) for r in rows(0, 5, seed=8)])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    registry = {"url": f"http://127.0.0.1:{closed}", "timeout_s": 2}
    source = kafka_source(bootstrap, topic, value_format="avro", avro={"registry": registry})
    src = StreamSource(source, passthrough=("row_id",), bounded=True)
    try:
        with pytest.raises(
            RuntimeError, match=r"ingest failed: schema registry http://127\.0\.0\.1:\d+ cannot be"
        ):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                src.fill(100)
                src.take(src.buffered())
        assert src.malformed_seen() == 0
    finally:
        src.close()


def test_protobuf_in_the_confluent_wire_format_trains_and_dead_letters_bad_frames(
    kafka_broker: Any, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """What a Confluent ``KafkaProtobufSerializer`` writes (byte 0, the schema id, the message's
    index path, the message), read with the descriptor set as the reader's schema."""
    topic, bootstrap = new_topic("protobuf-wire"), kafka_broker.bootstrap_servers
    descriptors = descriptor_set(tmp_path / "events.desc")
    cls = proto_class(descriptors)
    # Serializers write the first message's path as one 0 byte, or in full as count 1, index 0.
    good = [
        wire(7, (b"\x00" if i % 2 else b"\x02\x00") + proto_bytes(cls, r))
        for i, r in enumerate(rows(HISTORY_ROWS, STREAM_ROWS, seed=8))
    ]
    bad = [
        (proto_bytes(cls, rows(90_000, 1, seed=9)[0]), "not in the Confluent wire format"),
        (wire(7, b"\x02\x02" + proto_bytes(cls, rows(90_001, 1, seed=9)[0])), "message index path [1]"),
        (wire(7, b"\x80"), "the message indexes are truncated"),
    ]
    produce(bootstrap, topic, good[:400] + [v for v, _ in bad] + good[400:])
    protobuf = {"descriptor_file": str(descriptors), "message": MESSAGE, "wire_format": "confluent"}
    data_path = write_world(
        tmp_path, bootstrap, topic, HISTORY_ROWS, value_format="protobuf", protobuf=protobuf
    )
    _check(_train(tmp_path, data_path), bad, bootstrap, topic)
