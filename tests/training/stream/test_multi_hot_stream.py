"""JSON arrays in stream events as a multi-hot column, on the real broker: each trained event's IDs
are the transformer's (nulls dropped, capped, hashed) on both decode paths, and an array of the
wrong kind is dead-lettered with its reason, never coerced."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_primus.data.transforms import hash_ids
from airflow_provider_primus.training.stream.source import StreamSource
from tests.training.conftest import T0, events, kafka_source, produce, to_json
from tests.training.stream.test_source import dead_letters

MULTI_HOT = {
    "multi_hot": [{"column": "recent", "pooling": "mean", "max_length": 3}],
    "transforms": [
        {"column": "user_id", "hash_bucket": 1009},
        {"column": "item_id", "hash_bucket": 503},
        {"column": "recent", "hash_bucket": 100},
    ],
}


def with_lists(first_id: int, rows: int, seed: int) -> tuple[list[bytes], dict[int, list[int]]]:
    """Events whose ``recent`` is absent, null, empty, short, long or holds nulls; and each row's
    expected IDs."""
    messages, expected = [], {}
    for i, value in enumerate(to_json(events(first_id, rows, T0 + timedelta(hours=4), seed))):
        row = json.loads(value)
        shape = i % 5
        if shape == 0:
            pass  # absent: an empty list
        elif shape == 1:
            row["recent"] = None
        elif shape == 2:
            row["recent"] = []
        elif shape == 3:
            row["recent"] = [row["row_id"], None, row["row_id"] + 1]
        else:
            row["recent"] = [row["row_id"] + k for k in range(6)]
        kept = [v for v in row.get("recent") or [] if v is not None][:3]
        expected[row["row_id"]] = hash_ids(pa.array(kept, pa.int64()), 100).to_pylist()
        messages.append(json.dumps(row).encode())
    return messages, expected


def drain(src: StreamSource, until: Callable[[dict[int, list[int]]], bool]) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    while not until(got):
        assert time.monotonic() < deadline, f"stream stalled after {len(got)} rows"
        src.fill(1000, timeout_s=1.0)
        for batch in src.take(1000):
            bag = batch.bags["recent"]
            ends = [*bag.offsets.tolist()[1:], bag.ids.shape[0]]
            for row_id, start, end in zip(
                batch.extra["row_id"].tolist(), bag.offsets.tolist(), ends, strict=True
            ):
                got[int(row_id)] = bag.ids[start:end].tolist()
    return got


def test_json_arrays_are_trained_as_lists_and_wrong_arrays_dead_lettered(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("lists")
    bootstrap = kafka_broker.bootstrap_servers
    good, expected = with_lists(0, 100, seed=1)
    base = json.loads(good[4])
    bad = [
        ({**base, "row_id": 900, "recent": "abc"}, "wrong type: field 'recent' is a string ('abc')"),
        ({**base, "row_id": 901, "recent": [1, 2.5]}, "field 'recent' holds a number (2.5)"),
        ({**base, "row_id": 902, "recent": [{"id": 1}]}, "field 'recent' holds an object"),
        ({**base, "row_id": 903, "recent": 7}, "wrong type: field 'recent' is an integer"),
    ]
    bad_messages = [json.dumps(e).encode() for e, _ in bad]
    # A clean block first (the fast path), then the bad events among good ones (the slow path).
    produce(bootstrap, topic, good[:50])
    src = StreamSource(kafka_source(bootstrap, topic, schema=MULTI_HOT), passthrough=("row_id",))
    try:
        got = drain(src, lambda rows: len(rows) >= 50)
        mixed: list[bytes] = []
        for i, message in enumerate(bad_messages):
            mixed += [message, *good[50 + 10 * i : 60 + 10 * i]]
        mixed += good[90:]
        produce(bootstrap, topic, mixed)
        got.update(drain(src, lambda rows: len(rows) >= 50 and src.malformed_seen() >= len(bad)))
        src.flush()
    finally:
        src.close()
    assert got == expected
    letters = dead_letters(bootstrap, f"{topic}.dlq", expected=len(bad))
    by_value = {m.value: dict(m.headers)["primus.error"].decode() for m in letters}
    for message, (_, reason) in zip(bad_messages, bad, strict=True):
        assert reason in by_value[message], by_value[message]


def test_avro_arrays_are_lists_too(kafka_broker: Any, new_topic: Callable[..., str], tmp_path: Path) -> None:
    from tests.training.stream.formats_world import AVRO_SCHEMA, avro_bytes, rows

    topic = new_topic("avro-lists")
    bootstrap = kafka_broker.bootstrap_servers
    schema = {
        **AVRO_SCHEMA,
        "fields": [*AVRO_SCHEMA["fields"], {"name": "recent", "type": {"type": "array", "items": "long"}}],
    }
    schema_file = tmp_path / "click.avsc"
    schema_file.write_text(json.dumps(schema))
    events_, expected = [], {}
    for i, row in enumerate(rows(0, 40, seed=3)):
        recent = [row["row_id"] + k for k in range(i % 6)]
        events_.append(avro_bytes({**row, "recent": recent}, schema))
        expected[row["row_id"]] = hash_ids(pa.array(recent[:3], pa.int64()), 100).to_pylist()
    produce(bootstrap, topic, events_)
    source = kafka_source(
        bootstrap, topic, schema=MULTI_HOT, value_format="avro", avro={"schema_file": str(schema_file)}
    )
    src = StreamSource(source, passthrough=("row_id",))
    try:
        assert drain(src, lambda got: len(got) >= 40) == expected
    finally:
        src.close()
