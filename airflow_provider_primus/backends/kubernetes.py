"""Jobs as PrimusJob resources in a Kubernetes cluster: the master is a driver pod owned by the job,
its token, CA and connections are Secrets owned by it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_primus.backends.base import JobBackend
from airflow_provider_primus.master.jobs import read_job_ca, read_token
from airflow_provider_primus.master.store import JobStore

if TYPE_CHECKING:
    from airflow_provider_primus.kubernetes.client import KubeApi
    from airflow_provider_primus.kubernetes.store import KubeJobStore
    from airflow_provider_primus.master.master import Master


class KubernetesJobBackend(JobBackend):
    """The PrimusJob resources of one namespace (``default`` when the place names none)."""

    kind = "kubernetes"
    store_kind = "kubernetes"

    @property
    def namespace(self) -> str:
        return self.place.namespace or "default"

    @cached_property
    def api(self) -> KubeApi:
        """The cluster's API client: the place's own way to build it, else from the kubeconfig."""
        if self.place.kube_api is not None:
            return self.place.kube_api(self.place)
        from airflow_provider_primus.kubernetes.client import KubeApi, api_client_from

        return KubeApi(api_client_from(kubeconfig=self.place.kubeconfig, context=self.place.context))

    def open_store(self) -> JobStore:
        from airflow_provider_primus.kubernetes.store import KubeJobStore

        return KubeJobStore(self.api, self.namespace)

    @property
    def kube_store(self) -> KubeJobStore:
        return cast("KubeJobStore", self.store)

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}"

    def for_job(self, name: str) -> JobBackend:
        """Every job in a cluster runs on it."""
        return self

    def start_master(self, name: str, env: Mapping[str, str] | None = None) -> int:
        """The same settings as a Secret owned by the job (``<job>-connections``, taken by its pods
        through ``envFrom``), then the job's master driver pod; 0 (no process here)."""
        if env:
            from airflow_provider_primus.kubernetes.submission import store_connections

            store_connections(self.kube_store, name, env)
        self.start_master_pod(name)
        return 0

    def start_master_pod(self, name: str, image: str | None = None) -> dict[str, Any]:
        """The job's master driver pod (owned by the PrimusJob); an existing one is returned as it
        is. ``image``: default the job's ``backend.kubernetes.image``, else ours."""
        from airflow_provider_primus.kubernetes.submission import start_master_pod

        return start_master_pod(self.kube_store, name, image)

    def master_args(self) -> list[str]:
        out = ["--namespace", self.namespace]
        for flag, value in (("kubeconfig", self.place.kubeconfig), ("context", self.place.context)):
            if value:
                out += [f"--{flag}", value]
        return out

    def master(self, name: str, **kwargs: Any) -> Master:
        from airflow_provider_primus.kubernetes.submission import kube_master

        return kube_master(name, self.api, self.namespace, **kwargs)

    def stored_token(self, job: str) -> str:
        from airflow_provider_primus.kubernetes.submission import read_token as read_secret

        return read_secret(self.api, self.namespace, job)

    def ca(self, job: str) -> bytes | None:
        from airflow_provider_primus.kubernetes.submission import read_ca_cert

        return read_ca_cert(self.api, self.namespace, job)

    def credentials(self, job: str) -> tuple[str, bytes | None]:
        """The token file and CA of a job submitted from this machine when the place says to look
        there first; else (or without a token file) the job's Secrets."""
        if self.place.local_credentials_first:
            try:
                return read_token(job, self.place.home), read_job_ca(job, self.place.home)
            except FileNotFoundError:
                pass  # submitted from another machine
        return super().credentials(job)

    def cancel(self, name: str, stop: Callable[[], object]) -> None:
        """The PrimusJob is deleted: its pods, Secrets and ConfigMap are owned by it; the master,
        watching, stops the executors."""
        self.store.delete(name)

    async def acancel(self, name: str, stop: Callable[[], Awaitable[object]]) -> None:
        import asyncio

        # The store opens in the thread too: building its client looks the connection up.
        await asyncio.to_thread(lambda: self.store.delete(name))
