"""Avro and Protobuf settings: every wrong field is refused with a message naming it (the contract,
then the files at ``primus validate``), and the registry client's failures say what went wrong
without a secret. The registry answers here are the session's real Apicurio Registry."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from airflow_provider_primus.cli import validate
from airflow_provider_primus.contracts import SpecError, load_data_spec
from airflow_provider_primus.contracts.formats import ProtobufFormat, SchemaRegistry
from airflow_provider_primus.data.formats import (
    FormatFileError,
    RegistryUnavailableError,
    UndecodableValue,
    format_issues,
)
from airflow_provider_primus.data.formats.protobuf import ProtobufDecoder, index_path
from airflow_provider_primus.data.formats.registry import RegistryClient, UnknownSchemaId
from airflow_provider_primus.embedded.registry import RegistryState
from tests.training.conftest import kafka_source
from tests.training.stream.formats_world import AVRO_SCHEMA, MESSAGE, descriptor_set, register, write_world

BOOT = "127.0.0.1:9092"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"value_format": "avro"}, "avro: required with value_format 'avro'"),
        ({"avro": {"schema_file": "x.avsc"}}, "avro: only allowed with value_format 'avro'"),
        ({"value_format": "protobuf"}, "protobuf: required with value_format 'protobuf'"),
        ({"value_format": "avro", "avro": {}}, "give exactly one of schema_file"),
        (
            {"value_format": "avro", "avro": {"schema_file": "a", "registry": {"url": "http://r:1"}}},
            "give exactly one of schema_file",
        ),
        (
            {"value_format": "avro", "avro": {"registry": {"url": "r:8081"}}},
            "must be an http:// or https:// URL",
        ),
        (
            {"value_format": "avro", "avro": {"registry": {"url": "https://svc:hunter2@r:8081"}}},
            "must not carry credentials",
        ),
        (
            {"value_format": "avro", "avro": {"registry": {"url": "https://r", "username": "u"}}},
            "password_env: basic auth needs both username and password_env",
        ),
        (
            {"value_format": "avro", "avro": {"registry": {"url": "http://r", "ssl_cafile": "ca.pem"}}},
            "ssl_cafile: only allowed with an https:// url",
        ),
        (
            {"value_format": "protobuf", "protobuf": {"descriptor_file": "d", "message": "acme..Click"}},
            "must be a fully qualified message name",
        ),
        (
            {
                "value_format": "protobuf",
                "protobuf": {"descriptor_file": "d", "message": "a.B", "wire_format": "registry"},
            },
            "protobuf.wire_format",
        ),
        ({"value_format": "xml"}, "value_format"),
    ],
)
def test_the_contract_refuses_bad_format_settings(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        kafka_source(BOOT, "t", **fields)


def test_a_password_in_the_registry_url_is_refused_without_being_echoed(tmp_path: Path) -> None:
    registry = {"url": "https://svc:hunter2@r:8081"}
    path = write_world(tmp_path, BOOT, "t", 10, value_format="avro", avro={"registry": registry})
    with pytest.raises(SpecError) as raised:
        load_data_spec(path)
    [issue] = raised.value.issues
    assert issue.path == "spec.sources[1].avro.registry.url" and "must not carry credentials" in issue.message
    assert "hunter2" not in str(raised.value)


def _avro(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    schema = tmp_path / "s.avsc"
    schema.write_text(text)
    return format_issues(kafka_source(BOOT, "t", value_format="avro", avro={"schema_file": str(schema)}))


def test_bad_schema_and_descriptor_files_are_refused_naming_the_field(tmp_path: Path) -> None:
    assert _avro(tmp_path, json.dumps(AVRO_SCHEMA)) == []
    [(field, message)] = _avro(tmp_path, "{not json")
    assert field == "avro.schema_file" and message.startswith("not JSON")
    assert (
        "not a valid Avro schema"
        in _avro(tmp_path, '{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}')[0][1]
    )
    assert "must be a record" in _avro(tmp_path, '"string"')[0][1]
    missing = kafka_source(BOOT, "t", value_format="avro", avro={"schema_file": str(tmp_path / "none.avsc")})
    assert format_issues(missing)[0][0] == "avro.schema_file"
    assert "cannot read" in format_issues(missing)[0][1]

    descriptors = descriptor_set(tmp_path / "ok.desc")

    def proto(path: Path, message: str = MESSAGE) -> list[tuple[str, str]]:
        fmt = {"descriptor_file": str(path), "message": message}
        return format_issues(kafka_source(BOOT, "t", value_format="protobuf", protobuf=fmt))

    assert proto(descriptors) == []
    [(field, message)] = proto(descriptors, "acme.events.View")
    assert field == "protobuf.message" and "no message 'acme.events.View'" in message and MESSAGE in message
    garbage = tmp_path / "bad.desc"
    garbage.write_bytes(b"\xff\xfe not a descriptor set")
    assert proto(garbage)[0][0] == "protobuf.descriptor_file"
    assert "is not a compiled FileDescriptorSet" in proto(garbage)[0][1]
    assert "cannot read" in proto(tmp_path / "none.desc")[0][1]


def test_primus_validate_reports_a_bad_schema_file_under_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_world(
        tmp_path, BOOT, "t", 10, value_format="avro", avro={"schema_file": str(tmp_path / "gone.avsc")}
    )
    code = validate.run(argparse.Namespace(files=[path], json=True, sample=None))
    assert code == validate.INVALID
    [issue] = json.loads(capsys.readouterr().out)["issues"]
    assert issue["path"] == "spec.sources[1].avro.schema_file" and "cannot read" in issue["message"]


def test_the_registry_password_comes_from_its_variable_and_is_never_shown() -> None:
    settings = SchemaRegistry(url="https://r.example:8081", username="svc", password_env="REG_PW")
    with pytest.raises(FormatFileError, match=r"avro\.registry\.password_env: .* \$REG_PW, which is not set"):
        RegistryClient(settings, environ={})
    client = RegistryClient(settings, environ={"REG_PW": "s3cret-pw"})
    assert "s3cret-pw" not in settings.describe() and "s3cret-pw" not in repr(settings.model_dump())
    assert client._headers["Authorization"].startswith("Basic ")


def test_registry_lookups_are_cached_per_id_and_failures_say_why(
    schema_registry: RegistryState, tmp_path: Path
) -> None:
    schema_id = register(schema_registry, "cache-test-value")
    client = RegistryClient(SchemaRegistry(url=schema_registry.url, ssl_cafile=schema_registry.ca_file))
    assert json.loads(client.schema_text(schema_id))["name"] == "Click"
    assert client.schema_text(schema_id) and client.requests == 1
    for _ in range(3):
        with pytest.raises(UnknownSchemaId, match="unknown schema id"):
            client.schema_text(424_242)
    assert client.requests == 2  # an unknown id is asked once too

    # The server's certificate is not signed by a CA the system trusts: refused, not dead-lettered.
    untrusted = RegistryClient(SchemaRegistry(url=schema_registry.url))
    with pytest.raises(RegistryUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusted.schema_text(schema_id)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    down = RegistryClient(SchemaRegistry(url=f"http://127.0.0.1:{closed}", timeout_s=2))
    with pytest.raises(RegistryUnavailableError, match="cannot be reached"):
        down.schema_text(1)
    missing_ca = SchemaRegistry(url=schema_registry.url, ssl_cafile=str(tmp_path / "no-ca.pem"))
    with pytest.raises(FormatFileError, match=r"avro\.registry\.ssl_cafile: .* is not a readable file"):
        RegistryClient(missing_ca)


def test_a_confluent_frame_names_a_nested_message_by_its_index_path(tmp_path: Path) -> None:
    """``acme.events.Session.Click`` is at [1, 0] (second top-level message, its first nested one):
    a frame naming that path decodes, the top-level ``Click``'s path [0] is refused by name."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="acme/nested.proto", package="acme.events", syntax="proto3"
    )
    proto.message_type.add(name="Click").field.add(
        name="row_id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    )
    session = proto.message_type.add(name="Session")
    session.nested_type.add(name="Click").field.add(
        name="item_id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    )
    path = tmp_path / "nested.desc"
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[proto]).SerializeToString())
    settings = ProtobufFormat(
        descriptor_file=str(path), message="acme.events.Session.Click", wire_format="confluent"
    )
    decoder = ProtobufDecoder(settings)
    assert index_path(decoder.descriptor) == (1, 0)
    payload = b"\x08\x2a"  # field 1 = 42
    assert decoder.decode(b"\x00\x00\x00\x00\x01" + b"\x04\x02\x00" + payload) == {"item_id": 42}
    with pytest.raises(
        UndecodableValue, match=r"names message index path \[0\], not acme.events.Session.Click's \[1, 0\]"
    ):
        decoder.decode(b"\x00\x00\x00\x00\x01\x00" + payload)
