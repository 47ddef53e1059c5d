"""``primus bench autoscale``: a mis-sized job with autoscaling off and on, side by side.

The job reads raw click logs (gzipped JSON lines: decoding them is the CPU-heavy preprocessing
Primus scales out) through ONE data executor with half a core and a tight memory limit, feeding one
trainer. The same fixed number of samples is trained twice by a real master on the local backend:
with ``scaling.enabled`` false, then true. Figures come from the master's own telemetry samples:

* ``samples_s``: rows trained / seconds from the first to the last acknowledged row;
* ``cpu_util``: CPU seconds used / core-seconds allotted, over all executors, in that interval;
* ``samples_per_core_s``: rows / core-seconds allotted (what the cluster is billed for);
* ``peak_mem_ratio``: the highest RSS / memory limit any executor reached.

``reversals_in_steady_phase`` counts decisions undone (the opposite action on the same executor
and resource, or scale-in after scale-out) within one adjustment window, over the whole run.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobStore, SqliteJobStore
from airflow_provider_primus.resources.telemetry import Sample

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

START = datetime(2026, 3, 1, tzinfo=UTC)
FILES_PER_HOUR = 2
SEED = 11
MIB = 2**20
SPARSE = {"user_id": 10_007, "item_id": 5_003, "category": 97, "city": 211, "device": 7}


def write_logs(root: Path, rows: int, files: int, distinct: int = 4) -> int:
    """``files`` gzipped JSON-lines files of click events, deterministic; returns rows written.

    Events carry 24 context fields the job does not use, as raw logs do: decoding them is part of
    the preprocessing cost. Only ``distinct`` files are generated (Python's JSON encoder is slow);
    the rest are copies, which the planner treats as files of their own."""
    per_file = rows // files
    rng = np.random.default_rng(SEED)
    made: list[Path] = []
    for index in range(files):
        hour = START + timedelta(hours=index // FILES_PER_HOUR)
        part = root / hour.strftime("%Y-%m-%d") / hour.strftime("%H")
        part.mkdir(parents=True, exist_ok=True)
        target = part / f"part-{index % FILES_PER_HOUR}.jsonl.gz"
        if len(made) >= distinct:
            shutil.copyfile(made[index % distinct], target)
            continue
        made.append(target)
        users = np.floor(200_000 * rng.random(per_file) ** 3).astype(np.int64)
        items = np.floor(50_000 * rng.random(per_file) ** 2).astype(np.int64)
        cats = rng.integers(0, 300, per_file)
        cities = rng.integers(0, 2_000, per_file)
        devices = rng.integers(0, 5, per_file)
        prices = np.round(rng.lognormal(2.0, 1.0, per_file), 2)
        ages = rng.integers(16, 80, per_file)
        clicked = (rng.random(per_file) < 1 / (1 + np.exp(-((users % 7) - 3.0)))).astype(np.int64)
        seconds = np.sort(rng.integers(0, 3600, per_file))
        lines = []
        for i in range(per_file):
            event = {
                "user_id": f"u{users[i]}",
                "item_id": f"i{items[i]}",
                "category": f"c{cats[i]}",
                "city": f"city-{cities[i]}",
                "device": ("ios", "android", "web", "tv", "other")[devices[i]],
                "price": float(prices[i]),
                "age": None if i % 17 == 0 else int(ages[i]),
                "clicked": int(clicked[i]),
                "ts": (hour + timedelta(seconds=int(seconds[i]))).isoformat(),
            }
            for k in range(24):
                event[f"ctx_{k}"] = f"v{(i * k) % 977}" if k % 2 else (i * k) % 1000
            lines.append(json.dumps(event))
        with gzip.open(target, "wt", compresslevel=1) as f:
            f.write("\n".join(lines) + "\n")
    return per_file * files


def documents(
    root: Path, files: int, *, scaling: bool, window_s: float, cooldown_s: float, data_cpu: float = 0.5
) -> Path:
    hours = -(-files // FILES_PER_HOUR)
    transforms: list[dict[str, Any]] = [{"column": c, "hash_bucket": n} for c, n in SPARSE.items()]
    transforms += [{"column": "age", "fill": 0}, {"column": "age", "cast": "float32"}]
    data = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "bench-autoscale"},
        "spec": {
            "window": {"start": START.isoformat(), "end": (START + timedelta(hours=hours)).isoformat()},
            "sources": [
                {
                    "name": "clicks",
                    "type": "files",
                    "format": "jsonl",
                    "uri": str(root / "logs"),
                    "path_template": "{date}/{hour}",
                    "granularity": "hour",
                    "schema": {
                        "sparse": list(SPARSE),
                        "dense": ["price", "age"],
                        "label": {"column": "clicked"},
                        "event_time": "ts",
                        "transforms": transforms,
                    },
                }
            ],
        },
    }
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "bench-autoscale"},
        "spec": {
            "mode": "batch",
            "batch_size": 4096,
            "model": {"embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [32, 16]},
            "checkpoint": {"every_steps": 0, "every_s": 0.0},
            "publish": {"every_steps": 0, "every_s": 0.0},
        },
    }
    job = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": "bench-on" if scaling else "bench-off"},
        "spec": {
            "data": "data.yaml",
            "training": "training.yaml",
            "data_service": {"window": 4, "batch_rows": 4096},
            "roles": {
                "data": {
                    "replicas": {"min": 1, "initial": 1, "max": 3},
                    "failover": {"max_restarts": 20},
                    "resources": {
                        "cpu": data_cpu,
                        "memory": "256Mi",
                        "bounds": {"cpu": {"min": min(0.25, data_cpu), "max": 0.5}, "memory": {"max": "1Gi"}},
                    },
                },
                "trainer": {
                    "resources": {
                        "cpu": 1.0,
                        "memory": "2Gi",
                        "bounds": {"cpu": {"min": 0.5, "max": 1.0}},
                    }
                },
            },
            "scaling": {
                "enabled": scaling,
                "window_s": window_s,
                "cooldown_s": cooldown_s,
                "max_step": {"replicas": 2},
            },
        },
    }
    for name, doc in (("data.yaml", data), ("training.yaml", training), ("job.yaml", job)):
        (root / name).write_text(yaml.safe_dump(doc))
    return root / "job.yaml"


def _collect(master: Master, into: list[Sample], seen: set[tuple[str, float]]) -> None:
    for s in list(master.telemetry.samples):
        if (s.executor, s.t) not in seen:
            seen.add((s.executor, s.t))
            into.append(s)


def run_job(
    root: Path,
    files: int,
    rows: int,
    *,
    scaling: bool,
    window_s: float,
    cooldown_s: float,
    data_cpu: float = 0.5,
) -> dict[str, Any]:
    job_path = documents(
        root, files, scaling=scaling, window_s=window_s, cooldown_s=cooldown_s, data_cpu=data_cpu
    )
    home = root / ("home-on" if scaling else "home-off")
    store = SqliteJobStore(home / "jobs.sqlite")
    name = "bench-on" if scaling else "bench-off"
    submit(job_path, store=store, home=home)
    samples: list[Sample] = []
    seen: set[tuple[str, float]] = set()
    acked: list[tuple[float, int]] = []

    def on_status(status: dict[str, Any]) -> None:  # called from master.run(), once it exists
        acked.append((time.monotonic(), int(status["progress"]["acked_rows"])))
        _collect(master, samples, seen)

    master = Master(name, store, home=home, tick_s=0.25, on_status=on_status)
    thread = threading.Thread(target=master.run, daemon=True)
    thread.start()
    status = finish(master, thread, store, name, rows)
    t0 = next(t for t, a in acked if a > 0)
    t1 = next(t for t, a in acked if a >= rows)
    return {
        **_figures(samples, rows, t0, t1),
        "scale_out_rows_per_s": _around_scale_out(samples, status["decisions"], window_s, t1),
        "decisions": status["decisions"],
        "restarts": sum(e["restarts"] for e in status["executors"].values()),
    }


def _figures(samples: list[Sample], rows: int, t0: float, t1: float) -> dict[str, Any]:
    by_executor: dict[str, list[Sample]] = {}
    for s in samples:
        by_executor.setdefault(s.executor, []).append(s)
    allotted = used = 0.0
    peak = 0.0
    for series in by_executor.values():
        series.sort(key=lambda s: s.t)
        for a, b in itertools.pairwise(series):
            lo, hi = max(a.t, t0), min(b.t, t1)
            if hi <= lo or b.cpu_s < a.cpu_s:
                continue
            share = (hi - lo) / (b.t - a.t)
            allotted += a.cpu * (hi - lo)
            used += (b.cpu_s - a.cpu_s) * share
        peak = max([peak, *(s.rss / s.memory for s in series)])
    seconds = max(1e-6, t1 - t0)
    return {
        "samples_s": round(rows / seconds, 1),
        "seconds": round(seconds, 2),
        "cpu_util": round(used / allotted, 3) if allotted else None,
        "samples_per_core_s": round(rows / allotted, 1) if allotted else None,
        "allotted_core_s": round(allotted, 2),
        "peak_mem_ratio": round(peak, 3),
    }


def _trainer_rate(samples: list[Sample], lo: float, hi: float) -> float | None:
    """The trainer's rows/s between its samples nearest ``lo`` and ``hi`` (None: too few)."""
    series = sorted((s for s in samples if s.role == "trainer" and lo <= s.t <= hi), key=lambda s: s.t)
    if len(series) < 2 or series[-1].t - series[0].t < 0.5:
        return None
    return (series[-1].rows - series[0].rows) / (series[-1].t - series[0].t)


def _around_scale_out(
    samples: list[Sample], decisions: list[dict[str, Any]], window_s: float, end: float
) -> dict[str, float | None] | None:
    """The trainer's throughput over the window before the first scale-out and over the window after
    the new executors had one to start serving: did adding them raise it (None: no scale-out)."""
    first = next((d for d in decisions if d["action"] == "scale_out"), None)
    if first is None:
        return None
    t = float(first["t"])
    before = _trainer_rate(samples, t - window_s, t)
    after = _trainer_rate(samples, t + window_s, min(end, t + 3 * window_s))
    return {
        "before": None if before is None else round(before, 1),
        "after": None if after is None else round(after, 1),
    }


def reversals(decisions: list[dict[str, Any]], window_s: float) -> int:
    def direction(d: dict[str, Any]) -> int:
        return 1 if d["after"] > d["before"] else -1

    def target(d: dict[str, Any]) -> tuple[str, str]:
        if d["action"] in ("scale_out", "scale_in"):
            return ("replicas", d["role"])
        return (d["action"], str(d["executor"]))

    count = 0
    for i, a in enumerate(decisions):
        for b in decisions[i + 1 :]:
            if target(a) == target(b) and direction(a) != direction(b) and b["t"] - a["t"] <= window_s:
                count += 1
    return count


def run(
    *,
    rows: int = 2_000_000,
    files: int = 80,
    window_s: float = 3.0,
    cooldown_s: float = 3.0,
    workdir: Path | None = None,
    data_cpu: float = 0.5,
) -> dict[str, Any]:
    """``data_cpu``: the one data executor's starting CPU (the mis-sizing the autoscaler answers)."""
    root = Path(tempfile.mkdtemp(prefix="primus-bench-autoscale-", dir=workdir))
    try:
        log.info("writing %d rows in %d files", rows, files)
        written = write_logs(root / "logs", rows, files)
        common = {"window_s": window_s, "cooldown_s": cooldown_s, "data_cpu": data_cpu}
        log.info("the job with scaling off")
        off = run_job(root, files, written, scaling=False, **common)
        log.info("the job with scaling on")
        on = run_job(root, files, written, scaling=True, **common)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    off.pop("decisions")
    off.pop("scale_out_rows_per_s")
    return {
        "rows": written,
        "off": off,
        "on": on,
        "throughput_ratio": round(on["samples_s"] / off["samples_s"], 3),
        "per_core_ratio": round(on["samples_per_core_s"] / off["samples_per_core_s"], 3)
        if on["samples_per_core_s"] and off["samples_per_core_s"]
        else None,
        "reversals_in_steady_phase": reversals(on["decisions"], window_s),
        "window_s": window_s,
        "cooldown_s": cooldown_s,
    }


def finish(master: Master, thread: threading.Thread, store: JobStore, name: str, rows: int) -> dict[str, Any]:
    """Wait for a benchmark's job (its master running in ``thread``) and return its final status; a
    job that did not end within 30 minutes, did not succeed or did not acknowledge every planned row
    makes the figures meaningless: an error, whatever the backend."""
    thread.join(timeout=1800)
    if thread.is_alive():
        master.request({"stop": True})
        thread.join(timeout=60)
        raise BenchmarkError(f"{name}: did not finish in 30 minutes")
    status: dict[str, Any] = store.get(name).status
    if status["phase"] != "Succeeded":
        raise BenchmarkError(f"{name}: {status['phase']}: {status['message']}")
    if status["progress"]["acked_rows"] != rows:
        raise BenchmarkError(f"{name}: {status['progress']['acked_rows']} rows acknowledged, {rows} planned")
    return status
