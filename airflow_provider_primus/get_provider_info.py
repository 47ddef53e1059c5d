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
                "python-modules": ["airflow_provider_primus.operators.doctor"],
            }
        ],
    }
