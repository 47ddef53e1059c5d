"""The long-running streaming trainer of a model.

One task, ``trainer``, makes sure the model's mixed-training job (a PrimusJob with
``spec.follow: true``) is running — it starts it once and reattaches on a retry or after a lost
worker, never a duplicate — and then waits, deferred, for as long as the job lives, logging its
freshness, AUC and throughput. The daily backfill DAG appends historical windows to this job.

Params: ``job`` — the PrimusJob document; ``model`` — the job's name (default: the document's
``metadata.name``). The Primus connection is ``primus_default`` (optional: the local
backend's defaults apply without it).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import Param, dag

from airflow_provider_primus.operators.job import PrimusStreamingTrainerOperator
from airflow_provider_primus.paths import primus_home

DEFAULT_JOB = os.environ.get("PRIMUS_DEMO_JOB", str(primus_home() / "demo" / "streaming-job.yaml"))


@dag(
    dag_id="primus_streaming_trainer",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["primus"],
    doc_md=__doc__,
    params={
        "job": Param(DEFAULT_JOB, type="string", description="the streaming PrimusJob document"),
        "model": Param("", type="string", description="job name (default: the document's metadata.name)"),
    },
)
def primus_streaming_trainer() -> None:
    PrimusStreamingTrainerOperator(
        task_id="trainer",
        job="{{ params.job }}",
        model="{{ params.model }}",
        report_every_s=60.0,
        poll_interval=5.0,
    )


primus_streaming_trainer()
