"""The provider's self-description, read by Airflow's ProvidersManager through the
``apache_airflow_provider`` entry point.

Airflow refuses a provider whose ``package-name`` differs from the normalized distribution name,
so the name below must match ``[project].name`` in pyproject.toml.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_primus import __version__

PACKAGE_NAME = "airflow-provider-primus"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE_NAME,
        "name": "Primus",
        "description": (
            "Unified resources, data and hybrid batch+stream training for recommendation models, "
            "after ByteDance's Primus (USENIX ATC'25)."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Primus",
                "external-doc-url": "https://www.usenix.org/conference/atc25",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Primus",
                "python-modules": [
                    "airflow_provider_primus.operators.base",
                    "airflow_provider_primus.operators.doctor",
                    "airflow_provider_primus.operators.plan",
                    "airflow_provider_primus.operators.job",
                ],
            }
        ],
        "hooks": [{"integration-name": "Primus", "python-modules": ["airflow_provider_primus.hooks.primus"]}],
        "sensors": [
            {
                "integration-name": "Primus",
                "python-modules": [
                    "airflow_provider_primus.sensors.partitions",
                    "airflow_provider_primus.sensors.freshness",
                    "airflow_provider_primus.sensors.job",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Primus",
                "python-modules": [
                    "airflow_provider_primus.triggers.job",
                    "airflow_provider_primus.triggers.partitions",
                ],
            }
        ],
        "extra-links": ["airflow_provider_primus.links.job.PrimusJobLink"],
        "config": {
            "primus": {
                "description": (
                    "Deployment-wide defaults of the Primus provider; a Primus connection's extra "
                    "overrides them per connection, and each is also read from AIRFLOW__PRIMUS__<KEY>."
                ),
                "options": {
                    "home": {
                        "description": (
                            "PRIMUS_HOME of the local backend: the job store and job files. Workers, the "
                            "triggerer and the API server must all see the same directory. Empty: the "
                            "PRIMUS_HOME environment variable, else ~/.primus."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/shared/primus",
                        "default": "",
                    },
                    "default_backend": {
                        "description": "local or kubernetes, for connections that do not say.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "kubernetes",
                        "default": "local",
                    },
                    "namespace": {
                        "description": "The namespace of PrimusJob resources (kubernetes backend).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "ml-jobs",
                        "default": "default",
                    },
                    "ui_sample_interval": {
                        "description": (
                            "Seconds between the UI's reads of running jobs between page views (0: only "
                            "on page views; the master keeps the charts' history either way)."
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "10",
                        "default": "5",
                    },
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_primus.hooks.primus.PrimusHook",
                "hook-name": "Primus",
                "connection-type": "primus",
                "conn-fields": {
                    "home": {"label": "PRIMUS_HOME (local backend)", "schema": {"type": ["string", "null"]}},
                    "backend": {
                        "label": "Default backend",
                        "schema": {"type": ["string", "null"], "enum": ["local", "kubernetes", "yarn", None]},
                    },
                    "resource_manager": {
                        "label": "YARN ResourceManager web address (default: HADOOP_CONF_DIR's)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "queue": {"label": "YARN queue", "schema": {"type": ["string", "null"]}},
                    "yarn_user": {
                        "label": "YARN user (simple authentication)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "hadoop_conf_dir": {
                        "label": "HADOOP_CONF_DIR on the workers (yarn backend)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "kerberos_principal": {
                        "label": "Kerberos principal (Kerberized YARN; default: the ticket cache's)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "kerberos_keytab": {
                        "label": "Kerberos keytab path on the workers (with the principal)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "namespace": {"label": "Kubernetes namespace", "schema": {"type": ["string", "null"]}},
                    "kubernetes_conn_id": {
                        "label": "Kubernetes connection (cncf-kubernetes) for the kubernetes backend",
                        "schema": {"type": ["string", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login"],
                    "relabeling": {
                        "host": "Control API host (optional)",
                        "password": "Token secret (optional)",
                    },
                    "placeholders": {"host": "127.0.0.1", "port": "8765"},
                },
            }
        ],
    }
