"""Executor command lines, from the typed options each executor's own module defines.

The master never spells a flag: a data executor's options are ``DataExecutorOptions`` (owned by the
data service), a trainer's are ``TrainerExecutorOptions`` (owned by training); this module only fills
them in from the job's spec and where the master's services listen.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from airflow_provider_primus.contracts.job import PrimusJob
from airflow_provider_primus.data.service.options import DataExecutorOptions
from airflow_provider_primus.master.jobs import JobPaths
from airflow_provider_primus.process import primus_command
from airflow_provider_primus.training.options import TrainerExecutorOptions

__all__ = ["executor_command"]


def executor_command(
    job: PrimusJob,
    paths: JobPaths,
    dispatcher: str,
    role: str,
    service_name: str,
    *,
    group: Mapping[str, int] | None = None,
) -> list[str]:
    """The command that starts ``role``'s executor named ``service_name`` towards the dispatcher;
    ``group``: a trainer's ``trainers``, ``rank`` and ``generation`` (master/trainers.py)."""
    spec, ds = job.spec, job.spec.data_service
    if role == "data":
        data = DataExecutorOptions(
            spec=Path(spec.data),
            dispatcher=dispatcher,
            name=service_name,
            host=spec.control.host,
            window=ds.window,
            batch_rows=ds.batch_rows,
            passthrough=tuple(spec.passthrough),
            master_grace_s=ds.master_grace_s,
        )
        return primus_command(*data.argv())
    trainer = TrainerExecutorOptions(
        spec=Path(spec.data),
        workdir=paths.workdir,
        training=Path(spec.training) if spec.training else None,
        follow=spec.follow,
        open_graph=spec.follow,  # a following job's master may still append windows
        max_steps=spec.max_steps or None,
        passthrough=tuple(spec.passthrough),
        trace=paths.root / "trace.jsonl" if spec.passthrough else None,
        json=True,
        dispatcher=dispatcher,
        executor_name=service_name,
        grace_s=ds.master_grace_s,
        host=spec.control.host,  # where the group's leader listens for the others
        **(group or {}),
    )
    return primus_command(*trainer.argv())
