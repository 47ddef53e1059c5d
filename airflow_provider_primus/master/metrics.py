"""The job's Prometheus metrics, served by its master at ``/metrics``: one scrape target per job.

Everything is read at scrape time from what the master already keeps — the job status it writes
each pass (executors, allotments, telemetry, progress, the trainer's figures that arrive with its
heartbeat) and the count of events by type — so a metric can never disagree with ``primus status``
and nothing is double-booked. Names follow Prometheus conventions: a ``primus_`` prefix, base units
in the name (``_seconds``, ``_bytes``, ``_cores``), ``_total`` for counters (which restart from the
store's counts when a master restarts, so a restart is not a reset). Every metric carries ``job``.
docs/metrics.md lists them with their meaning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from airflow_provider_primus.contracts.status import EventType, ExecutorState, Phase

__all__ = ["CONTENT_TYPE", "JobMetrics", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


class JobMetrics(Collector):
    """``status()``: the job's status as the master last wrote it; ``counts()``: events by type and,
    for scaling decisions, by ``(type, action)``."""

    def __init__(
        self,
        job: str,
        status: Callable[[], Mapping[str, Any]],
        counts: Callable[[], Mapping[tuple[str, str | None], int]],
        now: Callable[[], float] = time.time,
    ) -> None:
        self.job, self._status, self._counts, self._now = job, status, counts, now

    def _gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=("job", *labels))

    def collect(self) -> Iterator[Metric]:
        status = dict(self._status())
        yield from self._phase(status)
        yield from self._executors(status.get("executors") or {})
        yield from self._progress(status.get("progress") or {})
        yield from self._events(self._counts())

    def _phase(self, status: Mapping[str, Any]) -> Iterator[Metric]:
        phase = self._gauge("primus_job_phase", "1 for the job's current phase, 0 for the others", ("phase",))
        for p in Phase:
            phase.add_metric([self.job, p.value], 1.0 if status.get("phase") == p.value else 0.0)
        yield phase

    def _executors(self, executors: Mapping[str, Any]) -> Iterator[Metric]:
        j = self.job
        count = self._gauge("primus_executors", "Executors per role and state", ("role", "state"))
        cpu = self._gauge("primus_executor_cpu_allotted_cores", "CPU allotted", ("role", "executor"))
        mem = self._gauge("primus_executor_memory_allotted_bytes", "Memory limit", ("role", "executor"))
        used = self._gauge(
            "primus_executor_cpu_used_cores", "CPU used over the last two samples", ("role", "executor")
        )
        rss = self._gauge("primus_executor_memory_used_bytes", "Resident memory now", ("role", "executor"))
        restarts = CounterMetricFamily(
            "primus_executor_restarts", "Restarts of an executor slot", labels=("job", "role", "executor")
        )
        counts: dict[tuple[str, str], int] = {}
        for name, ex in sorted(executors.items()):
            handle = ex.get("handle") or {}
            role, state = str(handle.get("role", "")), str(ex.get("state", ""))
            counts[(role, state)] = counts.get((role, state), 0) + 1
            if state != ExecutorState.RUNNING.value:
                continue
            allot = handle.get("allotment") or {}
            labels = [j, role, name]
            cpu.add_metric(labels, float(allot.get("cpu", 0.0)))
            mem.add_metric(labels, float(allot.get("memory", 0)))
            restarts.add_metric(labels, float(ex.get("restarts", 0)))
            usage = ex.get("telemetry") or {}
            if (util := _number(usage.get("cpu_util"))) is not None:
                used.add_metric(labels, util * float(allot.get("cpu", 0.0)))
            if (value := _number(usage.get("rss"))) is not None:
                rss.add_metric(labels, value)
        for role in sorted({r for r, _ in counts} | {"data", "trainer"}):
            for st in ExecutorState:
                count.add_metric([j, role, st.value], float(counts.get((role, st.value), 0)))
        yield from (count, cpu, mem, used, rss, restarts)

    def _progress(self, progress: Mapping[str, Any]) -> Iterator[Metric]:
        j = self.job
        tasks = self._gauge("primus_tasks", "Planned tasks by state", ("state",))
        total, done = int(progress.get("tasks", 0)), int(progress.get("tasks_done", 0))
        quarantined = int(progress.get("tasks_quarantined", 0))
        tasks.add_metric([j, "done"], float(done))
        tasks.add_metric([j, "quarantined"], float(quarantined))
        tasks.add_metric([j, "pending"], float(max(0, total - done - quarantined)))
        yield tasks
        queue = self._gauge("primus_task_queue_depth", "Planned tasks not yet done (pending or leased)")
        queue.add_metric([j], float(max(0, total - done - quarantined)))
        yield queue
        acked = CounterMetricFamily(
            "primus_rows_acknowledged", "Rows of the files sources the trainer acknowledged", labels=("job",)
        )
        acked.add_metric([j], float(progress.get("acked_rows", 0)))
        yield acked
        yield from self._trainer(progress)

    def _trainer(self, progress: Mapping[str, Any]) -> Iterator[Metric]:
        j = self.job
        figures = progress.get("trainer_metrics") or {}
        report = progress.get("trainer_report") or {}
        trained = CounterMetricFamily(
            "primus_rows_trained", "Rows trained per source", labels=("job", "source")
        )
        for source, rows in sorted((figures.get("rows_trained") or {}).items()):
            trained.add_metric([j, source], float(rows))
        replayed = CounterMetricFamily(
            "primus_rows_replayed",
            "History rows replayed per source (mixing.replay)",
            labels=("job", "source"),
        )
        for source, rows in sorted((figures.get("rows_replayed") or {}).items()):
            replayed.add_metric([j, source], float(rows))
        scored = CounterMetricFamily("primus_rows_scored", "Stream rows scored", labels=("job",))
        scored.add_metric([j], float(figures.get("rows_scored") or 0))
        yield from (trained, replayed, scored)
        step = self._gauge("primus_trainer_step", "The trainer's training step")
        if (value := _number(progress.get("trainer_step"))) is not None:
            step.add_metric([j], value)
        yield step
        fresh = self._gauge(
            "primus_freshness_seconds", "Age of the stream rows trained, by quantile", ("quantile",)
        )
        for key, quantile in (("p50", "0.5"), ("p99", "0.99")):
            if (value := _number((figures.get("freshness_s") or {}).get(key))) is not None:
                fresh.add_metric([j, quantile], value)
        yield fresh
        auc = self._gauge("primus_progressive_auc", "AUC of stream rows scored before training", ("window",))
        progressive = figures.get("progressive") or {}
        for key, window in (("auc", "all"), ("window_auc", "recent")):
            if (value := _number(progressive.get(key))) is not None:
                auc.add_metric([j, window], value)
        yield auc
        stream = figures.get("stream") or {}
        lag = self._gauge("primus_stream_lag_records", "Records on the broker not yet read", ("partition",))
        for partition, records in sorted((stream.get("lag") or {}).items()):
            lag.add_metric([j, str(partition)], float(records))
        yield lag
        skipped = CounterMetricFamily(
            "primus_stream_skipped_records", "Stream records skipped by offset_reset", labels=("job",)
        )
        available = self._gauge("primus_stream_available", "1 while the stream's broker answers, else 0")
        if stream:  # a job without a stream has neither figure
            skipped.add_metric([j], float(stream.get("skipped_records") or 0))
            if (up := stream.get("available")) is not None:
                available.add_metric([j], 1.0 if up else 0.0)
        yield from (skipped, available)
        age = self._gauge("primus_checkpoint_age_seconds", "Seconds since the trainer's last checkpoint")
        written = _number((report.get("checkpoint") or {}).get("time"))
        if written is not None:
            age.add_metric([j], max(0.0, self._now() - written))
        yield age

    def _events(self, counts: Mapping[tuple[str, str | None], int]) -> Iterator[Metric]:
        j = self.job
        decisions = CounterMetricFamily(
            "primus_scaling_decisions", "The autoscaler's decisions by action", labels=("job", "action")
        )
        for action in ("scale_out", "scale_in", "resize_cpu", "resize_memory"):
            decisions.add_metric([j, action], float(counts.get((EventType.SCALE_DECISION.value, action), 0)))
        resizes = CounterMetricFamily("primus_resizes", "Resizes applied in place", labels=("job",))
        resizes.add_metric([j], float(counts.get((EventType.RESIZED.value, None), 0)))
        events = CounterMetricFamily("primus_events", "Job events by type", labels=("job", "type"))
        for (type_, sub), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            if sub is None:
                events.add_metric([j, type_], float(n))
        yield from (decisions, resizes, events)


def render(collector: JobMetrics) -> bytes:
    """The text exposition format of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
