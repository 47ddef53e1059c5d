"""``PrimusPlanDataOperator``: plan the DAG run's data interval into a task graph.

The graph itself can hold hundreds of thousands of tasks, so it is written as Parquet next to the
plan cache and only a summary travels as XCom (partitions, tasks, rows, missing partitions, the
graph's path). The plan cache makes a daily run list only its new day; a retried task re-plans the
same window to the same task IDs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_primus.paths import primus_home


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part)[:120]


class PrimusPlanDataOperator(BaseOperator):
    """Plan [start, end) of a PrimusData document into a task graph (Parquet); returns (XCom) its
    summary: partitions, tasks, rows, missing partitions and the graph's path.

    :param spec_path: the PrimusData document (templated).
    :param start: ISO 8601 start of the window (templated; default: the run's data interval start).
    :param end: ISO 8601 end, exclusive (templated; default: the run's data interval end).
    :param cache_dir: where the plan cache and graphs live (templated; default: ``$PRIMUS_HOME``).
    :param workers: listing threads (default: the planner's).
    :param fail_on_missing: fail the task when a partition of the window is missing.
    """

    template_fields: Sequence[str] = ("spec_path", "start", "end", "cache_dir")
    ui_color = "#e3f1d4"

    def __init__(
        self,
        *,
        spec_path: str,
        start: str = "{{ data_interval_start.isoformat() }}",
        end: str = "{{ data_interval_end.isoformat() }}",
        cache_dir: str | None = None,
        workers: int | None = None,
        fail_on_missing: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.start = start
        self.end = end
        self.cache_dir = cache_dir
        self.workers = workers
        self.fail_on_missing = fail_on_missing

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_provider_primus.contracts import load_data_spec
        from airflow_provider_primus.contracts.data import Window
        from airflow_provider_primus.data.cache import PlanCache
        from airflow_provider_primus.data.planner import PlanOptions, plan
        from airflow_provider_primus.hooks.kafka import kafka_connections_in_environment
        from airflow_provider_primus.hooks.storage import connection_ids, resolve_connections

        spec = load_data_spec(self.spec_path)
        window = Window.model_validate({"start": self.start, "end": self.end})
        root = Path(self.cache_dir).expanduser() if self.cache_dir else primus_home()
        root.mkdir(parents=True, exist_ok=True)
        # Object-store sources may name Airflow connections: resolved here, handed to the planner in
        # memory only (never into the graph, XCom or the log).
        credentials = resolve_connections(connection_ids(spec))
        cache = PlanCache(root / "plan-cache.sqlite")
        try:
            options = PlanOptions(workers=self.workers, cache=cache, credentials=credentials)
            # Kafka sources' connections: in this process's environment while planning their offsets.
            with kafka_connections_in_environment(spec):
                graph = plan(spec, window.start, window.end, options)
        finally:
            cache.close()
        dag_id = context["dag"].dag_id if "dag" in context else "adhoc"
        run_id = context.get("run_id") or window.start.isoformat()
        out = root / "graphs" / _safe(dag_id) / f"{_safe(str(run_id))}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        graph.write(out)
        summary: dict[str, Any] = graph.summary()
        summary.update(start=_iso(window.start), end=_iso(window.end), graph=str(out))
        missing = summary.get("missing") or []
        self.log.info(
            "planned %s..%s: %s tasks, %s rows, %s missing partitions; graph at %s",
            summary["start"],
            summary["end"],
            summary.get("tasks"),
            summary.get("rows"),
            len(missing) if isinstance(missing, list) else missing,
            out,
        )
        if self.fail_on_missing and missing:
            raise ValueError(f"missing partitions: {missing}")
        return summary
