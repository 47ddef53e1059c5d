"""The stream's ingest cost in Avro beside JSON: the bench's JSON events re-encoded as Avro records
(one schema file inferred from them) on a topic of their own, then read three ways on the same
machine, back to back: our stream source (poll, decode, screen, transform, tensors), a bare
kafka-python consumer that only polls, and a bare consumer that polls and decodes each value with
fastavro and nothing else, the floor any Avro ingest pays.
"""

from __future__ import annotations

import io
import json
import statistics
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import fastavro

from airflow_provider_primus.bench.bare_consumer import bare_pass
from airflow_provider_primus.contracts.formats import AvroFormat
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.formats.avro import load_avro_schema

__all__ = ["avro_ingest", "infer_avro_schema"]

_AVRO_TYPES = {bool: "boolean", int: "long", float: "double", str: "string"}


def infer_avro_schema(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A record schema fitting JSON events of scalars: a field seen null in any of them is nullable,
    an integer field that is ever a float is a double."""
    kinds: dict[str, set[type]] = {}
    for event in events:
        for key, value in event.items():
            kinds.setdefault(key, set()).add(type(value))
    fields = []
    for key, seen in kinds.items():
        scalar = seen - {type(None)}
        if scalar == {int, float}:
            scalar = {float}
        if len(scalar) != 1 or next(iter(scalar)) not in _AVRO_TYPES:
            raise ValueError(f"field {key!r} holds {sorted(t.__name__ for t in seen)}: no one Avro type")
        avro: Any = _AVRO_TYPES[next(iter(scalar))]
        fields.append({"name": key, "type": ["null", avro] if type(None) in seen else avro})
    return {"type": "record", "name": "BenchEvent", "namespace": "primus.bench", "fields": fields}


def _copy_as_avro(source: KafkaSource, workdir: Path) -> KafkaSource:
    """The JSON topic's events re-encoded to a new topic; the source reading it as Avro."""
    from airflow_provider_primus.data.sources.kafka import produce
    from airflow_provider_primus.data.sources.kafka_client import consumer

    reader: Any = consumer(
        source, enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    reader.subscribe([source.topic])
    events = [json.loads(r.value) for r in reader]
    reader.close()
    schema = infer_avro_schema(events)
    workdir.mkdir(parents=True, exist_ok=True)
    schema_file = workdir / "bench-event.avsc"
    schema_file.write_text(json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    values = []
    for event in events:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, event)
        values.append(buffer.getvalue())
    topic = f"{source.topic}-avro-{uuid.uuid4().hex[:6]}"
    produce(source, topic, values)
    return source.model_copy(
        update={
            "topic": topic,
            "value_format": "avro",
            "avro": AvroFormat(schema_file=str(schema_file)),
            "group_id": None,
        }
    )


def _decode_only(source: KafkaSource) -> float:
    """Rows/s of a bare consumer that polls the topic and decodes every value with fastavro."""
    assert source.avro is not None and source.avro.schema_file is not None
    schema = load_avro_schema(source.avro.schema_file)
    reader = fastavro.schemaless_reader
    total, elapsed, _ = bare_pass(source, lambda value: reader(io.BytesIO(value), schema, None))
    return total / elapsed


def avro_ingest(
    source: KafkaSource, workdir: Path, ingest: Callable[[KafkaSource], dict[str, float]], repeats: int = 5
) -> dict[str, float]:
    """``ingest`` (the JSON bench's paired bare/ours measurement) on the Avro copy of ``source``'s
    topic, plus the decode-only consumer's median over ``repeats`` passes."""
    avro = _copy_as_avro(source, workdir)
    paired = ingest(avro)
    decode_only: float = statistics.median(_decode_only(avro) for _ in range(repeats))
    return {
        "avro_ingest_rows_s": paired["ours_rows_s"],
        "avro_bare_consumer_rows_s": paired["bare_rows_s"],
        "avro_decode_only_rows_s": decode_only,
        "avro_ingest_ratio": paired["ratio"],
    }
