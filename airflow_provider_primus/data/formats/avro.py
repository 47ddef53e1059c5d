"""Avro values: plain binary in a schema file's schema, or the Confluent wire format (byte 0, a
4-byte big-endian schema id, Avro binary in the writer's schema the registry holds under the id).

Each value is read by fastavro's compiled reader into a dict, the shape ``json.loads`` gives a JSON
event, so the stream screens and transforms both alike. A value that does not decode (a bad magic
byte, an id the registry does not know, truncated or trailing bytes) raises ``UndecodableValue``
with the reason; a registry that cannot be asked raises ``RegistryUnavailableError``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
from fastavro import schemaless_reader

from airflow_provider_primus.contracts.formats import AvroFormat
from airflow_provider_primus.data.formats.errors import FormatFileError, UndecodableValue
from airflow_provider_primus.data.formats.registry import RegistryClient, UnknownSchemaId
from airflow_provider_primus.data.formats.wire import HEADER, schema_id

__all__ = ["AvroFileDecoder", "AvroRegistryDecoder", "load_avro_schema", "parse_avro_schema"]


def parse_avro_schema(text: str, field: str) -> Any:
    """The parsed schema of ``text``, which must be a record (its fields become the event's)."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise FormatFileError(field, f"not JSON: {exc}") from None
    try:
        parsed = fastavro.parse_schema(_plain(raw))
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise FormatFileError(field, f"not a valid Avro schema: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        kind = parsed.get("type") if isinstance(parsed, dict) else type(raw).__name__
        raise FormatFileError(
            field, f"the schema must be a record (its fields are the event's), got {kind!r}"
        )
    return parsed


def _plain(schema: Any) -> Any:
    """The schema without logical types: a ``timestamp-millis`` is read as the long it is (event
    times are counted in the source's declared unit, as JSON numbers are), a ``decimal`` as bytes."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def load_avro_schema(path: str) -> Any:
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise FormatFileError("avro.schema_file", f"cannot read {path!r}: {exc.strerror or exc}") from None
    return parse_avro_schema(text, "avro.schema_file")


def _read(schema: Any, value: bytes, start: int, what: str) -> dict[str, Any]:
    buffer = io.BytesIO(value)
    buffer.seek(start)
    try:
        event = schemaless_reader(buffer, schema, None)
    except (EOFError, StopIteration) as exc:
        raise UndecodableValue(
            f"truncated Avro: the value ends inside a record of {what} ({exc or 'EOF'})"
        ) from None
    except Exception as exc:  # fastavro raises what the bytes make it (ValueError, UnicodeDecodeError...)
        raise UndecodableValue(f"not valid Avro for {what}: {type(exc).__name__}: {exc}") from None
    left = len(value) - buffer.tell()
    if left:
        raise UndecodableValue(f"not valid Avro for {what}: {left} byte(s) left after the record")
    if not isinstance(event, dict):
        raise UndecodableValue(f"not an Avro record for {what}")
    return event


class AvroFileDecoder:
    """Plain Avro binary in one schema (``avro.schema_file``)."""

    def __init__(self, settings: AvroFormat) -> None:
        assert settings.schema_file is not None
        self.schema = load_avro_schema(settings.schema_file)
        self._what = f"schema {self.schema.get('name')!r}"

    def decode(self, value: bytes) -> dict[str, Any]:
        return _read(self.schema, value, 0, self._what)


class AvroRegistryDecoder:
    """The Confluent wire format, writer's schemas from the registry (cached per id)."""

    def __init__(self, settings: AvroFormat, *, fallback_cafile: str | None = None) -> None:
        assert settings.registry is not None
        self.client = RegistryClient(settings.registry, fallback_cafile=fallback_cafile)
        self._schemas: dict[int, Any] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        writer = schema_id(value)
        schema = self._schemas.get(writer)
        if schema is None:
            try:
                text = self.client.schema_text(writer)
            except UnknownSchemaId as exc:
                raise UndecodableValue(f"schema id {writer}: {exc}") from None
            try:
                schema = parse_avro_schema(text, f"schema id {writer}")
            except FormatFileError as exc:
                raise UndecodableValue(str(exc)) from None
            self._schemas[writer] = schema
        return _read(schema, value, HEADER, f"schema id {writer}")
