"""What the master observes of its executors each pass: liveness from the backend, usage and progress.

Data executors' figures come from the data service (rows served, time blocked on credit and on
storage); trainers push theirs with their reports (rows trained, time waiting for data and
computing, their metrics, the savepoints they covered, their job events). Everything becomes one
``Sample`` per executor per pass for the autoscaler and the status; an executor that ended is handed
back to the loop to settle.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
from airflow_provider_primus.master.executors import Executor
from airflow_provider_primus.resources.backend import Backend, Observation
from airflow_provider_primus.resources.telemetry import Sample

__all__ = ["Telemetry", "usage"]

SAMPLES_KEPT = 4000


class Telemetry:
    def __init__(self, trainer_report: Mapping[str, Any]) -> None:
        self.samples: deque[Sample] = deque(maxlen=SAMPLES_KEPT)
        # The last trainer report survives the trainer's end: the job's final figures.
        self.trainer_report: dict[str, Any] = dict(trainer_report)

    def observe(
        self,
        live: list[Executor],
        backend: Backend,
        server: DispatcherServer,
        on_report: Callable[[Executor, Mapping[str, Any]], None],
    ) -> list[tuple[Executor, Observation]]:
        """Sample every live executor; returns the ones that ended. ``on_report`` gets each trainer's
        report, also one that has just exited: its last report (sent as it closed) holds its final
        figures and the savepoints its final checkpoint covered."""
        observed = backend.observe([e.handle for e in live])
        service = server.dispatcher.executor_metrics()
        reports = server.take_reports()
        now = time.monotonic()
        ended = []
        for ex in live:
            obs = observed.get(ex.name)
            if obs is None:
                continue
            metrics: Mapping[str, Any] = {}
            if ex.role == "trainer":
                _, metrics = reports.get(ex.service_name, (0.0, {}))
                if metrics and ex.handle.index == 0:  # the group's leader speaks for the job
                    # Bookkeeping (savepoint lists, events) is not figures.
                    self.trainer_report = {
                        k: v for k, v in metrics.items() if k not in ("savepoints_done", "events")
                    }
                on_report(ex, metrics)
            if not obs.alive:
                ended.append((ex, obs))
                continue
            if ex.role == "trainer":
                pushed = metrics
                rows, wait, busy = (
                    metrics.get("rows", 0),
                    metrics.get("wait_s", 0.0),
                    metrics.get("busy_s", 0.0),
                )
                ex.reason = None
            else:
                pushed = service.get(ex.service_name) or {}
                rows, wait, busy = (
                    pushed.get("rows", 0),
                    pushed.get("blocked_credit_s", 0.0),
                    pushed.get("blocked_storage_s", 0.0),
                )
            cpu_s, rss, known = _usage(obs, pushed)
            self.samples.append(
                Sample(
                    t=now,
                    executor=ex.name,
                    role=ex.role,
                    cpu=ex.handle.allotment.cpu,
                    memory=ex.handle.allotment.memory,
                    cpu_s=cpu_s,
                    rss=rss,
                    read_bytes=obs.read_bytes,
                    write_bytes=obs.write_bytes,
                    rows=int(rows),
                    wait_s=float(wait),
                    busy_s=float(busy),
                    usage_known=known,
                )
            )
        return ended

    def forget(self, name: str) -> None:
        """Counters restart with a new incarnation: mixing them with the old ones would read as
        negative rates."""
        kept = [s for s in self.samples if s.executor != name]
        self.samples.clear()
        self.samples.extend(kept)

    def latest(self) -> dict[str, list[Sample]]:
        """Each executor's last two samples, in one pass."""
        latest: dict[str, list[Sample]] = {}
        for s in self.samples:
            pair = latest.setdefault(s.executor, [])
            pair.append(s)
            if len(pair) > 2:
                del pair[0]
        return latest


def _usage(obs: Observation, pushed: Mapping[str, Any]) -> tuple[float, int, bool]:
    """CPU seconds, memory and whether they are known: what the backend sees of the process (the
    local backend reads /proc), else what the executor measured of itself and pushed (a pod: the
    master cannot see inside it)."""
    if obs.cpu_s > 0 or obs.rss > 0:
        return obs.cpu_s, obs.rss, True
    if "rss" in pushed and "cpu_s" in pushed:
        return float(pushed["cpu_s"]), int(pushed["rss"]), True
    return 0.0, 0, False


def usage(latest: list[Sample]) -> dict[str, Any] | None:
    """An executor's recent usage from its last two samples (None until it has two)."""
    if len(latest) != 2:
        return None
    a, b = latest
    dt = max(1e-6, b.t - a.t)
    return {
        "cpu_util": round((b.cpu_s - a.cpu_s) / dt / max(1e-6, b.cpu), 3),
        "rss": b.rss,
        "mem_util": round(b.rss / max(1, b.memory), 3),
        "rows_per_s": round((b.rows - a.rows) / dt, 1),
        "read_bytes": b.read_bytes,
        "write_bytes": b.write_bytes,
        "wait_s": round(b.wait_s, 3),
        "busy_s": round(b.busy_s, 3),
    }
