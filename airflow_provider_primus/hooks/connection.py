"""What the Primus hook reads from Airflow: a ``primus`` connection's fields with the deployment's
``[primus]`` defaults under them, and the ``aws``/``kafka`` connections a job's data names, resolved
into an environment for the processes that cannot ask Airflow themselves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Connection extra -> the job document's backend.yarn field it fills.
YARN_CONNECTION_FIELDS = {
    "resource_manager": "resource_manager",
    "queue": "queue",
    "yarn_user": "user",
    "hadoop_conf_dir": "conf_dir",
    "kerberos_principal": "principal",
    "kerberos_keytab": "keytab",
}


def provider_setting(key: str) -> str | None:
    """``[primus] key`` of Airflow's configuration (also ``AIRFLOW__PRIMUS__KEY``), the deployment's
    default under a connection's extra; None when unset or empty."""
    try:
        from airflow.configuration import conf

        value = conf.get("primus", key, fallback="")
    except Exception:  # no Airflow configuration at all (the core, a bare process)
        return None
    return str(value) if value else None


def storage_environment(stored_job: Mapping[str, Any]) -> dict[str, str]:
    """The environment carrying the ``aws`` and ``kafka`` connections the job's data document names,
    resolved here (where Airflow is) for processes that cannot ask Airflow (``hooks/storage.py``,
    ``hooks/kafka.py``)."""
    from airflow_provider_primus.contracts.loader import load_data_spec
    from airflow_provider_primus.hooks.kafka import kafka_connection_environment, kafka_connection_ids
    from airflow_provider_primus.hooks.storage import (
        connection_environment,
        connection_ids,
        resolve_connections,
    )

    data_path = (stored_job.get("spec") or {}).get("data")
    if not data_path:
        return {}
    spec = load_data_spec(Path(data_path))
    ids = connection_ids(spec)
    env = connection_environment(resolve_connections(ids)) if ids else {}
    env.update(kafka_connection_environment(kafka_connection_ids(spec)))
    return env


def connection_settings(conn: Any) -> dict[str, Any]:
    """The fields of a ``primus`` connection (None: the default connection is absent, so the
    deployment's defaults alone)."""
    if conn is None:
        return {
            "home": provider_setting("home"),
            "backend": provider_setting("default_backend") or "local",
            "namespace": provider_setting("namespace"),
            "kubernetes_conn_id": None,
            "host": None,
            "port": None,
            "secret": None,
            "yarn": {},
        }
    extra = conn.extra_dejson
    return {
        "home": extra.get("home") or provider_setting("home"),
        "backend": extra.get("backend") or provider_setting("default_backend") or "local",
        "namespace": extra.get("namespace") or provider_setting("namespace"),
        "kubernetes_conn_id": extra.get("kubernetes_conn_id"),
        "host": conn.host or None,
        "port": conn.port,
        "secret": conn.password or None,
        "yarn": {
            field: extra[key]
            for key, field in YARN_CONNECTION_FIELDS.items()
            if extra.get(key) not in (None, "")
        },
    }
