"""Planning a table source (Iceberg, Delta), whichever it is, under its ``missing`` policy.

The planner hands a table source here as one job: the table's metadata says which files hold the
range, so there is nothing to list per window. ``wait`` loads the table again until every window
has a file (a writer may commit the hour's snapshot late), as a files source polls its folders.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

from airflow_provider_primus.data.cache import PlanCache, fingerprint
from airflow_provider_primus.data.errors import PlanCancelled
from airflow_provider_primus.data.sources.delta import plan_delta
from airflow_provider_primus.data.sources.files import partition_times
from airflow_provider_primus.data.sources.iceberg import TablePlan, plan_table


def table_fingerprint(source: Any) -> str:
    """What names one table's plans in the cache (another table, or another window size, is not it)."""
    if source.type == "delta":
        endpoint = source.storage.endpoint if source.storage is not None else ""
        return fingerprint("delta", source.uri, str(endpoint), str(source.granularity))
    where = source.catalog.uri or source.catalog.warehouse or source.catalog.connection or ""
    return fingerprint("iceberg", source.catalog.type, where, source.table, str(source.granularity))


def plan_table_source(
    source: Any,
    start: datetime,
    end: datetime,
    *,
    cache: PlanCache | None = None,
    workers: int = 8,
    cancel: threading.Event | None = None,
    table: Any = None,
) -> TablePlan:
    """The table's files in [start, end) by window; with policy ``wait``, once every window has one
    or the timeout passed (``fail`` and ``skip`` are applied by the planner to the windows left empty)."""
    cancel = cancel or threading.Event()
    policy, timeout_s = source.missing.policy, source.missing.timeout_s
    deadline = time.monotonic() + timeout_s if timeout_s is not None else float("inf")
    poll = min(30.0, max(0.5, timeout_s / 20)) if timeout_s is not None else 10.0
    trips = 0
    while True:
        if source.type == "delta":
            result = plan_delta(source, start, end, states=cache, fp=table_fingerprint(source))
        else:
            result = plan_table(
                source, start, end, manifests=cache, workers=workers, cancelled=cancel.is_set, table=table
            )
        trips += result.round_trips
        result.round_trips = trips
        empty = [t for t in partition_times(start, end, source.granularity) if t not in result.windows]
        remaining = deadline - time.monotonic()
        if policy != "wait" or not empty or remaining <= 0:
            return result
        if cancel.wait(min(poll, remaining)):
            raise PlanCancelled(f"planning cancelled while waiting for {source.where()}")


__all__ = ["plan_table_source", "table_fingerprint"]
