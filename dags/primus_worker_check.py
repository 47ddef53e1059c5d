"""Can this worker run Primus jobs? Trigger it on a new or changed worker before the real DAGs.

One ``PrimusDoctorOperator`` task runs the checks of ``primus doctor`` on the worker that picks it up
(the Python version, Java, the Kafka distribution's jars in the shared cache; Maven and the
Kubernetes binaries as optional ones) and fails naming what is missing and how to fix it; its XCom
maps each check to whether it passed. No schedule: a worker's setup changes when someone changes it.
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
