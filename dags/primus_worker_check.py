"""Placeholder DAG: proves the provider loads in Airflow and that a worker can run Primus jobs.

The Airflow-surface issue replaces it with the reference DAGs (daily windows joined to a streaming
trainer).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_primus.operators.doctor import PrimusDoctorOperator


@dag(
    dag_id="primus_worker_check",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["primus"],
    doc_md=__doc__,
)
def primus_worker_check() -> None:
    PrimusDoctorOperator(task_id="doctor")


primus_worker_check()
