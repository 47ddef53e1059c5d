"""Where a job lives: its store, its master, its credentials and how it is cancelled, for one backend
kind. The CLI and the Airflow hook ask an object of this contract and never branch on the kind; a new
backend is one new subclass (registered by its ``kind``) beside its executor-level backend
(``resources/backend.py``)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_primus.credentials import derive_token
from airflow_provider_primus.master.client import ControlError
from airflow_provider_primus.master.jobs import start_master, submit_document
from airflow_provider_primus.master.store import JobRecord, JobStore, modify

if TYPE_CHECKING:
    from airflow_provider_primus.kubernetes.client import KubeApi
    from airflow_provider_primus.master.master import Master

# backend.type -> the class that owns jobs of that kind (filled as the subclasses are defined).
KINDS: dict[str, type[JobBackend]] = {}


@dataclass(frozen=True)
class Place:
    """Everything a caller knows about where its jobs are; each backend kind reads its part.

    ``home``: PRIMUS_HOME of the local job store and the job files (None: ``$PRIMUS_HOME``);
    ``store_path``: an explicit local job store (None: ``home``'s); ``namespace``, ``kubeconfig``,
    ``context``: the cluster of a Kubernetes store; ``kube_api``: how to build its API client when the
    caller has its own way (the Airflow hook's cncf-kubernetes connection), else from the kubeconfig;
    ``secret``: what each job's token is derived from (else the token is read where the job was
    submitted); ``yarn``: YARN settings that fill a job document's ``backend.yarn`` where it is
    silent; ``local_credentials_first``: a cluster job's token file and CA on this machine (the CLI
    submitted it here) are read before its Secrets."""

    home: Path | None = None
    store_path: Path | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    kube_api: Callable[[Place], KubeApi] | None = None
    secret: str | None = None
    yarn: Mapping[str, Any] = field(default_factory=dict)
    local_credentials_first: bool = False


def stored_kind(record: JobRecord) -> str:
    """The backend kind a stored job names (``local`` when it names none)."""
    spec = record.spec.get("spec") or {}
    backend = spec.get("backend") if isinstance(spec, Mapping) else None
    kind = backend.get("type") if isinstance(backend, Mapping) else None
    return str(kind or "local")


class JobBackend(ABC):
    """Jobs of one backend kind at one ``Place``.

    ``kind``: the ``backend.type`` it runs; ``store_kind``: the store its jobs are submitted to (a
    YARN job's master runs beside the local job store); ``restart_master_on_reattach``: whether a
    task reattaching to a running job starts a master (one on a worker, which may be gone with it)."""

    kind: ClassVar[str]
    store_kind: ClassVar[str]
    restart_master_on_reattach: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            KINDS[cls.kind] = cls

    def __init__(self, place: Place | None = None, store: JobStore | None = None) -> None:
        self.place = place or Place()
        self._store = store

    # --- the job store ---------------------------------------------------------------------------

    @property
    def store(self) -> JobStore:
        """The job store, opened on first use and kept."""
        if self._store is None:
            self._store = self.open_store()
        return self._store

    @abstractmethod
    def open_store(self) -> JobStore:
        """A new handle on this place's job store."""

    @property
    @abstractmethod
    def where(self) -> str:
        """The store in words, for messages."""

    def for_job(self, name: str) -> JobBackend:
        """The backend the stored job runs on: one store may hold jobs of several kinds (the local
        store holds local and YARN jobs), which share this object's place and store."""
        cls = KINDS.get(stored_kind(self.store.get(name)))
        if cls is None or cls is type(self) or cls.store_kind != self.store_kind:
            return self
        return cls(self.place, self.store)

    # --- submitting --------------------------------------------------------------------------------

    def prepare(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The job document as this backend submits it (settings of the place filled in)."""
        return dict(document)

    def submit(
        self,
        document: Mapping[str, Any],
        base: Path,
        *,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        keep_files: bool = False,
    ) -> JobRecord:
        """Store the job (its token derived from the place's secret, when there is one) and its
        files; the master is started apart (``start_master``)."""
        document = self.prepare(document)
        job_name = name or str(document.get("metadata", {}).get("name", ""))
        secret = self.place.secret
        return submit_document(
            document,
            base,
            name=name,
            store=self.store,
            labels=labels,
            home=self.place.home,
            token=derive_token(secret, job_name) if secret else None,
            keep_files=keep_files,
        )

    # --- the master --------------------------------------------------------------------------------

    def start_master(self, name: str, env: Mapping[str, str] | None = None) -> int:
        """Start the job's master where it runs, with ``env`` (connection settings resolved by the
        caller) in its environment; the pid of a process started here, else 0."""
        return self.spawn_master(name, env)

    def spawn_master(self, name: str, env: Mapping[str, str] | None = None) -> int:
        """A background ``primus master`` on this machine, pointed at this place's store; its pid."""
        return start_master(name, home=self.place.home, extra_args=self.master_args(), env=env)

    @abstractmethod
    def master_args(self) -> list[str]:
        """The ``primus master`` options that open this place's store."""

    @abstractmethod
    def master(self, name: str, **kwargs: Any) -> Master:
        """The job's master, to run in this process (``kwargs``: the master's own options)."""

    # --- credentials -------------------------------------------------------------------------------

    def token(self, job: str) -> str:
        """The job's control-API token: derived from the place's secret, else read where the job
        was submitted."""
        secret = self.place.secret
        return derive_token(secret, job) if secret else self.stored_token(job)

    @abstractmethod
    def stored_token(self, job: str) -> str:
        """The token kept where the job was submitted."""

    @abstractmethod
    def ca(self, job: str) -> bytes | None:
        """The job's CA certificate its master's HTTPS certificate chains to; None without TLS."""

    def credentials(self, job: str) -> tuple[str, bytes | None]:
        """The job's token and CA, read together as a client that did not derive them finds them."""
        return self.stored_token(job), self.ca(job)

    # --- cancelling --------------------------------------------------------------------------------

    def cancel(self, name: str, stop: Callable[[], object]) -> None:
        """What cancelling a job means: ``stop`` asks its master; when none answers, the stop is
        recorded in the job object for the next master (``after_offline_stop`` follows)."""
        try:
            stop()
        except ControlError:
            self.request_stop_offline(name)
            self.after_offline_stop(name)

    async def acancel(self, name: str, stop: Callable[[], Awaitable[object]]) -> None:
        """``cancel`` for an event loop: store access runs in a thread."""
        try:
            await stop()
        except ControlError:
            await asyncio.to_thread(self.request_stop_offline, name)
            await asyncio.to_thread(self.after_offline_stop, name)

    def request_stop_offline(self, name: str) -> None:
        """Record a stop in the job object when no master answers: the next master acts on it."""
        modify(self.store, name, lambda r: {**r.desired, "stop": True})

    def after_offline_stop(self, name: str) -> None:
        """What else a stop that no master took needs (nothing, unless the backend says so)."""
        return None
