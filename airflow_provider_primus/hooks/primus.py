"""``PrimusHook``: Airflow's way to Primus jobs — the job store and each job's control API.

Connection type ``primus``:

* ``extra.home`` — PRIMUS_HOME of the local backend (job store and job files; default: the
  worker's ``$PRIMUS_HOME``); ``extra.backend`` — ``local``, ``kubernetes`` or ``yarn``; for YARN
  (the master runs on the worker beside the local job store and drives the job's YARN application)
  ``extra.resource_manager`` (``http://host:8088``), ``extra.queue``, ``extra.yarn_user``,
  ``extra.hadoop_conf_dir`` and, for a Kerberized cluster, ``extra.kerberos_principal`` and
  ``extra.kerberos_keytab`` (a path on the worker), which fill a job document's ``backend.yarn``
  where it is silent; for Kubernetes
  ``extra.namespace`` and ``extra.kubernetes_conn_id`` (a cncf-kubernetes connection: the hook uses
  that provider's ``KubernetesHook`` API client, never a process-global kube config). Operators may
  override the backend, namespace and Kubernetes connection per task;
* ``host``/``port`` — a fixed control-API endpoint, for jobs whose master listens on a known address
  (otherwise the endpoint is read from the job's status);
* ``password`` — a secret from which each job's token is derived (HMAC-SHA256 of the job name), so
  the hook can authenticate to jobs it did not submit from this worker; without it the hook reads the
  job's token file (local backend: the same machine).

Every control call exists as a sync and an async method (the async ones for triggers: no blocking
call in the event loop). The HTTP is the one control client's (``master/client.py``): this hook only
tells it where each job's master is and its token, looked up again on every attempt so a retry finds
a restarted master. Transient failures (no master yet or none reachable, 429, 5xx) are retried with
exponential backoff and jitter, honouring ``Retry-After``; any other 4xx fails at once with the
master's message.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from airflow.sdk import BaseHook

from airflow_provider_primus.backends import (
    JobBackend,
    KubernetesJobBackend,
    Place,
    YarnJobBackend,
    for_settings,
)
from airflow_provider_primus.contracts.job import stored_job
from airflow_provider_primus.contracts.loader import read_document
from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.credentials import derive_token
from airflow_provider_primus.hooks.connection import (
    YARN_CONNECTION_FIELDS,
    connection_settings,
    provider_setting,
    storage_environment,
)
from airflow_provider_primus.master.client import ControlClient, ControlError, Transient
from airflow_provider_primus.master.jobs import job_paths, load_job
from airflow_provider_primus.master.store import JobExists, JobNotFound, JobRecord, JobStore

# Operators and sensors reach jobs through this hook only: the store's types come from here too.
__all__ = [
    "YARN_CONNECTION_FIELDS",
    "JobExists",
    "JobRecord",
    "PrimusError",
    "PrimusHook",
    "derive_token",
    "provider_setting",
    "storage_environment",
]

T = TypeVar("T")


class PrimusError(ControlError):
    """A control call failed for good: refused by the master (``status``: its HTTP status), or no
    answer after the retries."""


class PrimusHook(BaseHook):
    """Jobs of one ``primus`` connection: submit, find, watch and control them.

    :param primus_conn_id: the ``primus`` connection (absent ``primus_default``: the local backend's
        defaults).
    :param retries: further attempts of a control call after a transient failure.
    :param backoff_s: the first pause before a retry; it doubles per retry, with jitter.
    :param timeout_s: bound on each HTTP request to a master.
    :param backend: ``local``, ``kubernetes`` or ``yarn``, overriding the connection's ``extra.backend``.
    :param namespace: the Kubernetes namespace, overriding the connection's ``extra.namespace``.
    :param kubernetes_conn_id: the cncf-kubernetes connection, overriding the connection's
        ``extra.kubernetes_conn_id``.
    """

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
            conn = None
        return {**connection_settings(conn), **self.overrides}

    @property
    def hook_params(self) -> dict[str, str]:
        """What a trigger needs to build the same hook (the per-task overrides)."""
        return dict(self.overrides)

    @cached_property
    def backend(self) -> JobBackend:
        """Where this connection's jobs live (``backends/``): store, master, credentials, cancel."""
        settings = self.settings
        place = Place(
            home=self.home,
            namespace=settings["namespace"],
            kube_api=self._kube_api,
            secret=settings["secret"],
            yarn=settings["yarn"],
        )
        return for_settings(settings["backend"], place)

    def _kube_api(self, place: Place) -> Any:
        """The cncf-kubernetes provider's API client for the configured connection."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        from airflow_provider_primus.kubernetes.client import KubeApi

        conn_id = self.settings["kubernetes_conn_id"] or KubernetesHook.default_conn_name
        return KubeApi(KubernetesHook(conn_id=conn_id).api_client)

    @property
    def kubernetes(self) -> bool:
        return bool(self.settings["backend"] == "kubernetes")

    @property
    def yarn(self) -> bool:
        return bool(self.settings["backend"] == "yarn")

    @property
    def home(self) -> Path | None:
        home = self.settings["home"]
        return Path(home).expanduser() if home else None

    @property
    def store(self) -> JobStore:
        return self.backend.store

    @cached_property
    def kube_api(self) -> Any:
        """The cncf-kubernetes provider's API client for the configured connection."""
        backend = self.backend
        return backend.api if isinstance(backend, KubernetesJobBackend) else self._kube_api(backend.place)

    def token(self, job: str) -> str:
        """The job's control-API token: derived from the connection's secret, else read where the
        job was submitted (its token file, or its Secret on Kubernetes).

        :param job: the job's name.
        """
        return self.backend.token(job)

    def ca(self, job: str) -> bytes | None:
        """The job's CA certificate, which its master's HTTPS certificate must chain to: from its
        TLS Secret on Kubernetes, else from where it was submitted; None for a job without TLS.

        :param job: the job's name.
        """
        return self.backend.ca(job)

    def endpoint(self, record: JobRecord) -> str:
        """The job's control-API base URL: the connection's fixed one (``https`` for a job that
        serves TLS), else its master's own.

        :param record: the job as the store holds it.
        """
        if self.settings["host"]:
            port = f":{self.settings['port']}" if self.settings["port"] else ""
            scheme = "https" if stored_job(record.spec).spec.tls else "http"
            return f"{scheme}://{self.settings['host']}{port}"
        api = (record.status.get("master") or {}).get("api")
        if not api:
            raise Transient(f"job {record.name!r} has no running master yet")
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
        """Submit a PrimusJob and start its master in the background.

        :param job: the PrimusJob document: a path, or a parsed document.
        :param name: the job's name (default: the document's ``metadata.name``).
        :param labels: labels to find the job by (``find_jobs``).
        :param base: what a parsed document's relative paths are relative to (default: the working
            directory).
        :param start: start the job's master (a process, or a driver pod on Kubernetes).
        :param keep_files: keep the job's files of an earlier job of the same name (a restarted
            long-running job resumes from its checkpoints).
        """
        if isinstance(job, str | Path):
            path = Path(job)
            document, base_dir = read_document(path), path.resolve().parent
        else:
            document, base_dir = dict(job), Path(base or os.getcwd())
        record = self.backend.submit(document, base_dir, name=name, labels=labels, keep_files=keep_files)
        if start:
            self.start_master(record.name)
        return record

    def start_master(self, name: str) -> int:
        """Local: a background process (its pid), with the object-store and Kafka settings of the
        Airflow connections its data document names in its environment (its executors inherit
        them). Kubernetes: the same settings as a Secret owned by the job (``<job>-connections``,
        taken by its pods through ``envFrom``), then the job's master driver pod (0).

        :param name: the job's name.
        """
        return self.backend.start_master(name, storage_environment(self.store.get(name).spec))

    def start_master_pod(self, name: str, image: str | None = None) -> dict[str, Any]:
        """Kubernetes: create the job's master driver pod (owned by the PrimusJob); an existing one is
        returned as it is.

        :param name: the job's name.
        :param image: the master's image (default: the job's ``backend.kubernetes.image``, else ours).
        """
        backend: Any = self.backend  # a KubernetesJobBackend: the backend is kubernetes
        return dict(backend.start_master_pod(name, image))

    def cancel_job(self, name: str) -> None:
        """What cancelling a job means, for every caller (operators' and triggers' ``on_kill``): on
        Kubernetes the PrimusJob is deleted (its pods, Secret and ConfigMap are owned by it; the master,
        watching, stops the executors); locally the job is stopped, through its master or, when none
        answers, by recording the stop for the next one.

        :param name: the job's name.
        """
        self.backend.cancel(name, lambda: self.stop_job(name))

    def kill_yarn_application(self, name: str) -> list[str]:
        """YARN, when no master answers: kill the job's application (found by its tag) so its
        containers stop now rather than when the ApplicationMaster gives up on its master.

        :param name: the job's name.
        """
        return YarnJobBackend(self.backend.place, self.store).kill_applications(name, self.get_job(name))

    async def acancel_job(self, name: str) -> None:
        """``cancel_job`` for the triggerer's event loop (connection and store access run in a thread).

        :param name: the job's name.
        """
        backend = await asyncio.to_thread(lambda: self.backend)
        await backend.acancel(name, lambda: self.astop_job(name))

    def delete_job(self, name: str) -> None:
        """Remove the job from the store (on Kubernetes its owned objects follow), e.g. to submit an
        ended job afresh under the same name.

        :param name: the job's name.
        """
        self.store.delete(name)

    def validate_job(self, path: str | Path) -> dict[str, Any]:
        """Check a PrimusJob and every document it references, as submitting it would; returns the
        document as it would be stored.

        :param path: the PrimusJob document.
        """
        path = Path(path)
        backend = self.backend  # a YARN job is submitted to the local job store: its master runs here
        _, stored = load_job(backend.prepare(read_document(path)), path.resolve().parent, backend.store_kind)
        return stored

    def get_job(self, name: str) -> JobRecord | None:
        """The job as the store holds it (spec, status, labels), or None when there is none.

        :param name: the job's name.
        """
        try:
            return self.store.get(name)
        except JobNotFound:
            return None

    def find_jobs(self, labels: Mapping[str, str]) -> list[JobRecord]:
        """The jobs carrying every one of ``labels``.

        :param labels: label names and values to match.
        """
        return self.store.find(labels)

    def job_dir(self, name: str) -> Path:
        """Where the job's files are (local backend): token, logs, the trainer's work directory.

        :param name: the job's name.
        """
        return job_paths(name, self.home).root

    def wait_for_master(self, name: str, timeout_s: float = 60.0) -> JobRecord:
        """Block until the job's master serves its control API (or the job has ended).

        :param name: the job's name.
        :param timeout_s: how long to wait before raising ``PrimusError``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.store.get(name)
            if (record.status.get("master") or {}).get("api") or record.status.get("phase") in TERMINAL:
                return record
            if time.monotonic() > deadline:
                raise PrimusError(f"job {name!r}: its master did not start within {timeout_s:.0f}s")
            time.sleep(0.2)

    def request_stop_offline(self, name: str) -> None:
        """Record a stop in the job object when no master answers: the next master acts on it.

        :param name: the job's name.
        """
        self.backend.request_stop_offline(name)

    async def aget_job(self, name: str) -> JobRecord | None:
        """``get_job`` for the event loop (the store read runs in a thread).

        :param name: the job's name.
        """
        return await asyncio.to_thread(self.get_job, name)

    # --- the control API -----------------------------------------------------------------------------

    def control(self, job: str) -> ControlClient:
        """The control client for ``job``: its master's endpoint and token are looked up on every
        attempt (a restarted master listens on a new port; no master yet is a transient error).

        :param job: the job's name.
        """
        return ControlClient(
            lambda: self.endpoint(self.store.get(job)),
            lambda: self.token(job),
            timeout_s=self.timeout_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
            logger=self.log,
            ca=lambda: self.ca(job),
        )

    def _call(self, job: str, call: Callable[[ControlClient], T]) -> T:
        try:
            return call(self.control(job))
        except ControlError as exc:
            raise PrimusError(str(exc), exc.status) from exc

    async def _acall(self, job: str, call: Callable[[ControlClient], Awaitable[T]]) -> T:
        try:
            return await call(self.control(job))
        except ControlError as exc:
            raise PrimusError(str(exc), exc.status) from exc

    def get_status(self, job: str) -> dict[str, Any]:
        """The job's status as its master serves it.

        :param job: the job's name.
        """
        return self._call(job, lambda c: c.status())

    async def aget_status(self, job: str) -> dict[str, Any]:
        """``get_status`` for the event loop.

        :param job: the job's name.
        """
        return await self._acall(job, lambda c: c.astatus())

    def get_events(self, job: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """The job's events after sequence number ``after``, oldest first.

        :param job: the job's name.
        :param after: the last sequence number already seen (0: from the start).
        :param limit: the most events returned.
        """
        return self._call(job, lambda c: c.events(after, limit))

    async def aget_events(self, job: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """``get_events`` for the event loop.

        :param job: the job's name.
        :param after: the last sequence number already seen (0: from the start).
        :param limit: the most events returned.
        """
        return await self._acall(job, lambda c: c.aevents(after, limit))

    def scale(self, job: str, role: str, replicas: int) -> dict[str, Any]:
        """Ask the job for ``replicas`` executors of ``role`` (a manual override of the autoscaler).

        :param job: the job's name.
        :param role: ``data``, ``trainer`` or ``evaluator``.
        :param replicas: the number of executors wanted.
        """
        return self._call(job, lambda c: c.scale(role, replicas))

    async def ascale(self, job: str, role: str, replicas: int) -> dict[str, Any]:
        """``scale`` for the event loop.

        :param job: the job's name.
        :param role: ``data``, ``trainer`` or ``evaluator``.
        :param replicas: the number of executors wanted.
        """
        return await self._acall(job, lambda c: c.ascale(role, replicas))

    def append_window(self, job: str, start: str, end: str, source: str | None = None) -> dict[str, Any]:
        """Append a historical window to a running job (the same window twice is kept once).

        :param job: the job's name.
        :param start: ISO 8601 start of the window.
        :param end: ISO 8601 end of the window, exclusive.
        :param source: the files source the window belongs to; may be left out when the job's data
            has one files source. A name that is not a files source of the job is an error naming it.
        """
        return self._call(job, lambda c: c.append_window(start, end, source))

    async def aappend_window(
        self, job: str, start: str, end: str, source: str | None = None
    ) -> dict[str, Any]:
        """``append_window`` for the event loop.

        :param job: the job's name.
        :param start: ISO 8601 start of the window.
        :param end: ISO 8601 end of the window, exclusive.
        :param source: the files source the window belongs to (see ``append_window``).
        """
        return await self._acall(job, lambda c: c.aappend_window(start, end, source))

    def savepoint(self, job: str, savepoint_id: str | None = None) -> dict[str, Any]:
        """Ask the job for a savepoint (a checkpoint kept until deleted).

        :param job: the job's name.
        :param savepoint_id: the savepoint's name (default: one made up by the master).
        """
        return self._call(job, lambda c: c.savepoint(savepoint_id))

    async def asavepoint(self, job: str, savepoint_id: str | None = None) -> dict[str, Any]:
        """``savepoint`` for the event loop.

        :param job: the job's name.
        :param savepoint_id: the savepoint's name (default: one made up by the master).
        """
        return await self._acall(job, lambda c: c.asavepoint(savepoint_id))

    def stop_job(self, job: str) -> dict[str, Any]:
        """Ask the job's master to stop the job (it ends ``Stopped``).

        :param job: the job's name.
        """
        return self._call(job, lambda c: c.stop())

    async def astop_job(self, job: str) -> dict[str, Any]:
        """``stop_job`` for the event loop.

        :param job: the job's name.
        """
        return await self._acall(job, lambda c: c.astop())

    def test_connection(self) -> tuple[bool, str]:
        """The store must open; a configured fixed endpoint must answer."""
        where = self.backend.where
        try:
            jobs = self.store.find()
        except Exception as exc:
            return False, f"cannot open the job store at {where}: {exc}"
        if self.settings["host"]:
            port = f":{self.settings['port']}" if self.settings["port"] else ""
            try:  # without a job there is no token: any answer, a 401 too, shows the API is there
                ControlClient(f"http://{self.settings['host']}{port}", "", self.timeout_s).status()
            except ControlError as exc:
                if exc.status is None:
                    return False, f"control API not reachable: {exc}"
        return True, f"job store {where}: {len(jobs)} job(s)"
