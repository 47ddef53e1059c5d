"""A job on Kubernetes: submission (custom resource, token Secret, documents ConfigMap) and the master.

Submitting creates three objects: the PrimusJob, then — owned by it, so deleting the job removes
them — a Secret with the job's token (pods read it through ``secretKeyRef``; it never appears in a
pod spec, a log or XCom) and a ConfigMap with the documents the job references, mounted into the
master's and the executors' pods at the paths the job names them by.

The master is the same ``Master`` as on a laptop, given the Kubernetes job store (informer-backed)
and the Kubernetes backend; it runs as a driver pod (``primus k8s manifests --master NAME``) or
wherever the operator starts it, with the ServiceAccount and Role of ``manifests.py``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_primus import __version__
from airflow_provider_primus.master.kube_store import KubeJobStore
from airflow_provider_primus.resources.kube import (
    KubernetesBackend,
    PodTemplate,
    documents_configmap,
    owner_reference,
    token_secret_name,
)
from airflow_provider_primus.resources.kube_client import KubeApi, KubeError, resource_path

if TYPE_CHECKING:
    from airflow_provider_primus.master.master import Master

DEFAULT_IMAGE = f"airflow-provider-primus:{__version__}"
LABEL_JOB = "primus.dev/job"


def job_documents(stored: Mapping[str, Any]) -> dict[str, str]:
    """The documents a stored job references (absolute paths) and their text."""
    spec = stored["spec"]
    paths = [spec["data"], *([spec["training"]] if spec.get("training") else [])]
    return {p: Path(p).read_text() for p in paths}


def provision(store: KubeJobStore, name: str, token: str, documents: Mapping[str, str]) -> None:
    """The job's Secret and documents ConfigMap, owned by its PrimusJob (idempotent)."""
    owner = owner_reference(store.raw(name))
    ns = store.namespace
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token_secret_name(name),
            "labels": {LABEL_JOB: name},
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
    config = documents_configmap(name, documents, owner)
    for plural, body in (("secrets", secret), ("configmaps", config)):
        path = resource_path("v1", plural, ns)
        try:
            store.api.create(path, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            store.api.replace(f"{path}/{body['metadata']['name']}", body)


def read_token(api: KubeApi, namespace: str, name: str) -> str:
    secret = api.get(resource_path("v1", "secrets", namespace, token_secret_name(name)))
    return base64.b64decode(secret["data"]["token"]).decode()


def backend_factory(api: KubeApi, store: KubeJobStore) -> Any:
    """Builds the master's backend once the master has read its job (image, namespace, policy)."""

    def make(master: Master) -> KubernetesBackend:
        spec = master.job.spec
        kube = spec.backend.kubernetes
        stored: Mapping[str, Any] = store.get(master.name).spec
        template = PodTemplate(
            job=master.name,
            namespace=store.namespace,
            image=(kube.image if kube and kube.image else DEFAULT_IMAGE),
            owner=owner_reference(store.raw(master.name)),
            documents=job_documents(stored),
            service_account=kube.executor_service_account if kube else None,
        )
        return KubernetesBackend(
            api,
            template,
            on_event=master._backend_event,
            on_resize_refused=(kube.on_resize_refused if kube else "keep"),
        )

    return make


def kube_master(
    name: str, api: KubeApi, namespace: str, *, home: Path | None = None, tick_s: float = 0.5
) -> Master:
    from airflow_provider_primus.master.master import Master

    store = KubeJobStore(api, namespace, informer=True)
    return Master(
        name,
        store,
        home=home,
        tick_s=tick_s,
        token=read_token(api, namespace, name),
        backend_factory=backend_factory(api, store),
    )
