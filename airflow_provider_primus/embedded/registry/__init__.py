"""A real schema registry (Apicurio Registry, Confluent-compatible API) for the tests and benches."""

from airflow_provider_primus.embedded.registry.distribution import (
    APICURIO_VERSION,
    RegistryDistribution,
    RegistryFetchError,
    ensure_registry,
)
from airflow_provider_primus.embedded.registry.server import (
    CCOMPAT_PATH,
    EmbeddedRegistry,
    RegistryServerError,
    RegistryState,
)

__all__ = [
    "APICURIO_VERSION",
    "CCOMPAT_PATH",
    "EmbeddedRegistry",
    "RegistryDistribution",
    "RegistryFetchError",
    "RegistryServerError",
    "RegistryState",
    "ensure_registry",
]
