"""Test helpers for Avro and Protobuf streams: the test worlds' events as Avro records (a schema
file or the Confluent wire format through the session's registry) or Protobuf messages (a
descriptor set built with protobuf's own descriptor classes, as protoc would write it)."""

from __future__ import annotations

import io
import json
import ssl
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import yaml
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from airflow_provider_primus.embedded.registry import RegistryState
from tests.training.conftest import SCHEMA, T0, events, history_source

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "acme.events",
    "fields": [
        {"name": "row_id", "type": "long"},
        {"name": "user_id", "type": "long"},
        {"name": "item_id", "type": "long"},
        {"name": "price", "type": "double"},
        {"name": "clicked", "type": ["null", "long"], "default": None},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
MESSAGE = "acme.events.Click"


def rows(first_id: int, count: int, seed: int) -> list[dict[str, Any]]:
    """The test worlds' events with the event time in epoch milliseconds."""
    out = events(first_id, count, T0 + timedelta(hours=1), seed).to_pylist()
    for row in out:
        row["ts"] = int(row["ts"].timestamp() * 1000)
    return out


def avro_bytes(row: dict[str, Any], schema: dict[str, Any] = AVRO_SCHEMA) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), row)
    return buffer.getvalue()


def wire(schema_id: int, payload: bytes) -> bytes:
    """The Confluent wire format: magic byte 0, the schema id (4 bytes, big-endian), the payload."""
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def register(registry: RegistryState, subject: str, schema: dict[str, Any] = AVRO_SCHEMA) -> int:
    """Register ``schema`` under ``subject`` through the Confluent API; its id."""
    request = urllib.request.Request(
        f"{registry.url}/subjects/{subject}/versions",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=registry.ca_file)
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        return int(json.loads(resp.read())["id"])


def descriptor_set(path: Path) -> Path:
    """A FileDescriptorSet holding ``acme.events.Click`` (proto3, ``optional`` label for presence)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="acme/events.proto", package="acme.events", syntax="proto3"
    )
    message = proto.message_type.add(name="Click")
    f = descriptor_pb2.FieldDescriptorProto
    for number, (name, typ) in enumerate(
        [
            ("row_id", f.TYPE_INT64),
            ("user_id", f.TYPE_INT64),
            ("item_id", f.TYPE_INT64),
            ("price", f.TYPE_DOUBLE),
            ("ts", f.TYPE_INT64),
        ],
        start=1,
    ):
        message.field.add(name=name, number=number, type=typ, label=f.LABEL_OPTIONAL)
    # ``optional int64 clicked``: proto3 presence is a synthetic oneof.
    message.oneof_decl.add(name="_clicked")
    message.field.add(
        name="clicked",
        number=6,
        type=f.TYPE_INT64,
        label=f.LABEL_OPTIONAL,
        oneof_index=0,
        proto3_optional=True,
    )
    files = descriptor_pb2.FileDescriptorSet(file=[proto])
    path.write_bytes(files.SerializeToString())
    return path


def proto_class(path: Path) -> Any:
    files = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(MESSAGE))


def proto_bytes(cls: Any, row: dict[str, Any]) -> bytes:
    return bytes(cls(**{k: v for k, v in row.items() if v is not None}).SerializeToString())


def write_world(root: Path, bootstrap: str, topic: str, history_rows: int, **fmt: Any) -> Path:
    """One hour of Parquet history beside the topic, read in ``fmt``'s value format; the data
    document's path."""
    part = root / "store" / T0.strftime("%Y-%m-%d") / T0.strftime("%H")
    part.mkdir(parents=True)
    pq.write_table(events(0, history_rows, T0, seed=1), part / "part-0.parquet", row_group_size=1000)
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "formats"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()},
            "planning": {"target_rows_per_task": 1000, "min_rows_per_task": 500},
            "sources": [
                history_source(root),
                {
                    "name": "events",
                    "type": "kafka",
                    "bootstrap_servers": bootstrap,
                    "topic": topic,
                    "event_time_field": "ts",
                    "start": {"policy": "earliest"},
                    "group_id": f"{topic}-trainer",
                    **fmt,
                    "schema": SCHEMA,
                },
            ],
            "mixture": [
                {"source": "history", "weight": 0.6, "priority": 0},
                {"source": "events", "weight": 0.4, "priority": 1},
            ],
        },
    }
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def training_doc(root: Path) -> Path:
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {"mode": "mixed", "batch_size": 256, "publish": {"every_s": 0}},
    }
    path = root / "training.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
