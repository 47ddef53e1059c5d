"""``PrimusHook``: Airflow's way to Primus jobs — the job store and each job's control API.

Connection type ``primus``:

* ``extra.home`` — PRIMUS_HOME of the local backend (job store and job files; default: the
  worker's ``$PRIMUS_HOME``); ``extra.backend`` — ``local`` or ``kubernetes``; for Kubernetes
  ``extra.namespace`` and ``extra.kubernetes_conn_id`` (a cncf-kubernetes connection: the hook uses
  that provider's ``KubernetesHook`` API client, never a process-global kube config). Operators may
  override the backend, namespace and Kubernetes connection per task;
* ``host``/``port`` — a fixed control-API endpoint, for jobs whose master listens on a known address
  (otherwise the endpoint is read from the job's status);
* ``password`` — a secret from which each job's token is derived (HMAC-SHA256 of the job name), so
  the hook can authenticate to jobs it did not submit from this worker; without it the hook reads the
  job's token file (local backend: the same machine).

Every control call exists as a sync and an async method (the async ones for triggers: no blocking
call in the event loop), with retries and exponential backoff on transient errors — connection
failures and 5xx answers, e.g. while a master restarts.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import httpx
from airflow.sdk import BaseHook

from airflow_provider_primus.master.jobs import (
    TERMINAL,
    job_paths,
    load_job,
    read_token,
    start_master,
    submit_document,
)
from airflow_provider_primus.master.store import JobNotFound, JobRecord, JobStore, SqliteJobStore, modify
from airflow_provider_primus.spec.loader import read_document

T = TypeVar("T")
TRANSIENT = (httpx.TransportError,)


class PrimusError(RuntimeError):
    """A control call failed for good (not transient, or retries exhausted)."""


class _Transient(Exception):
    pass


def derive_token(secret: str, job: str) -> str:
    return hmac.new(secret.encode(), job.encode(), hashlib.sha256).hexdigest()


class PrimusHook(BaseHook):
    conn_name_attr = "primus_conn_id"
    default_conn_name = "primus_default"
    conn_type = "primus"
    hook_name = "Primus"
    # The connection form's fields are declared in get_provider_info() ("conn-fields"): Airflow 3's UI
    # builds the form from that JSON schema.

    def __init__(
        self,
        primus_conn_id: str = default_conn_name,
        *,
        retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 10.0,
        backend: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.primus_conn_id = primus_conn_id
        self.overrides = {
            k: v
            for k, v in (
                ("backend", backend),
                ("namespace", namespace),
                ("kubernetes_conn_id", kubernetes_conn_id),
            )
            if v
        }
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    # --- the connection --------------------------------------------------------------------------

    @cached_property
    def settings(self) -> dict[str, Any]:
        """The connection's fields; the default connection may be absent (embedded defaults)."""
        try:
            conn = self.get_connection(self.primus_conn_id)
        except Exception:
            if self.primus_conn_id != self.default_conn_name:
                raise
            return {
                "home": None,
                "backend": "local",
                "namespace": None,
                "kubernetes_conn_id": None,
                "host": None,
                "port": None,
                "secret": None,
                **self.overrides,
            }
        extra = conn.extra_dejson
        return {
            "home": extra.get("home") or None,
            "backend": extra.get("backend") or "local",
            "namespace": extra.get("namespace"),
            "kubernetes_conn_id": extra.get("kubernetes_conn_id"),
            "host": conn.host or None,
            "port": conn.port,
            "secret": conn.password or None,
            **self.overrides,
        }

    @property
    def hook_params(self) -> dict[str, str]:
        """What a trigger needs to build the same hook (the per-task overrides)."""
        return dict(self.overrides)

    @property
    def kubernetes(self) -> bool:
        return bool(self.settings["backend"] == "kubernetes")

    @property
    def home(self) -> Path | None:
        home = self.settings["home"]
        return Path(home).expanduser() if home else None

    @cached_property
    def store(self) -> JobStore:
        if self.kubernetes:
            from airflow_provider_primus.master.kube_store import KubeJobStore

            return KubeJobStore(self.kube_api, self.settings["namespace"] or "default")
        home = self.home
        return SqliteJobStore(home / "jobs.sqlite" if home else None)

    @cached_property
    def kube_api(self) -> Any:
        """The cncf-kubernetes provider's API client for the configured connection."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        from airflow_provider_primus.resources.kube_client import KubeApi

        conn_id = self.settings["kubernetes_conn_id"] or KubernetesHook.default_conn_name
        return KubeApi(KubernetesHook(conn_id=conn_id).api_client)

    def token(self, job: str) -> str:
        secret = self.settings["secret"]
        if secret:
            return derive_token(secret, job)
        if self.kubernetes:
            from airflow_provider_primus.master.kubernetes import read_token as read_secret

            return read_secret(self.kube_api, self.settings["namespace"] or "default", job)
        return read_token(job, self.home)

    def endpoint(self, record: JobRecord) -> str:
        if self.settings["host"]:
            port = f":{self.settings['port']}" if self.settings["port"] else ""
            return f"http://{self.settings['host']}{port}"
        api = (record.status.get("master") or {}).get("api")
        if not api:
            raise _Transient(f"job {record.name!r} has no running master yet")
        return str(api)

    # --- the job store (local backend) -------------------------------------------------------------

    def submit_job(
        self,
        job: str | Path | Mapping[str, Any],
        *,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        base: str | Path | None = None,
        start: bool = True,
        keep_files: bool = False,
    ) -> JobRecord:
        """Submit a PrimusJob (a path, or a parsed document whose paths are relative to ``base``) and
        start its master in the background."""
        if isinstance(job, str | Path):
            path = Path(job)
            document, base_dir = read_document(path), path.resolve().parent
        else:
            document, base_dir = dict(job), Path(base or os.getcwd())
        job_name = name or str(document.get("metadata", {}).get("name", ""))
        secret = self.settings["secret"]
        record = submit_document(
            document,
            base_dir,
            name=name,
            store=self.store,
            labels=labels,
            home=self.home,
            token=derive_token(secret, job_name) if secret else None,
            keep_files=keep_files,
        )
        if start:
            self.start_master(record.name)
        return record

    def start_master(self, name: str) -> int:
        """Local: a background process. Kubernetes: the job's master driver pod (owned by the job)."""
        if self.kubernetes:
            self.start_master_pod(name)
            return 0
        return start_master(name, store_path=getattr(self.store, "path", None), home=self.home)

    def start_master_pod(self, name: str, image: str | None = None) -> dict[str, Any]:
        from airflow_provider_primus.master.kubernetes import DEFAULT_IMAGE, job_documents
        from airflow_provider_primus.resources.kube import owner_reference
        from airflow_provider_primus.resources.kube_client import KubeError, resource_path
        from airflow_provider_primus.resources.kube_manifests import master_pod

        store: Any = self.store
        record = store.get(name)
        kube = record.spec["spec"].get("backend", {}).get("kubernetes") or {}
        pod = master_pod(
            name,
            store.namespace,
            image or kube.get("image") or DEFAULT_IMAGE,
            list(job_documents(record.spec)),
            owner_reference(store.raw(name)),
        )
        try:
            created: dict[str, Any] = self.kube_api.create(resource_path("v1", "pods", store.namespace), pod)
        except KubeError as exc:
            if exc.status != 409:
                raise
            created = self.kube_api.get(resource_path("v1", "pods", store.namespace, pod["metadata"]["name"]))
        return created

    def cancel_job(self, name: str) -> None:
        """Cancel: on Kubernetes the PrimusJob is deleted (its pods, Secret and ConfigMap are owned by
        it; the master, watching, stops the executors); locally the job is stopped."""
        if self.kubernetes:
            self.store.delete(name)
            return
        try:
            self.stop_job(name)
        except PrimusError:
            self.request_stop_offline(name)

    def validate_job(self, path: str | Path) -> dict[str, Any]:
        path = Path(path)
        _, stored = load_job(read_document(path), path.resolve().parent, self.settings["backend"])
        return stored

    def get_job(self, name: str) -> JobRecord | None:
        try:
            return self.store.get(name)
        except JobNotFound:
            return None

    def find_jobs(self, labels: Mapping[str, str]) -> list[JobRecord]:
        return self.store.find(labels)

    def job_dir(self, name: str) -> Path:
        return job_paths(name, self.home).root

    def wait_for_master(self, name: str, timeout_s: float = 60.0) -> JobRecord:
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.store.get(name)
            if (record.status.get("master") or {}).get("api") or record.status.get("phase") in TERMINAL:
                return record
            if time.monotonic() > deadline:
                raise PrimusError(f"job {name!r}: its master did not start within {timeout_s:.0f}s")
            time.sleep(0.2)

    def request_stop_offline(self, name: str) -> None:
        """Record a stop in the job object when no master answers: the next master acts on it."""
        modify(self.store, name, lambda r: {**r.desired, "stop": True})

    async def aget_job(self, name: str) -> JobRecord | None:
        return await asyncio.to_thread(self.get_job, name)

    # --- the control API ---------------------------------------------------------------------------

    def _request(self, method: str, job: str, path: str, body: dict[str, Any] | None = None) -> Any:
        def once() -> Any:
            record = self.store.get(job)
            response = httpx.request(
                method,
                f"{self.endpoint(record)}/v1/{path}",
                json=body,
                headers={"Authorization": f"Bearer {self.token(job)}"},
                timeout=self.timeout_s,
            )
            return self._answer(method, path, response)

        return self._retrying(once)

    async def _arequest(self, method: str, job: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async def once() -> Any:
            record = await asyncio.to_thread(self.store.get, job)
            token = await asyncio.to_thread(self.token, job)
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.request(
                    method,
                    f"{self.endpoint(record)}/v1/{path}",
                    json=body,
                    headers={"Authorization": f"Bearer {token}"},
                )
            return self._answer(method, path, response)

        return await self._aretrying(once)

    @staticmethod
    def _answer(method: str, path: str, response: httpx.Response) -> Any:
        if response.status_code >= 500:
            raise _Transient(f"{method} /v1/{path}: HTTP {response.status_code}")
        if response.status_code >= 400:
            raise PrimusError(f"{method} /v1/{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    def _delays(self) -> list[float]:
        return [self.backoff_s * 2**i for i in range(self.retries)]

    def _retrying(self, call: Callable[[], T]) -> T:
        for delay in [*self._delays(), None]:
            try:
                return call()
            except (_Transient, *TRANSIENT) as exc:
                if delay is None:
                    raise PrimusError(f"gave up after {self.retries} retries: {exc}") from exc
                self.log.info("transient error (%s); retrying in %.1fs", exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    async def _aretrying(self, call: Callable[[], Awaitable[T]]) -> T:
        for delay in [*self._delays(), None]:
            try:
                return await call()
            except (_Transient, *TRANSIENT) as exc:
                if delay is None:
                    raise PrimusError(f"gave up after {self.retries} retries: {exc}") from exc
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def get_status(self, job: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", job, "status")
        return result

    async def aget_status(self, job: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._arequest("GET", job, "status")
        return result

    def get_events(self, job: str, after: int = 0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", job, f"events?after={after}")
        return result

    async def aget_events(self, job: str, after: int = 0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._arequest("GET", job, f"events?after={after}")
        return result

    def scale(self, job: str, role: str, replicas: int) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", job, "scale", {"role": role, "replicas": replicas})
        return result

    async def ascale(self, job: str, role: str, replicas: int) -> dict[str, Any]:
        result: dict[str, Any] = await self._arequest(
            "POST", job, "scale", {"role": role, "replicas": replicas}
        )
        return result

    def append_window(self, job: str, start: str, end: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", job, "windows", {"start": start, "end": end})
        return result

    async def aappend_window(self, job: str, start: str, end: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._arequest("POST", job, "windows", {"start": start, "end": end})
        return result

    def savepoint(self, job: str, savepoint_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", job, "savepoint", {"id": savepoint_id})
        return result

    async def asavepoint(self, job: str, savepoint_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._arequest("POST", job, "savepoint", {"id": savepoint_id})
        return result

    def stop_job(self, job: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", job, "stop")
        return result

    async def astop_job(self, job: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._arequest("POST", job, "stop")
        return result

    def test_connection(self) -> tuple[bool, str]:
        """The store must open; a configured fixed endpoint must answer."""
        where = getattr(self.store, "path", None) or f"namespace {self.settings['namespace'] or 'default'}"
        try:
            jobs = self.store.find()
        except Exception as exc:
            return False, f"cannot open the job store at {where}: {exc}"
        if self.settings["host"]:
            port = f":{self.settings['port']}" if self.settings["port"] else ""
            try:
                httpx.get(f"http://{self.settings['host']}{port}/v1/status", timeout=self.timeout_s)
            except httpx.HTTPError as exc:
                return False, f"control API not reachable: {exc}"
        return True, f"job store {where}: {len(jobs)} job(s)"
