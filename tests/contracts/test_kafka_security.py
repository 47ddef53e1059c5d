"""A Kafka source's client settings: strict, with errors that say what to change; secrets only named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka_client import (
    KafkaClientError,
    client_config,
    security_from_client_config,
)

SCHEMA = {"sparse": ["u"], "label": {"column": "y"}}


def source(**fields: Any) -> KafkaSource:
    doc = {
        "name": "events",
        "type": "kafka",
        "bootstrap_servers": "broker:9093",
        "topic": "clicks",
        "event_time_field": "ts",
        "start": {"policy": "earliest"},
        "schema": SCHEMA,
        **fields,
    }
    return KafkaSource.model_validate({k: v for k, v in doc.items() if v is not None})


SASL = {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "u", "password_env": "PW"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"security": {"protocol": "SASL_SSL"}}, "sasl_mechanism: required with protocol SASL_SSL"),
        ({"security": {**SASL, "password_env": None}}, "password_env: required with protocol SASL_SSL"),
        ({"security": {"protocol": "SSL", "username": "u"}}, "username: only allowed with a SASL protocol"),
        ({"security": {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}}, "sasl_mechanism"),
        ({"security": {"protocol": "PLAINTEXT", "ssl_cafile": "/ca.pem"}}, "ssl_cafile: only allowed with"),
        (
            {"security": {"protocol": "SSL", "ssl_certfile": "/c.pem"}},
            "needs both ssl_certfile and ssl_keyfile",
        ),
        ({"security": {**SASL, "password_env": "not a name"}}, "environment variable name"),
        ({"security": {"protocol": "TLS"}}, "protocol"),
        ({"connection": "kafka_default", "security": SASL}, "not allowed with 'connection'"),
        ({"bootstrap_servers": None}, "bootstrap_servers: required (unless 'connection'"),
    ],
)
def test_bad_client_settings_say_what_to_change(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        source(**fields)


def test_a_connection_may_give_the_servers() -> None:
    assert source(bootstrap_servers=None, connection="kafka_default").bootstrap_servers is None


def test_client_settings_read_the_password_and_never_show_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    monkeypatch.setenv("PW", "hunter2-secret")
    client = client_config(source(security={**SASL, "ssl_cafile": str(ca)}, client_id="mine"))
    kwargs = client.kwargs(client_id="primus-stream-events", request_timeout_ms=1)
    assert kwargs["sasl_plain_password"] == "hunter2-secret"
    assert (kwargs["security_protocol"], kwargs["sasl_mechanism"], kwargs["ssl_cafile"]) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        str(ca),
    )
    assert kwargs["client_id"] == "mine" and kwargs["bootstrap_servers"] == ["broker:9093"]
    assert "hunter2" not in repr(client) and "$PW" in repr(client)


def test_a_missing_tls_file_names_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW", "x")
    with pytest.raises(KafkaClientError, match=r"source 'events': ssl_cafile '/nowhere/ca.pem' is not"):
        client_config(source(security={**SASL, "ssl_cafile": "/nowhere/ca.pem"}))


def test_a_connection_config_maps_librdkafka_keys_and_refuses_what_it_cannot_honour() -> None:
    servers, settings = security_from_client_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
            "group.id": "ignored: the contract decides",
        },
        "Airflow connection 'k'",
    )
    assert servers == "b:9093"
    assert settings == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    with pytest.raises(
        KafkaClientError, match=r"unsupported security settings in the connection: sasl.kerberos"
    ):
        security_from_client_config({"sasl.kerberos.service.name": "kafka"}, "Airflow connection 'k'")
    with pytest.raises(KafkaClientError, match=r"SASL_SSL needs sasl.username and sasl.password"):
        security_from_client_config(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}, "Airflow connection 'k'"
        )


def test_an_unresolved_connection_says_how_to_provide_it() -> None:
    with pytest.raises(KafkaClientError, match="Airflow connection 'kafka_default' was not resolved"):
        client_config(source(connection="kafka_default"), environ={})
