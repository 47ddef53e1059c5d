"""A job on YARN once submitted: its master runs beside the local job store (this machine) and drives
the job's YARN application through the backend built here, after the master has read its job."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_provider_primus.contracts.job import YarnBackend as YarnSettings
from airflow_provider_primus.master.jobs import job_documents
from airflow_provider_primus.yarn.application import YarnSession
from airflow_provider_primus.yarn.backend import YarnBackend

if TYPE_CHECKING:
    from airflow_provider_primus.master.master import Master


def backend_factory(**overrides: object) -> Callable[[Master], YarnBackend]:
    """Builds the master's backend: finds the job's running application (a restarted master) or
    submits one. ``overrides`` are YarnBackend keyword arguments (tests shorten the waits)."""

    def make(master: Master) -> YarnBackend:
        settings = master.job.spec.backend.yarn or YarnSettings()
        stored = master.store.get(master.name).spec
        session = YarnSession(master.name, master.token, settings, job_documents(stored), ca=master.ca)
        session.ensure_application()
        return YarnBackend(
            session,
            on_event=master.backend_event,
            on_resize_refused=settings.on_resize_refused,
            python=settings.python,
            job_phase=lambda: str(master.phase),
            # A configuration directory the job names is valid where its containers run (hdfs://
            # sources); otherwise the NodeManagers' own HADOOP_CONF_DIR applies.
            env={"HADOOP_CONF_DIR": settings.conf_dir} if settings.conf_dir else None,
            **overrides,  # type: ignore[arg-type]
        )

    return make
