"""Sampled event times (``primus validate --sample``): files read from the window, a topic's newest
records from the real broker."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.csv as pacsv
from kafka import KafkaProducer

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.sampling import sample_event_times
from airflow_provider_primus.data.sources.kafka import produce
from tests.data.conftest import T0, files_source, hour_dir, spec_doc

SECONDS = int(T0.timestamp())


def csv_source(root: Path, event_time: Any, **schema: Any) -> dict[str, Any]:
    source = files_source("history", root, fmt="csv")
    source["schema"] = {**source["schema"], "event_time": event_time, **schema}
    return source


def write_csv(root: Path, hours: int, ts: Callable[[int], Any]) -> None:
    for h in range(hours):
        n = 5
        table = pa.table(
            {
                "user_id": list(range(n)),
                "item_id": list(range(n)),
                "price": [1.0] * n,
                "rating": [5] * n,
                "ts": [ts(h * 3600 + k) for k in range(n)],
            }
        )
        part = hour_dir(root, T0 + timedelta(hours=h))
        part.mkdir(parents=True, exist_ok=True)
        pacsv.write_csv(table, part / "part-0.csv")


def window(hours: int) -> dict[str, str]:
    return {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()}


def test_a_csv_sample_finds_seconds_read_as_milliseconds(tmp_path: Path) -> None:
    """CSV has no footer statistics: only reading rows shows the unit is wrong."""
    write_csv(tmp_path, 3, lambda k: SECONDS + k)
    data = load_data_spec(spec_doc([csv_source(tmp_path, "ts")], window=window(3)))
    ((source, problem),) = sample_event_times(data, 12)
    assert source == "history"
    assert "values hold implausible event times" in problem and "{column: ts, unit: s}" in problem
    declared = load_data_spec(
        spec_doc([csv_source(tmp_path, {"column": "ts", "unit": "s"})], window=window(3))
    )
    assert sample_event_times(declared, 12) == []


def test_the_sample_sees_the_column_through_its_transforms(tmp_path: Path) -> None:
    write_csv(tmp_path, 2, lambda k: None if k == 1 else SECONDS + k)  # an empty cell: null
    transforms = [{"column": "ts", "fill": 0}]
    data = load_data_spec(
        spec_doc(
            [csv_source(tmp_path, {"column": "ts", "unit": "s"}, transforms=transforms)], window=window(2)
        )
    )
    ((_, problem),) = sample_event_times(data, 10)  # the fill turns the null into 1970
    assert "1 of 10 values" in problem


def test_without_a_window_files_are_not_sampled_and_say_so(tmp_path: Path) -> None:
    data = load_data_spec(spec_doc([csv_source(tmp_path, "ts")]))
    assert sample_event_times(data, 10) == [
        ("history", "not sampled: the document has no spec.window to read")
    ]


def kafka_doc(bootstrap: str, topic: str, event_time: Any) -> dict[str, Any]:
    return spec_doc(
        [
            {
                "name": "events",
                "type": "kafka",
                "bootstrap_servers": bootstrap,
                "topic": topic,
                "event_time_field": "ts",
                "start": {"policy": "earliest"},
                "schema": {"sparse": ["user_id"], "label": {"column": "clicked"}, "event_time": event_time},
            }
        ]
    )


def test_a_topic_sample_reads_its_newest_records(kafka_broker: Any, new_topic: Callable[..., str]) -> None:
    topic = new_topic("sample", partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for k in range(30):  # the old records are milliseconds, the newest 20 per partition seconds
            ts = (SECONDS + k) * 1000 if k < 10 else SECONDS + k
            producer.send(topic, json.dumps({"user_id": k, "clicked": 1, "ts": ts}).encode(), partition=k % 2)
        producer.send(topic, b"{not json", partition=0)
        producer.flush()
    finally:
        producer.close()
    data = load_data_spec(kafka_doc(bootstrap, topic, "ts"))
    ((source, problem),) = sample_event_times(data, 10)
    assert source == "events" and "9 of 9 values" in problem  # the newest 5 per partition, one not JSON
    assert "{column: ts, unit: s}" in problem
    assert (
        sample_event_times(load_data_spec(kafka_doc(bootstrap, topic, {"column": "ts", "unit": "s"})), 10)
        == []
    )


def test_an_absent_topic_is_a_problem_not_a_pass(kafka_broker: Any) -> None:
    data = load_data_spec(kafka_doc(kafka_broker.bootstrap_servers, "no-such-topic-here", "ts"))
    ((source, problem),) = sample_event_times(data, 10, timeout_s=5)
    assert source == "events" and "could not sample topic 'no-such-topic-here'" in problem


def test_an_avro_topic_is_sampled_through_its_schema(
    kafka_broker: Any, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic("sample-avro")
    bootstrap = kafka_broker.bootstrap_servers
    schema = {
        "type": "record",
        "name": "E",
        "fields": [{"name": n, "type": "long"} for n in ("user_id", "clicked", "ts")],
    }
    schema_file = tmp_path / "e.avsc"
    schema_file.write_text(json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    values = [b"\xff"]  # undecodable: skipped, as a malformed JSON message is
    for k in range(5):  # epoch seconds, read as the default milliseconds: implausible
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, {"user_id": k, "clicked": 1, "ts": SECONDS + k})
        values.append(buffer.getvalue())
    produce(bootstrap, topic, values)
    doc = kafka_doc(bootstrap, topic, "ts")
    doc["spec"]["sources"][0].update(value_format="avro", avro={"schema_file": str(schema_file)})
    ((source, problem),) = sample_event_times(load_data_spec(doc), 10)
    assert source == "events" and "5 of 5 values" in problem
