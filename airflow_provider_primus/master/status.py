"""The job's status assembled from the master's collaborators at one instant.

Each collaborator keeps its own part (scaling its replicas and decisions, the data service its
progress and windows, the savepoints their answers...); this is the one place they meet as the
``JobStatus`` model every reader shares, together with where the master and the data service listen.
Writing it (only what changed, with a heartbeat) is publish.py's.
"""

from __future__ import annotations

from typing import Any, Protocol

import psutil

from airflow_provider_primus.contracts.status import JobStatus, Phase
from airflow_provider_primus.master.api import ApiServer
from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import Executors
from airflow_provider_primus.master.savepoints import Savepoints
from airflow_provider_primus.master.scaling import Scaling
from airflow_provider_primus.master.telemetry import Telemetry, usage
from airflow_provider_primus.master.trainers import TrainerGroup

__all__ = ["Parts", "job_status"]


class Parts(Protocol):
    """What a status is assembled from: the master's own state and its collaborators."""

    name: str
    phase: Phase
    message: str
    suspended: bool
    api: ApiServer
    scaling: Scaling
    executors: Executors
    trainers: TrainerGroup
    telemetry: Telemetry
    jobdata: JobData
    savepoints: Savepoints
    applied: dict[str, Any]
    events: EventLog


def job_status(m: Parts) -> JobStatus:
    """The job's status as the master's collaborators see it now."""
    proc = psutil.Process()
    recent = m.telemetry.latest()
    views = {}
    for n, e in sorted(m.executors.all.items()):
        views[n] = {**e.to_dict(), "telemetry": usage(recent.get(n, []))}
    scaling, jobdata = m.scaling, m.jobdata
    return JobStatus.model_validate(
        {
            "phase": m.phase,
            "message": m.message,
            "suspended": m.suspended,
            "master": {"pid": proc.pid, "pid_created": proc.create_time(), **master_endpoint(m)},
            "replicas": scaling.replicas,
            # The scale subresource's label selector: the data executors.
            "selector": f"primus.dev/job={m.name},primus.dev/role=data",
            "roles": scaling.roles_summary(),
            "executors": views,
            "progress": jobdata.progress(m.telemetry.trainer_report),
            "windows": jobdata.window_views(),
            "savepoints": m.savepoints.state,
            "decisions": [d.to_dict() for d in scaling.decisions],
            "applied": m.applied,
            "events": m.events.tail(),
            "data_progress": jobdata.dispatcher.progress(),
        }
    )


def master_endpoint(m: Parts) -> dict[str, Any]:
    """Where clients reach the master and executors the data service (a restarted master takes the
    same ports), and where the trainer group of this generation meets (its leader's store)."""
    server, generation = m.jobdata.server, m.trainers.generation
    assert server is not None
    return {
        "api": m.api.url,
        "api_port": m.api.port,
        "metrics": f"{m.api.url}/metrics",
        **m.jobdata.endpoint(),
        "rendezvous": server.rendezvous.get(generation),
        "trainer_generation": generation,
    }
