"""Applying manifests idempotently (server-side apply) and waiting for the CRD to be served."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, resource_path

FIELD_MANAGER = "primus"
APPLY_PATCH = "application/apply-patch+yaml"

# kind → (apiVersion path part, plural, namespaced)
_KINDS = {
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "ServiceAccount": ("serviceaccounts", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Namespace": ("namespaces", False),
    "Pod": ("pods", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
}


def object_path(doc: Mapping[str, Any]) -> str:
    plural, namespaced = _KINDS[doc["kind"]]
    meta = doc["metadata"]
    namespace = meta.get("namespace", "default") if namespaced else None
    return resource_path(doc["apiVersion"], plural, namespace, meta["name"])


def apply(api: KubeApi, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply: creates or updates, and running it twice changes nothing."""
    return api.patch(
        object_path(doc),
        dict(doc),  # sent as JSON, which is YAML
        content_type=APPLY_PATCH,
        fieldManager=FIELD_MANAGER,
        force="true",
    )


def wait_established(api: KubeApi, crd_name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    path = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions", None, crd_name)
    while True:
        try:
            crd = api.get(path)
        except KubeError:
            crd = {}
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {crd_name} not established after {timeout_s}s: {conditions}")
        time.sleep(0.1)
