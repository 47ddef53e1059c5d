"""Jobs whose master and executors run on this machine, in the local job store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_primus.backends.base import JobBackend
from airflow_provider_primus.master.jobs import read_job_ca, read_token
from airflow_provider_primus.master.store import JobStore, SqliteJobStore

if TYPE_CHECKING:
    from airflow_provider_primus.master.master import Master


class LocalJobBackend(JobBackend):
    """The local job store (``store_path``, else ``home``'s, else ``$PRIMUS_HOME``'s); token and CA
    in the job's files under ``home``."""

    kind = "local"
    store_kind = "local"

    def open_store(self) -> JobStore:
        place = self.place
        return SqliteJobStore(place.store_path or (place.home / "jobs.sqlite" if place.home else None))

    @property
    def store_path(self) -> Path | None:
        path = getattr(self.store, "path", None)
        return path if isinstance(path, Path) else None

    @property
    def where(self) -> str:
        return str(self.store_path)

    def master_args(self) -> list[str]:
        return ["--store", str(self.store_path)] if self.store_path is not None else []

    def master(self, name: str, **kwargs: Any) -> Master:
        from airflow_provider_primus.master.master import Master

        return Master(name, self.store, **kwargs)

    def stored_token(self, job: str) -> str:
        return read_token(job, self.place.home)

    def ca(self, job: str) -> bytes | None:
        return read_job_ca(job, self.place.home)
