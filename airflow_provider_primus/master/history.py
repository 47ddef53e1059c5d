"""A job's figures over time, kept by its master in the job's status: the charts' durable history.

The status holds a job's *latest* state; the pages chart how it got there (rows, AUC, freshness,
executor utilisation). Kept by whichever API-server worker drew the page, that history would start
empty at every restart and differ between workers. So the master keeps it with the job: a point every
``every_s`` seconds into a bounded series in the status, the same for every reader and surviving any
restart of the readers or of the master (which resumes the series from the status it finds).

Bounded and downsampled when old: the newest ``recent`` points at full resolution; older ones move
to an archive of at most ``archive`` points, and when that is full every other archived point is
dropped, halving its resolution — a day-long job keeps its first hours at a coarser grain rather than
losing them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_primus.contracts.status import ExecutorState, JobStatus
from airflow_provider_primus.lookup import as_map, num

__all__ = ["EVERY_S_ENV", "Point", "StatusHistory", "default_every_s", "point_from_dict", "point_from_status"]

MAX_EXECUTORS = 16  # per point: enough for the charts, bounded for the status
# Seconds between two points (default 20): finer for short jobs and tests, coarser for long ones.
EVERY_S_ENV = "PRIMUS_HISTORY_EVERY_S"
DEFAULT_EVERY_S = 20.0


def default_every_s() -> float:
    """The interval ``$PRIMUS_HISTORY_EVERY_S`` sets (a master reads it at its first status)."""
    raw = os.environ.get(EVERY_S_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{EVERY_S_ENV}={raw!r}: must be a number of seconds above 0")
    return value


@dataclass(frozen=True)
class Point:
    """One status, reduced to the numbers the charts use."""

    t: float  # status.updated, seconds since the epoch
    acked_rows: float | None = None
    trainer_rows: float | None = None
    trainer_step: float | None = None
    samples_per_s: float | None = None
    auc: float | None = None
    window_auc: float | None = None
    freshness_p50: float | None = None
    freshness_p99: float | None = None
    executors: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> telemetry numbers

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def point_from_status(status: JobStatus, t: float | None = None) -> Point | None:
    """The point of a status (at ``t``, default its ``updated``); None without a time.

    A status no master has written figures into yet has no acked rows, rather than the model's 0: a
    chart starts where the job's figures do."""
    t = status.updated if t is None else t
    if t is None:
        return None
    progress = status.progress
    metrics = progress.metrics()
    executors: dict[str, dict[str, float]] = {}
    for name, ex in sorted(status.executors.items()):
        usage = ex.telemetry
        if usage is None or ex.state != ExecutorState.RUNNING:
            continue
        if len(executors) < MAX_EXECUTORS:
            executors[name] = {
                "cpu_util": usage.cpu_util,
                "mem_util": usage.mem_util,
                "rows_per_s": usage.rows_per_s,
            }
    return Point(
        t=t,
        acked_rows=float(progress.acked_rows) if status.given("progress") else None,
        trainer_rows=_float(progress.trainer_rows),
        trainer_step=_float(progress.trainer_step),
        samples_per_s=_float(metrics.samples_per_s),
        auc=_float(metrics.progressive.auc),
        window_auc=_float(metrics.progressive.window_auc),
        freshness_p50=_float(metrics.freshness_s.p50),
        freshness_p99=_float(metrics.freshness_s.p99),
        executors=executors,
    )


def point_from_dict(d: Mapping[str, Any]) -> Point | None:
    """A stored point (tolerant: a field of another type is dropped, a point without a time too)."""
    t = num(d.get("t"))
    if t is None:
        return None
    executors = {
        str(name): {k: v for k, raw in as_map(numbers).items() if (v := num(raw)) is not None}
        for name, numbers in as_map(d.get("executors")).items()
    }
    fields = ("acked_rows", "trainer_rows", "trainer_step", "samples_per_s", "auc", "window_auc")
    values = {k: num(d.get(k)) for k in (*fields, "freshness_p50", "freshness_p99")}
    return Point(t=t, executors=executors, **values)


class StatusHistory:
    def __init__(
        self,
        saved: Sequence[Mapping[str, Any]] = (),
        *,
        every_s: float | None = None,
        recent: int = 90,
        archive: int = 90,
    ) -> None:
        self.every_s = default_every_s() if every_s is None else every_s
        self.recent_max, self.archive_max = recent, archive
        points = [p for p in (point_from_dict(d) for d in saved) if p is not None]
        points.sort(key=lambda p: p.t)
        self._archive = points[: max(0, len(points) - recent)]
        self._recent = points[max(0, len(points) - recent) :]
        while len(self._archive) > archive:
            self._thin()

    def add(self, status: JobStatus, now: float, *, force: bool = False) -> bool:
        """Take a point of ``status`` at ``now`` if ``every_s`` has passed since the last one, or
        ``force`` (a job's final status: its end is in the history, not only in what a reader saw)."""
        last = self._recent[-1].t if self._recent else None
        if last is not None and (now <= last or (now - last < self.every_s and not force)):
            return False
        point = point_from_status(status, t=now)
        if point is None:
            return False
        self._recent.append(point)
        if len(self._recent) > self.recent_max:
            self._archive.append(self._recent.pop(0))
            if len(self._archive) > self.archive_max:
                self._thin()
        return True

    def _thin(self) -> None:
        """Every other archived point goes: the archive covers the same span at half the grain."""
        self._archive = self._archive[::2]

    def points(self) -> list[Point]:
        return [*self._archive, *self._recent]

    def to_list(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.points()]
