"""Jobs on YARN: the master runs on this machine beside the local job store and drives the job's YARN
application, whose containers are the executors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_primus.backends.local import LocalJobBackend
from airflow_provider_primus.master.store import JobNotFound, JobRecord

if TYPE_CHECKING:
    from airflow_provider_primus.master.master import Master


class YarnJobBackend(LocalJobBackend):
    """The local job store and job files, a YARN application per job. The place's ``yarn`` settings
    fill a document's ``backend.yarn`` where it is silent (the document's own word wins)."""

    kind = "yarn"
    store_kind = "local"
    # The master runs on a worker, which may be gone: a reattaching task starts one (a second master
    # refuses to run while the first lives); it finds the application by its tags and re-adopts the
    # containers.
    restart_master_on_reattach = True

    def prepare(self, document: Mapping[str, Any]) -> dict[str, Any]:
        from airflow_provider_primus.yarn.application import with_yarn_backend

        return with_yarn_backend(document, self.place.yarn)

    def master(self, name: str, **kwargs: Any) -> Master:
        from airflow_provider_primus.master.master import Master
        from airflow_provider_primus.yarn.submission import backend_factory

        return Master(name, self.store, backend_factory=backend_factory(), **kwargs)

    def after_offline_stop(self, name: str) -> None:
        """No master answers: kill the application now rather than when its ApplicationMaster gives
        up on the master."""
        try:
            record: JobRecord | None = self.store.get(name)
        except JobNotFound:
            record = None
        self.kill_applications(name, record)

    def kill_applications(self, name: str, record: JobRecord | None) -> list[str]:
        """Kill the job's unfinished applications (found by its tag), with the place's settings
        under those ``record`` stores; their ids."""
        from airflow_provider_primus.yarn.application import kill_job_applications

        stored = ((record.spec.get("spec") or {}).get("backend") or {}).get("yarn") if record else None
        return kill_job_applications(name, {**self.place.yarn, **(stored or {})})
