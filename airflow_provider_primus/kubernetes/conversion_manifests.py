"""The conversion webhook as the cluster runs it: its ServiceAccount, serving Secret, Deployment and
Service (``primus k8s install --conversion-webhook`` applies them and points the CRD at the Service).

The webhook reads nothing from the API (the apiserver sends it the objects), so its RBAC is a
ServiceAccount with no role bound and no token mounted: least privilege is none. Its certificate is
issued by a CA made for it (``tls.JobCa``) for the Service's DNS names; the CA's certificate is what
the CRD's ``caBundle`` carries, and the Secret keeps it so a second install reuses the same pair.
"""

from __future__ import annotations

import base64
from typing import Any

from airflow_provider_primus.tls import JobCa

NAME = "primus-conversion"
PORT = 8443
TLS_MOUNT = "/var/run/primus/conversion"
CA_KEY = "ca.crt"  # in the Secret, beside tls.crt and tls.key
_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "airflow-provider-primus"}


def service_hosts(namespace: str) -> list[str]:
    """The names the apiserver dials a Service by: ``<name>.<namespace>.svc``."""
    return [f"{NAME}.{namespace}.svc", f"{NAME}.{namespace}.svc.cluster.local"]


def serving_secret(namespace: str, ca: JobCa) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret: a fresh certificate for the Service, and the CA's certificate."""
    cert, key = ca.issue(service_hosts(namespace))
    data = {"tls.crt": cert, "tls.key": key, CA_KEY: ca.cert_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def webhook_manifests(namespace: str, image: str, *, replicas: int = 2) -> list[dict[str, Any]]:
    """ServiceAccount, Deployment and Service (the Secret comes from ``serving_secret``). Two replicas:
    while none answers, clients reading another version than the stored one get errors."""
    meta = {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)}
    container = {
        "name": "webhook",
        "image": image,
        "command": ["primus", "k8s", "conversion-webhook", "--port", str(PORT), "--tls-dir", TLS_MOUNT],
        "ports": [{"name": "https", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT, "scheme": "HTTPS"}},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True}],
    }
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{"name": "tls", "secret": {"secretName": NAME}}],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": dict(meta),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": dict(meta),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(_LABELS)},
                "template": {"metadata": {"labels": dict(_LABELS)}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {
                "selector": dict(_LABELS),
                "ports": [{"name": "https", "port": 443, "targetPort": PORT}],
            },
        },
    ]


def service_reference(namespace: str) -> dict[str, Any]:
    """How the CRD names the Service (``contracts.crd.webhook_conversion(service=...)``)."""
    return {"namespace": namespace, "name": NAME, "port": 443}
