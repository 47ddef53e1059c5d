"""An Airflow ``kafka`` connection (the Apache Kafka provider's type, its extra the client config)
resolves in the task and reaches a job's processes through their environment; a client made from it
really talks to the session's secured broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.sources.kafka import ensure_topic
from airflow_provider_primus.data.sources.kafka_client import admin_client, client_config, connection_env_name
from airflow_provider_primus.embedded.kafka import EmbeddedKafka
from airflow_provider_primus.hooks.kafka import kafka_client_for, resolve_kafka_connection
from airflow_provider_primus.hooks.primus import storage_environment


def test_a_kafka_connection_travels_by_environment_to_a_working_client(
    secured_kafka_broker: EmbeddedKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = secured_kafka_broker
    assert broker.state is not None and broker.secured is not None
    extra = {
        "bootstrap.servers": broker.state.secured_bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": broker.secured.mechanism,
        "sasl.username": broker.secured.username,
        "sasl.password": broker.secured.password,
        "ssl.ca.location": broker.state.ca_file,
        "group.id": "from-the-connection",
    }
    monkeypatch.setenv("AIRFLOW_CONN_SECURED_KAFKA", json.dumps({"conn_type": "kafka", "extra": extra}))
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "conn"},
        "spec": {
            "sources": [
                {
                    "name": "events",
                    "type": "kafka",
                    "connection": "secured_kafka",
                    "topic": "via-connection",
                    "event_time_field": "ts",
                    "start": {"policy": "earliest"},
                    "schema": {"sparse": ["u"], "label": {"column": "y"}},
                }
            ],
            "mixture": [{"source": "events", "weight": 1.0}],
        },
    }
    data_path = tmp_path / "data.yaml"
    data_path.write_text(yaml.safe_dump(doc))
    assert resolve_kafka_connection("secured_kafka")["sasl.username"] == broker.secured.username

    # What a job's master (and its trainer, inheriting it) gets in its environment.
    env = storage_environment({"spec": {"data": str(data_path)}})
    assert set(env) == {connection_env_name("secured_kafka")}
    source = load_data_spec(data_path).spec.source("events")
    client = client_config(source, environ=env)  # type: ignore[arg-type]
    assert broker.secured.password not in repr(client)
    ensure_topic(client, "via-connection")
    admin = admin_client(client, client_id="primus-tests")
    try:
        assert "via-connection" in admin.list_topics()
    finally:
        admin.close()
    # In the Airflow process itself (a sensor), without touching its environment.
    assert kafka_client_for(source).servers == broker.state.secured_bootstrap_servers  # type: ignore[arg-type]


def test_a_kafka_connection_without_a_client_config_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_EMPTY_KAFKA", json.dumps({"conn_type": "kafka"}))
    with pytest.raises(ValueError, match="'empty_kafka' has no client config"):
        resolve_kafka_connection("empty_kafka")
