"""The stream source on the real broker: no invented labels, no coerced types.

Every malformed message (a missing, null or NaN label, a label or ID of the wrong type, not JSON, a
missing event time, ...) is on the dead-letter topic with its reason, and none of them comes out of
``StreamSource.take``: only the good events are trained, each once. Both decode paths are covered:
a block that mixes good and bad events (the per-message path) and a block that reads cleanly as JSON
but changes a column's type (the fast path must not accept it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kafka import KafkaConsumer

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.training.stream.source import StreamSource, dead_letter_topic
from tests.training.conftest import T0, events, kafka_source, produce, to_json

BAD_ID = 100_000  # row ids of malformed events: none of them may be trained


class _Drop:
    """Marks a field to delete from an event."""


_DROP = _Drop()


def source(bootstrap: str, topic: str, **schema: Any) -> KafkaSource:
    return kafka_source(bootstrap, topic, schema=schema)


def good_events(first_id: int, rows: int, seed: int) -> list[bytes]:
    return to_json(events(first_id, rows, T0 + timedelta(hours=4), seed))


def malformed() -> list[tuple[bytes, str]]:
    """40 bad messages, each with a fragment its dead-letter reason must contain."""
    base = json.loads(good_events(0, 1, seed=99)[0])
    out: list[tuple[bytes, str]] = []
    n = 0

    def bad(reason: str, **change: Any) -> None:
        nonlocal n
        row = {**base, "row_id": BAD_ID + n}
        n += 1
        for key, value in change.items():
            if value is _DROP:
                del row[key]
            else:
                row[key] = value
        out.append((json.dumps(row).encode(), reason))

    for _ in range(5):
        bad("missing label: field 'clicked' is absent", clicked=_DROP)
    for _ in range(5):
        bad("missing label: field 'clicked' is null", clicked=None)
    for _ in range(2):
        bad("missing label: field 'clicked' is NaN", clicked=float("nan"))  # json.dumps writes NaN
    for value in ("1", "0", "yes", ""):
        bad("wrong type: field 'clicked' is a string", clicked=value)
    for value in ("abc", "u-17", "42", "7"):  # "42" is not 42: it would hash into another bucket
        bad("wrong type: field 'user_id' is a string", user_id=value)
    for _ in range(2):
        bad("wrong type: field 'user_id' is a number", user_id=1.5)
    bad("wrong type: field 'item_id' is an object", item_id={"id": 3})
    bad("wrong type: field 'user_id' is a boolean", user_id=True)
    for _ in range(2):
        bad("wrong type: field 'price' is a string", price="cheap")
    bad("wrong type: field 'clicked' is an array", clicked=[1])
    for _ in range(3):
        bad("missing required field(s): ts", ts=_DROP)
    for _ in range(2):
        bad("missing required field(s): user_id", user_id=None)
    bad(
        "missing label: field 'clicked' is absent; missing required field(s): item_id",
        clicked=_DROP,
        item_id=_DROP,
    )
    bad("values do not fit the schema", ts="not a time")
    # Not events at all.
    out += [
        (b"{not json", "not valid JSON"),
        (good_events(0, 1, seed=98)[0][:25], "not valid JSON"),  # a truncated write
        (b"", "not valid JSON"),
        (b"[1, 2, 3]", "expected a JSON object"),
        (b"null", "expected a JSON object"),
        (b'"clicked"', "expected a JSON object"),
    ]
    return out


def dead_letters(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Every message on the dead-letter topic: the expected count, then a quiet spell with no more."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    try:
        letters = list(consumer)
    finally:
        consumer.close()
    assert len(letters) == expected, [dict(m.headers)["primus.error"] for m in letters]
    return sorted(letters, key=lambda m: int(dict(m.headers)["primus.offset"]))


def drain(src: StreamSource, until: Callable[[list[int]], bool], timeout_s: float = 60.0) -> list[int]:
    """Row ids of everything the source serves until ``until`` holds for them."""
    trained: list[int] = []
    deadline = time.monotonic() + timeout_s
    while not until(trained):
        assert time.monotonic() < deadline, f"stream stalled after {len(trained)} rows"
        src.fill(1000, timeout_s=1.0)
        for batch in src.take(1000):
            trained += [int(x) for x in batch.extra["row_id"]]
    return trained


def test_malformed_messages_are_dead_lettered_and_never_trained(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("screen")
    bootstrap = kafka_broker.bootstrap_servers
    good = good_events(0, 120, seed=1)
    bad = malformed()
    assert len(bad) == 40
    # Good events first (the stream learns that its IDs are integers), then the bad ones spread
    # between good ones: every fetched block mixes them.
    messages = good[:40]
    for i, (value, _) in enumerate(bad):
        messages += [value, good[40 + 2 * i], good[41 + 2 * i]]
    produce(bootstrap, topic, messages)

    src = StreamSource(source(bootstrap, topic), passthrough=("row_id",), bounded=True)
    try:
        trained = drain(src, lambda _: src.exhausted())
        src.flush()
        assert src.malformed_seen() == 40
        assert src.checkpoint_state()["dead_lettered"] == 40
    finally:
        src.close()

    assert Counter(trained) == Counter(range(120))  # every good event once, nothing else
    assert not [r for r in trained if r >= BAD_ID]
    letters = dead_letters(bootstrap, f"{topic}.dlq", expected=40)
    by_value = {m.value: m for m in letters}
    assert len(by_value) == 40  # each malformed message once
    for value, reason in bad:
        letter = by_value[value]
        headers = dict(letter.headers)
        assert reason in headers["primus.error"].decode(), (value, headers["primus.error"])
        assert headers["primus.topic"].decode() == topic and headers["primus.source"] == b"events"
    offsets = [int(dict(m.headers)["primus.offset"]) for m in letters]
    assert offsets == sorted(messages.index(v) for v, _ in bad)


def test_a_block_that_changes_a_column_type_is_not_coerced(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """A whole block of well-formed JSON whose IDs turned into strings, or whose labels are NaN, parses
    cleanly in the fast path: the source must still dead-letter each event, not train it."""
    topic = new_topic("screen-fast")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, good_events(0, 50, seed=2))
    src = StreamSource(source(bootstrap, topic), passthrough=("row_id",))
    try:
        first = drain(src, lambda rows: len(rows) >= 50)
        assert sorted(first) == list(range(50))  # a clean block: the stream's IDs are integers

        as_strings = []
        for row in map(json.loads, good_events(1000, 10, seed=3)):
            row["user_id"] = str(row["user_id"])
            as_strings.append(json.dumps(row).encode())
        nan_labels = []
        for row in map(json.loads, good_events(2000, 5, seed=4)):
            row["clicked"] = float("nan")
            nan_labels.append(json.dumps(row).encode())
        produce(bootstrap, topic, as_strings)
        trained = drain(src, lambda _: src.malformed_seen() >= 10)
        produce(bootstrap, topic, nan_labels)
        trained += drain(src, lambda _: src.malformed_seen() >= 15)
        produce(bootstrap, topic, good_events(3000, 5, seed=5))
        trained += drain(src, lambda rows: 3004 in rows)
        src.flush()
        assert src.malformed_seen() == 15
    finally:
        src.close()
    assert sorted(trained) == list(range(3000, 3005))
    letters = dead_letters(bootstrap, dead_letter_topic(source(bootstrap, topic)), expected=15)
    reasons = [dict(m.headers)["primus.error"].decode() for m in letters]
    assert all("wrong type: field 'user_id' is a string" in r for r in reasons[:10]), reasons
    assert all("this stream's 'user_id' values are integers" in r for r in reasons[:10]), reasons
    assert all("missing label: field 'clicked' is NaN" in r for r in reasons[10:]), reasons
