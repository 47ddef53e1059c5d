"""Where a job lives: one ``JobBackend`` class per backend kind (``local``, ``kubernetes``, ``yarn``),
found here from the caller's settings (the Airflow hook's connection) or from what a command was
given (the CLI's flags and document)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_primus.backends.base import KINDS, JobBackend, Place, stored_kind
from airflow_provider_primus.backends.kubernetes import KubernetesJobBackend
from airflow_provider_primus.backends.local import LocalJobBackend
from airflow_provider_primus.backends.yarn import YarnJobBackend
from airflow_provider_primus.errors import TerminalError

if TYPE_CHECKING:
    from airflow_provider_primus.kubernetes.client import KubeApi

__all__ = [
    "KINDS",
    "JobBackend",
    "KubernetesJobBackend",
    "LocalJobBackend",
    "Place",
    "UnknownBackendError",
    "YarnJobBackend",
    "document_cluster",
    "for_document",
    "for_settings",
    "stored_kind",
]

DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")


class UnknownBackendError(TerminalError):
    """A connection or setting names a backend kind no class claims: submitting such a job to the
    local store instead would run it somewhere its owner did not ask for."""


def for_settings(kind: str, place: Place | None = None) -> JobBackend:
    """The backend of ``kind`` at ``place``."""
    cls = KINDS.get(kind)
    if cls is None:
        known = ", ".join(sorted(KINDS))
        raise UnknownBackendError(f"unknown backend {kind!r}: a connection's backend is one of {known}")
    return cls(place)


def document_cluster(path: Path | None) -> dict[str, Any] | None:
    """A Kubernetes job document's own ``backend.kubernetes`` (namespace, context); None for any
    other document, for a job name, and for a document that cannot be read (its command reports
    that itself)."""
    if path is None or path.suffix.lower() not in DOCUMENT_SUFFIXES or not path.is_file():
        return None
    from airflow_provider_primus.contracts.loader import read_document

    try:
        backend = (read_document(path).get("spec") or {}).get("backend") or {}
    except Exception:
        return None
    if not isinstance(backend, dict) or backend.get("type") != "kubernetes":
        return None
    kube = backend.get("kubernetes")
    return dict(kube) if isinstance(kube, dict) else {}


def for_document(
    document: Path | None,
    *,
    store_path: Path | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    kube_api: Callable[[Place], KubeApi] | None = None,
) -> JobBackend:
    """The store a command reaches: a cluster when given a namespace or a kubeconfig, or a document
    of a Kubernetes job (its own namespace and context; an explicit local ``store_path`` wins over
    the document), else the local store. A local-store job may run on YARN: ``for_job`` says.
    ``kube_api``: the caller's way to build the cluster's API client from the place."""
    cluster = None if store_path else document_cluster(document)
    if not (namespace or kubeconfig or cluster is not None):
        return LocalJobBackend(Place(store_path=store_path))
    cluster = cluster or {}
    place = Place(
        namespace=namespace or cluster.get("namespace") or "default",
        kubeconfig=kubeconfig,
        context=context or cluster.get("context"),
        kube_api=kube_api,
        local_credentials_first=True,
    )
    return KubernetesJobBackend(place)
