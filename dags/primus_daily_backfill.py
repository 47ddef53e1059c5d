"""Daily historical windows joined to the streaming trainer.

Each run covers one day — a real data interval (``CronDataIntervalTimetable``), so
``airflow backfill create --dag-id primus_daily_backfill --from-date … --to-date …`` replays a range
of days, one window each:

1. ``wait_for_partitions`` — the day's partitions of the files source are complete (success markers);
2. ``plan_window`` — plan the day into a task graph (summary as XCom; the graph stays on disk);
3. ``append_window`` — join the window of that source to the running streaming job (which may read
   several files sources: the window names the one it belongs to) and wait, deferred, until every
   task of it is consumed (re-running it for the same day is a no-op);
4. ``record_metrics`` — log and return the window's counts and the trainer's metrics.

Params: ``data`` — the PrimusData document; ``source`` — its files source; ``job`` — the streaming
job's name. The Primus connection is ``primus_default`` (optional: the local
backend's defaults apply without it).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_primus.operators.job import PrimusAppendWindowOperator
from airflow_provider_primus.operators.plan import PrimusPlanDataOperator
from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.sensors.partitions import DataPartitionSensor

DEFAULT_DATA = os.environ.get("PRIMUS_DEMO_DATA", str(primus_home() / "demo" / "world" / "primus-data.yaml"))


@dag(
    dag_id="primus_daily_backfill",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    tags=["primus"],
    doc_md=__doc__,
    params={
        "data": Param(DEFAULT_DATA, type="string", description="the PrimusData document"),
        "source": Param("history", type="string", description="its files source the day's window is for"),
        "job": Param("primus-streaming", type="string", description="the streaming job's name"),
    },
)
def primus_daily_backfill() -> None:
    wait = DataPartitionSensor(
        task_id="wait_for_partitions",
        spec_path="{{ params.data }}",
        source="{{ params.source }}",
        mode="reschedule",
        poke_interval=60,
        timeout=6 * 3600,
    )
    planned = PrimusPlanDataOperator(task_id="plan_window", spec_path="{{ params.data }}")
    appended = PrimusAppendWindowOperator(
        task_id="append_window",
        job_name="{{ params.job }}",
        source="{{ params.source }}",
        poll_interval=5.0,
    )

    @task
    def record_metrics(plan: dict[str, Any], append: dict[str, Any]) -> dict[str, Any]:
        window = append.get("window") or {}
        metrics = {
            "start": plan.get("start"),
            "end": plan.get("end"),
            "tasks": plan.get("tasks"),
            "rows": plan.get("rows"),
            "missing": len(plan.get("missing") or []),
            "tasks_consumed": window.get("tasks_done"),
            "consumed": window.get("consumed"),
        }
        print(f"window {metrics['start']}..{metrics['end']}: {metrics}")
        return metrics

    wait >> planned >> appended
    record_metrics(planned.output, appended.output)


primus_daily_backfill()
