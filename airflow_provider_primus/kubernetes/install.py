"""Applying manifests idempotently (server-side apply) and waiting for the CRD to be served."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any

from airflow_provider_primus.contracts.crd import webhook_conversion
from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, resource_path
from airflow_provider_primus.kubernetes.conversion_manifests import (
    CA_KEY,
    NAME,
    service_reference,
    serving_secret,
    webhook_manifests,
)
from airflow_provider_primus.tls import JobCa

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
    "Service": ("services", True),
    "Deployment": ("deployments", True),
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


def install_conversion_webhook(api: KubeApi, namespace: str, image: str) -> dict[str, Any]:
    """Apply the conversion webhook in ``namespace`` and return the CRD's ``spec.conversion`` that
    calls it. The serving Secret is made once (a CA for the webhook, a certificate for its Service)
    and kept on later installs, so the caBundle the CRD holds stays the one that signed it."""
    path = resource_path("v1", "secrets", namespace, NAME)
    try:
        ca_pem = base64.b64decode(api.get(path)["data"][CA_KEY])
    except KubeError as exc:
        if exc.status != 404:
            raise
        secret = serving_secret(namespace, JobCa.create(NAME))
        apply(api, secret)
        ca_pem = base64.b64decode(secret["data"][CA_KEY])
    for doc in webhook_manifests(namespace, image):
        apply(api, doc)
    return webhook_conversion(ca_pem, service=service_reference(namespace))
