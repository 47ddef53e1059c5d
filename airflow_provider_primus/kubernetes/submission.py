"""A job on Kubernetes once submitted: its master (driver pod or process) and the token it reads.

Submitting goes through the job store like everywhere else (``master/jobs.py``): the store creates
the PrimusJob and then — owned by it, so deleting the job removes them — the token Secret and the
documents ConfigMap (``KubeJobStore.provision``). What is specific to a cluster is here: starting the
master as a driver pod (the Airflow hook and the CLI call ``start_master_pod``; neither builds pods
itself), and the master itself — the same ``Master`` as on a laptop, given the informer-backed job
store and the pod backend, running with the ServiceAccount and Role of ``manifests.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_provider_primus.contracts.data import validate_data_spec
from airflow_provider_primus.contracts.job import KubernetesBackend as KubernetesSettings
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.contracts.training import validate_training_spec
from airflow_provider_primus.credentials import token_from_secret, token_secret_name
from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, resource_path
from airflow_provider_primus.kubernetes.manifests import (
    DEFAULT_IMAGE,
    connections_secret,
    master_pod,
    owner_reference,
)
from airflow_provider_primus.kubernetes.pods import KubernetesBackend, PodTemplate, storage_secret_env
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.master.jobs import job_documents
from airflow_provider_primus.tls import JobCa, ca_from_secret, tls_secret_name

if TYPE_CHECKING:
    from airflow_provider_primus.master.master import Master


def read_token(api: KubeApi, namespace: str, name: str) -> str:
    """The job's token from its Secret: for a master, or a client that did not submit the job."""
    return token_from_secret(api.get(resource_path("v1", "secrets", namespace, token_secret_name(name))))


def read_ca(api: KubeApi, namespace: str, name: str, *, key: bool = False) -> JobCa | None:
    """The job's CA from its TLS Secret (the certificate only unless ``key``); None for a job
    without TLS."""
    try:
        secret = api.get(resource_path("v1", "secrets", namespace, tls_secret_name(name)))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
    return ca_from_secret(secret, key=key)


def read_ca_cert(api: KubeApi, namespace: str, name: str) -> bytes | None:
    """The job's CA certificate (PEM) that its master's and executors' certificates chain to: what
    a client verifies them with. None for a job without TLS."""
    found = read_ca(api, namespace, name)
    return found.cert_pem if found else None


def store_connections(store: KubeJobStore, name: str, env: Mapping[str, str]) -> None:
    """The job's connections Secret (``manifests.connections_secret``), made or replaced before its
    master pod starts: the master and its executor pods read the connections from it."""
    body = connections_secret(name, env, owner_reference(store.raw(name)))
    path = resource_path("v1", "secrets", store.namespace)
    try:
        store.api.create(path, body)
    except KubeError as exc:
        if exc.status != 409:
            raise
        store.api.replace(f"{path}/{body['metadata']['name']}", body)


def start_master_pod(store: KubeJobStore, name: str, image: str | None = None) -> dict[str, Any]:
    """The job's master as a driver pod owned by the job (idempotent: an existing pod is returned).
    The image: ``image``, else the job's ``backend.kubernetes.image``, else this version's."""
    record = store.get(name)
    kube = record.spec["spec"].get("backend", {}).get("kubernetes") or {}
    documents = job_documents(record.spec)
    data = validate_data_spec(yaml.safe_load(documents[record.spec["spec"]["data"]]))
    training_path = record.spec["spec"].get("training")
    training = validate_training_spec(yaml.safe_load(documents[training_path])) if training_path else None
    settings = KubernetesSettings.model_validate(kube)
    pod = master_pod(
        name,
        store.namespace,
        image or settings.image_of("master") or DEFAULT_IMAGE,
        list(documents),
        owner_reference(store.raw(name)),
        # The master plans the data: it reads the store (the training document's Secrets: one set
        # of variables for every pod of the job).
        env=storage_secret_env(data, training),
        kube=settings,
    )
    try:
        created: dict[str, Any] = store.api.create(resource_path("v1", "pods", store.namespace), pod)
    except KubeError as exc:
        if exc.status != 409:
            raise
        created = store.api.get(resource_path("v1", "pods", store.namespace, pod["metadata"]["name"]))
    return created


def backend_factory(api: KubeApi, store: KubeJobStore) -> Callable[[Master], KubernetesBackend]:
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
            secret_env=storage_secret_env(
                master.data, load_training_spec(spec.training) if spec.training else None
            ),
            settings=kube,
        )
        return KubernetesBackend(
            api,
            template,
            on_event=master.backend_event,
            on_resize_refused=(kube.on_resize_refused if kube else "keep"),
            # Read when the master adopts pods, after its dispatcher started (a new pod's address).
            dispatcher=lambda: master.server.location,
        )

    return make


def kube_master(
    name: str, api: KubeApi, namespace: str, *, home: Path | None = None, tick_s: float = 0.5
) -> Master:
    # Imported here: the master pulls in the data service and the planner, which ``primus k8s`` and
    # the Airflow hook (importers of this module) never need. Not a cycle: the master imports nothing
    # of this package.
    from airflow_provider_primus.master.jobs import job_paths
    from airflow_provider_primus.master.master import Master

    store = KubeJobStore(api, namespace, informer=True)
    ca = read_ca(api, namespace, name, key=True)
    if ca is not None:  # the master's certificates come from the job's CA: kept where it reads it
        ca.write(job_paths(name, home).tls)
    return Master(
        name,
        store,
        home=home,
        tick_s=tick_s,
        token=read_token(api, namespace, name),
        backend_factory=backend_factory(api, store),
    )
