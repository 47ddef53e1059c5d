"""Kafka message values that are not JSON: Avro (schema file or registry) and Protobuf.

``value_decoder(source)`` gives the stream one decoder per source, whose ``decode(bytes)`` returns
the event as a dict or raises ``UndecodableValue`` with the reason to dead-letter under; JSON keeps
its own bulk path in the trainer (``training/stream/decode.py``). ``format_issues(source)`` reads the
files a source names, for ``primus validate``.
"""

from __future__ import annotations

from typing import Any, Protocol

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.formats.errors import (
    FormatFileError,
    RegistryUnavailableError,
    UndecodableValue,
)

__all__ = [
    "FormatFileError",
    "RegistryUnavailableError",
    "UndecodableValue",
    "ValueDecoder",
    "format_issues",
    "value_decoder",
]


class ValueDecoder(Protocol):
    def decode(self, value: bytes) -> dict[str, Any]: ...


def value_decoder(source: KafkaSource) -> ValueDecoder | None:
    """The source's decoder; None for JSON. Raises ``FormatFileError`` for a bad file."""
    if source.value_format == "avro":
        assert source.avro is not None
        from airflow_provider_primus.data.formats.avro import AvroFileDecoder, AvroRegistryDecoder

        if source.avro.schema_file is not None:
            return AvroFileDecoder(source.avro)
        cafile = source.security.ssl_cafile if source.security is not None else None
        return AvroRegistryDecoder(source.avro, fallback_cafile=cafile)
    if source.value_format == "protobuf":
        assert source.protobuf is not None
        from airflow_provider_primus.data.formats.protobuf import ProtobufDecoder

        return ProtobufDecoder(source.protobuf)
    return None


def format_issues(source: KafkaSource) -> list[tuple[str, str]]:
    """(field, problem) for each file the source's format names that cannot be used here: a
    missing or unreadable file, a schema that is not an Avro record, a descriptor set without the
    message. The registry itself is not asked (it may be reachable from the trainers only)."""
    try:
        if source.value_format == "avro" and source.avro is not None and source.avro.schema_file is not None:
            from airflow_provider_primus.data.formats.avro import load_avro_schema

            load_avro_schema(source.avro.schema_file)
        elif source.value_format == "protobuf" and source.protobuf is not None:
            from airflow_provider_primus.data.formats.protobuf import load_message_descriptor

            load_message_descriptor(source.protobuf)
    except FormatFileError as exc:
        return [(exc.field, exc.detail)]
    return []
