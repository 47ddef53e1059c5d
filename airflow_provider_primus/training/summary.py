"""A trainer's figures: the counters a checkpoint carries, the summary a run reports, and with
several trainers the job's summary merged from all of theirs.

Separate from the loop: what is reported, and how several trainers add up, changes with the job's
status, the CLI and the benchmarks, not with how a step trains.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import torch

from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.sharding import row_wise_tables

__all__ = [
    "TrainMetrics",
    "contribution",
    "iso_ms",
    "merge_summaries",
    "model_digest",
    "print_progress",
    "progress_line",
    "round_metric",
    "summarize",
]


@dataclass
class TrainMetrics:
    rows_trained: dict[str, int] = field(default_factory=dict)
    rows_replayed: dict[str, int] = field(default_factory=dict)  # per files source (mixing.replay)
    rows_scored: int = 0
    deferred: dict[str, int] = field(default_factory=dict)
    guard_steps: int = 0
    windows: list[dict[str, Any]] = field(default_factory=list)
    window_rows: dict[str, int] = field(default_factory=dict)
    window_guard: int = 0
    elapsed_s: float = 0.0
    watermark_ms: int = 0  # newest event time trained on: the published watermark and the replay clock
    # Rows used (trained or scored) whose event time is before 1990 or more than a day ahead, per
    # source: most often integers in another unit than the schema declares. Counted, never hidden.
    event_time_implausible: dict[str, int] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.__dict__.update(state)

    def account(
        self,
        step: int,
        rows: dict[str, int],
        deferred: dict[str, int],
        *,
        guard: bool,
        lag: int,
        age: float,
        window_steps: int,
    ) -> None:
        """Add a step's mix; every ``window_steps`` steps the window's shares become a record."""
        for n, r in deferred.items():
            self.deferred[n] = self.deferred.get(n, 0) + r
        self.guard_steps += int(guard)
        self.window_guard += int(guard)
        for n, r in rows.items():
            self.window_rows[n] = self.window_rows.get(n, 0) + r
        if step % window_steps == 0:
            total = sum(self.window_rows.values()) or 1
            self.windows.append(
                {
                    "step": step,
                    "shares": {n: round(r / total, 4) for n, r in sorted(self.window_rows.items())},
                    "guard_steps": self.window_guard,
                    "lag_records": lag,
                    "event_age_s": round(age, 3),
                    "deferred": dict(self.deferred),
                }
            )
            del self.windows[:-1000]
            self.window_rows, self.window_guard = {}, 0


def round_metric(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def iso_ms(ms: int) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


def model_digest(model: torch.nn.Module) -> str:
    """The replicated state's digest: row-wise table shards (training/sharding.py) differ between
    trainers by design and are left out; everything else must be the same on every trainer."""
    h = hashlib.sha256()
    shards = {f"embeddings.{j}.weight" for j in row_wise_tables(model)}
    for name, tensor in sorted(model.state_dict().items()):
        if name in shards:
            continue
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _progressive(scores: ScoreLog, window: int) -> dict[str, float | None]:
    return {
        "auc": round_metric(scores.auc()),
        "logloss": round_metric(scores.logloss()),
        "window_auc": round_metric(scores.window_auc(window)),
        "window_logloss": round_metric(scores.window_logloss(window)),
    }


def summarize(
    *,
    mode: str,
    steps: int,
    metrics: TrainMetrics,
    scores: ScoreLog,
    freshness: Percentiles,
    window_rows: int,
    dead_lettered: int,
    stream: dict[str, Any] | None,
    brief: bool = False,
) -> dict[str, Any]:
    """One trainer's summary; ``brief`` leaves out the recent mix windows (periodic progress)."""
    m = metrics
    out: dict[str, Any] = {
        "mode": mode,
        "steps": steps,
        "rows_trained": dict(m.rows_trained),
        "rows_replayed": dict(m.rows_replayed),
        "rows_scored": m.rows_scored,
        "progressive": _progressive(scores, window_rows),
        "freshness_s": {
            "p50": round_metric(freshness.quantile(0.5)),
            "p99": round_metric(freshness.quantile(0.99)),
        },
        "dead_lettered": dead_lettered,
        "event_time_implausible": dict(m.event_time_implausible),
        "stream": stream,
        "deferred": dict(m.deferred),
        "guard_steps": m.guard_steps,
        "watermark": iso_ms(m.watermark_ms),
        "elapsed_s": round(m.elapsed_s, 3),
        "samples_per_s": round(sum(m.rows_trained.values()) / m.elapsed_s, 1) if m.elapsed_s else None,
    }
    if not brief:
        out["windows"] = m.windows[-20:]
    return out


def contribution(
    metrics: TrainMetrics,
    scores: ScoreLog,
    freshness: Percentiles,
    dead_lettered: int,
    model: torch.nn.Module,
) -> dict[str, Any]:
    """What one trainer sends for the job's summary (gathered from every trainer)."""
    m = metrics
    return {
        "rows_trained": m.rows_trained,
        "rows_replayed": m.rows_replayed,
        "rows_scored": m.rows_scored,
        "deferred": m.deferred,
        "guard_steps": m.guard_steps,
        "scores": scores.state_dict(),
        "freshness": freshness.state_dict()["sample"],
        "dead_lettered": dead_lettered,
        "event_time_implausible": m.event_time_implausible,
        "model_sha256": model_digest(model),
    }


def _add(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for name, value in counts.items():
        into[name] = into.get(name, 0) + value


def merge_summaries(
    own: dict[str, Any], everyone: list[dict[str, Any]], *, seed: int, window_rows: int, elapsed_s: float
) -> dict[str, Any]:
    """The job's metrics from every trainer's ``contribution``: the sum and union of theirs, on top
    of this trainer's own summary."""
    out = own
    scores, fresh = ScoreLog(), Percentiles(seed=seed)
    rows: dict[str, int] = {}
    replayed: dict[str, int] = {}
    deferred: dict[str, int] = {}
    implausible: dict[str, int] = {}
    for r in everyone:
        scores.append(r["scores"]["labels"], r["scores"]["probs"])
        fresh.add(np.asarray(r["freshness"], dtype=np.float64))
        _add(rows, r["rows_trained"])
        _add(replayed, r.get("rows_replayed", {}))
        _add(deferred, r["deferred"])
        _add(implausible, r.get("event_time_implausible", {}))
    out.update(
        trainers=len(everyone),
        # Every replica applied the same summed gradients: a difference here is a bug, not noise.
        replicas_identical=len({r["model_sha256"] for r in everyone}) == 1,
        rows_trained=rows,
        rows_replayed=replayed,
        rows_scored=sum(r["rows_scored"] for r in everyone),
        deferred=deferred,
        guard_steps=max(r["guard_steps"] for r in everyone),
        dead_lettered=sum(r["dead_lettered"] for r in everyone),
        event_time_implausible=implausible,
        progressive=_progressive(scores, window_rows),
        freshness_s={"p50": round_metric(fresh.quantile(0.5)), "p99": round_metric(fresh.quantile(0.99))},
        samples_per_s=round(sum(rows.values()) / elapsed_s, 1) if elapsed_s else None,
    )
    return out


def progress_line(summary: Mapping[str, Any]) -> str:
    """A brief summary as one line: a log line, or the text beside a terminal's progress bar."""
    p = summary["progressive"]
    return (
        f"step {summary['steps']:>7}  trained {summary['rows_trained']}  auc {p['window_auc']}  "
        f"freshness p99 {summary['freshness_s']['p99']}s  dead-lettered {summary['dead_lettered']}"
    )


def print_progress(summary: Mapping[str, Any]) -> None:
    print(progress_line(summary), file=sys.stderr, flush=True)
