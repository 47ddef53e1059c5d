"""Object-store credentials from Airflow connections, resolved where Airflow is: in the task.

A contract names a connection (``storage.credentials.connection: aws_default``); the data layer
never imports Airflow, so the operator looks the connection up here and hands the result down
(``PlanOptions.credentials``) or into a process's environment (:func:`connection_environment`).
The connection is the Amazon provider's ``aws`` type as users already have it: ``login`` is the
access key id, ``password`` the secret access key, ``extra`` may hold ``endpoint_url``,
``region_name`` and ``aws_session_token``. Nothing here logs a value or puts one in a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_primus.data.objectstore import ResolvedAccess, S3Credentials, connection_env_names

__all__ = ["connection_environment", "connection_ids", "resolve_connection", "resolve_connections"]


def _extra(conn: Any) -> dict[str, Any]:
    extra = getattr(conn, "extra_dejson", None)
    if isinstance(extra, dict):
        return extra
    raw = getattr(conn, "extra", None) or "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def resolve_connection(conn_id: str) -> ResolvedAccess:
    """The key pair, endpoint and region of an ``aws`` connection; a clear error when it has none."""
    conn = BaseHook.get_connection(conn_id)
    extra = _extra(conn)
    key = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    if not key or not secret:
        raise ValueError(
            f"Airflow connection {conn_id!r} has no access key and secret: set its login (access key "
            "id) and password (secret access key)"
        )
    endpoint = extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {}).get(
        "endpoint_url"
    )
    return ResolvedAccess(
        S3Credentials(str(key), str(secret), extra.get("aws_session_token") or None),
        endpoint=str(endpoint) if endpoint else None,
        region=str(extra["region_name"]) if extra.get("region_name") else None,
    )


def connection_ids(spec_doc: Any) -> list[str]:
    """The Airflow connections a PrimusData document's sources name, in order, once each."""
    found: list[str] = []
    for source in spec_doc.spec.sources:
        storage = getattr(source, "storage", None)
        conn = storage.credentials.connection if storage and storage.credentials else None
        if conn and conn not in found:
            found.append(conn)
    return found


def resolve_connections(conn_ids: Iterable[str]) -> dict[str, ResolvedAccess]:
    return {conn_id: resolve_connection(conn_id) for conn_id in conn_ids}


def connection_environment(resolved: Mapping[str, ResolvedAccess]) -> dict[str, str]:
    """The environment a job's processes find the connections in (``PRIMUS_S3_CONNECTION_<ID>_…``),
    for a backend that starts them; to be passed as the processes' environment, never as argv."""
    env: dict[str, str] = {}
    for conn_id, access in resolved.items():
        key_name, secret_name, token_name = connection_env_names(conn_id)
        env[key_name] = access.credentials.access_key
        env[secret_name] = access.credentials.secret_key
        if access.credentials.session_token:
            env[token_name] = access.credentials.session_token
        stem = key_name.removesuffix("_ACCESS_KEY_ID")
        if access.endpoint:
            env[f"{stem}_ENDPOINT_URL"] = access.endpoint
        if access.region:
            env[f"{stem}_REGION"] = access.region
    return env
