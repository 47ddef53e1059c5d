"""Kafka client settings from Airflow connections, resolved where Airflow is: in the task.

A Kafka source may name a connection (``connection: kafka_default``) of the Apache Kafka provider's
``kafka`` type, whose extra *is* the client config (librdkafka keys: ``bootstrap.servers``,
``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``,
...). The core never imports Airflow, so the config is looked up here and handed to the job's
processes through their environment (``PRIMUS_KAFKA_CONNECTION_<ID>_CONFIG``, read by
``data/sources/kafka_client.py``), as ``hooks/storage.py`` does for object-store connections. Nothing
here logs a value or puts one in a message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka_client import (
    KafkaClient,
    client_config,
    connection_env_name,
    security_from_client_config,
)

__all__ = [
    "kafka_client_for",
    "kafka_connection_environment",
    "kafka_connection_ids",
    "kafka_connections_in_environment",
    "resolve_kafka_connection",
]


def resolve_kafka_connection(conn_id: str) -> dict[str, Any]:
    """The client config of a ``kafka`` connection (its extra), checked as the processes will use it."""
    conn = BaseHook.get_connection(conn_id)
    extra = getattr(conn, "extra_dejson", None)
    if not isinstance(extra, dict):
        try:
            extra = json.loads(getattr(conn, "extra", None) or "{}")
        except ValueError:
            extra = None
    if not isinstance(extra, dict) or not extra:
        raise ValueError(
            f"Airflow connection {conn_id!r} has no client config: its extra must be a JSON object "
            'such as {"bootstrap.servers": "host:9093", "security.protocol": "SASL_SSL", ...}'
        )
    # Fails now, in the task, for settings no client could use (the processes would fail later).
    security_from_client_config(extra, f"Airflow connection {conn_id!r}")
    return dict(extra)


def kafka_connection_ids(spec_doc: Any) -> list[str]:
    """The Airflow ``kafka`` connections a PrimusData document's sources name, in order, once each."""
    found: list[str] = []
    for source in spec_doc.spec.sources:
        conn = getattr(source, "connection", None) if isinstance(source, KafkaSource) else None
        if conn and conn not in found:
            found.append(conn)
    return found


def kafka_connection_environment(conn_ids: Iterable[str]) -> dict[str, str]:
    """The environment a job's processes find the connections' client configs in; to be passed as
    the processes' environment, never as argv."""
    return {
        connection_env_name(conn_id): json.dumps(resolve_kafka_connection(conn_id)) for conn_id in conn_ids
    }


def kafka_client_for(source: KafkaSource) -> KafkaClient:
    """The source's client settings in this (Airflow) process, its connection resolved here."""
    if source.connection is None:
        return client_config(source)
    env = kafka_connection_environment([source.connection])
    return client_config(source, environ={**os.environ, **env})


@contextmanager
def kafka_connections_in_environment(spec_doc: Any) -> Iterator[Mapping[str, str]]:
    """For work done in the task's own process (planning a Kafka source's offsets): the named
    connections in this process's environment for the duration, removed afterwards."""
    env = kafka_connection_environment(kafka_connection_ids(spec_doc))
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
