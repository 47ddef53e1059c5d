"""A python transform in the stream decoder, on the real broker: run once per block on the happy
path, the same features the files path computes, only the messages it raises on dead-lettered (with
its error), and an output that breaks the schema stopping the stream by name."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.tensors import to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer
from airflow_provider_primus.training.stream.source import StreamSource, dead_letter_topic
from tests.data import transform_functions
from tests.training.conftest import SCHEMA, T0, events, kafka_source, produce, to_json
from tests.training.stream.test_source import dead_letters

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "two_tower" / "src"
FUNCTION = "two_tower.features:time_and_price"
FEATURES: dict[str, Any] = {
    "sparse": ["user_id", "item_id", "hour_of_day"],
    "dense": ["log_price"],
    "label": {"column": "clicked"},
    "event_time": "ts",
    "transforms": [
        {
            "type": "python",
            "function": FUNCTION,
            "inputs": ["price"],
            "outputs": ["hour_of_day", "log_price"],
        },
        *SCHEMA["transforms"],
        {"column": "hour_of_day", "hash_bucket": 24},
    ],
}


@pytest.fixture(autouse=True)
def _example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def take_rows(
    src: StreamSource, until: Callable[[dict[int, Any]], bool], timeout_s: float = 60.0
) -> dict[int, Any]:
    """row id → (sparse IDs, dense values) of everything served until ``until`` holds."""
    rows: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    while not until(rows):
        assert time.monotonic() < deadline, f"stream stalled after {len(rows)} rows"
        src.fill(1000, timeout_s=1.0)
        for batch in src.take(1000):
            for i, row_id in enumerate(batch.extra["row_id"]):
                rows[int(row_id)] = (batch.sparse[i].tolist(), batch.dense[i].tolist())
    return rows


def test_only_the_messages_the_function_raises_on_are_dead_lettered_and_the_rest_match_the_files_path(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("python-transform")
    bootstrap = kafka_broker.bootstrap_servers
    table = events(0, 300, T0, seed=11)
    messages = to_json(table)
    poisoned = [7, 150, 151, 299]  # a negative price: the function refuses any batch holding one
    for i in poisoned:
        event = json.loads(messages[i])
        event["price"] = -1.0
        messages[i] = json.dumps(event).encode()
    produce(bootstrap, topic, messages)
    source = kafka_source(bootstrap, topic, schema=FEATURES)
    src = StreamSource(source, passthrough=("row_id",), bounded=True)
    try:
        served = take_rows(src, lambda _: src.exhausted())
        src.flush()
        assert src.malformed_seen() == len(poisoned)
    finally:
        src.close()
    assert sorted(served) == [i for i in range(300) if i not in poisoned]
    letters = dead_letters(bootstrap, dead_letter_topic(source), expected=len(poisoned))
    assert [int(dict(m.headers)["primus.offset"]) for m in letters] == poisoned
    for letter in letters:
        reason = dict(letter.headers)["primus.error"].decode()
        assert reason.startswith(
            f"<stream>: transform {FUNCTION} raised ValueError: 1 negative price(s): log_price needs "
            "price >= 0 (at two_tower/features.py:"
        ), reason
    # The files path (a data executor's BatchTransformer on the same rows as Parquet gives them,
    # timestamps typed) computes the very same IDs and values.
    files = BatchTransformer(SourceSchema.model_validate(FEATURES), passthrough=["row_id"])
    good = table.filter(np.isin(np.arange(300), poisoned, invert=True))
    tensors = to_tensors(
        files(good.combine_chunks().to_batches()[0]),
        sparse=FEATURES["sparse"],
        dense=FEATURES["dense"],
        extra=["row_id"],
    )
    expected = {
        int(r): (tensors.sparse[i].tolist(), tensors.dense[i].tolist())
        for i, r in enumerate(tensors.extra["row_id"])
    }
    assert served == expected


def test_on_the_happy_path_the_function_runs_once_per_block_not_per_message(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("python-transform-bulk")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, to_json(events(0, 2000, T0, seed=12)))
    step = {"type": "python", "function": "tests.data.transform_functions:counted"}
    source = kafka_source(bootstrap, topic, schema={"transforms": [step, *SCHEMA["transforms"]]})
    transform_functions.BATCH_SIZES.clear()
    src = StreamSource(source, passthrough=("row_id",), bounded=True)
    try:
        served = take_rows(src, lambda _: src.exhausted())
    finally:
        src.close()
    assert sorted(served) == list(range(2000))
    assert sum(transform_functions.BATCH_SIZES) == 2000
    assert len(transform_functions.BATCH_SIZES) < 20, transform_functions.BATCH_SIZES


def test_an_output_that_breaks_the_schema_stops_the_stream_naming_function_and_column(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("python-transform-broken")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, to_json(events(0, 50, T0, seed=13)))
    function = "tests.data.transform_functions:drops_the_dense_column"
    step = {"type": "python", "function": function}
    source = kafka_source(
        bootstrap, topic, schema={"dense": ["p"], "transforms": [step], "sparse": ["user_id"]}
    )
    src = StreamSource(source, passthrough=("row_id",), bounded=True)
    try:
        with pytest.raises(RuntimeError) as exc:
            take_rows(src, lambda _: src.exhausted())
    finally:
        src.close()
    assert (
        f"<stream>: transform {function}: column 'p': declared column is not in the function's output"
        in str(exc.value)
    )
