"""``primus bench train-scale``: the same rows trained by one trainer and by two data-parallel ones.

Data parallelism's cost is its communication: every step the trainers agree on the step (a short
all-reduce) and sum their gradients (the dense layers' and the embeddings' sparse ones). This trains
ROWS generated click rows (deterministic, in memory: the data plane is measured by ``bench
dataplane``) with the training runtime itself — mixer, step agreement, update — once with one
trainer and once with two processes (gloo over loopback, each taking every other batch), each trainer
stepping BATCH_SIZE rows, and reports rows/s for both and, for two, the share of a step's time spent
in collectives (``Group.comm_s``: the time in all-reduce and friends, including waiting there for the
slower trainer). On a machine with fewer free cores than trainers, the two share the cores, and
rows_per_s_2 / rows_per_s_1 says so honestly.

Then the memory side: ``peak_rss_replicated_mb`` and ``peak_rss_row_wise_mb`` per trainer for two
trainers with two tables of TABLE_ROWS rows, from ``bench sharding`` (row-wise: about 1/N of the
tables plus the dense part).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from airflow_provider_primus.bench import sharding
from airflow_provider_primus.contracts.data import PrimusData, validate_data_spec
from airflow_provider_primus.contracts.training import PrimusTraining, validate_training_spec
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.process import primus_command, tied_to_launcher

__all__ = ["run", "worker"]

WARMUP_STEPS = 5
BUCKETS = {"user_id": 200_003, "item_id": 50_021}
MESSAGE_ROWS = 1024  # rows per in-memory batch handed to the feed


def _data() -> PrimusData:
    return validate_data_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "bench-train-scale"},
            "spec": {
                "sources": [
                    {
                        "name": "clicks",
                        "type": "files",
                        "format": "parquet",
                        "uri": "file:///nonexistent",  # in-memory feeds stand in for it
                        "path_template": "{date}",
                        "granularity": "day",
                        "schema": {
                            "sparse": list(BUCKETS),
                            "dense": ["price"],
                            "label": {"column": "clicked"},
                            "transforms": [{"column": c, "hash_bucket": n} for c, n in BUCKETS.items()],
                        },
                    }
                ]
            },
        }
    )


def _training(batch_size: int, seed: int) -> PrimusTraining:
    return validate_training_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "bench-train-scale"},
            "spec": {
                "mode": "batch",
                "batch_size": batch_size,
                "seed": seed,
                "device": "cpu",
                "mixing": {"shuffle": {"buffer_rows": 0}},
                "checkpoint": {"every_steps": 0, "every_s": 0},
                "publish": {"every_steps": 0, "every_s": 0},
            },
        }
    )


def _batches(rows: int, seed: int) -> list[TensorBatch]:
    """Click rows whose label depends on the IDs (a learnable signal), in batches of MESSAGE_ROWS."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, BUCKETS["user_id"], rows)
    items = rng.integers(0, BUCKETS["item_id"], rows)
    p = 1 / (1 + np.exp(-(((users % 7) - 3) + ((items % 5) - 2))))
    labels = (rng.random(rows) < p).astype(np.float32)
    out = []
    for a in range(0, rows, MESSAGE_ROWS):
        b = min(rows, a + MESSAGE_ROWS)
        out.append(
            TensorBatch(
                sparse=torch.from_numpy(np.stack([users[a:b], items[a:b]], axis=1)),
                dense=torch.from_numpy(rng.random((b - a, 1), dtype=np.float32)),
                labels=torch.from_numpy(labels[a:b]),
                origin="clicks",
                positions=np.arange(a, b, dtype=np.int64),
            )
        )
    return out


def _train(
    *, rank: int, world: int, init: str | None, rows: int, batch_size: int, seed: int, workdir: Path
) -> dict[str, Any]:
    """One trainer's run over its share (every world-th batch); its timed steps' figures."""
    from airflow_provider_primus.training.feeds.feed import MemoryFeed
    from airflow_provider_primus.training.runtime import Trainer, TrainOptions

    mine = _batches(rows, seed)[rank::world]
    marks: list[tuple[float, float, int]] = []  # (time, seconds in collectives, rows) after each step
    holder: dict[str, Trainer] = {}

    def trace(_step: int, parts: list[tuple[str, TensorBatch]]) -> None:
        marks.append((time.perf_counter(), holder["t"].group.comm_s, sum(len(b) for _, b in parts)))

    options = TrainOptions(
        workdir=workdir / f"rank{rank}",
        resume=False,
        feeds={"clicks": MemoryFeed("clicks", mine)},
        trace=trace,
        rank=rank,
        trainers=world,
        dist_init=init,
    )
    trainer = Trainer(_data(), _training(batch_size, seed), options)
    holder["t"] = trainer
    trainer.run()
    timed = marks[WARMUP_STEPS:]
    return {
        "seconds": timed[-1][0] - timed[0][0],
        "rows": sum(r for _, _, r in timed[1:]),
        "comm_s": timed[-1][1] - timed[0][1],
        "steps": len(timed) - 1,
    }


def worker(*, rank: int, world: int, init: str, rows: int, batch_size: int, seed: int, workdir: Path) -> None:
    """One process of the group (``primus bench train-scale --rank``): its figures, one JSON line."""
    figures = _train(
        rank=rank, world=world, init=init, rows=rows, batch_size=batch_size, seed=seed, workdir=workdir
    )
    print(json.dumps(figures), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _group(world: int, *, rows: int, batch_size: int, seed: int, workdir: Path) -> list[dict[str, Any]]:
    """Run ``world`` trainer processes together; their figures in rank order."""
    init = f"tcp://127.0.0.1:{_free_port()}"
    args = [
        "--rows",
        str(rows),
        "--batch-size",
        str(batch_size),
        "--seed",
        str(seed),
        "--workdir",
        str(workdir),
    ]
    procs = [
        subprocess.Popen(
            tied_to_launcher(
                primus_command(
                    "bench",
                    "train-scale",
                    *args,
                    "--rank",
                    str(r),
                    "--world",
                    str(world),
                    "--dist-init",
                    init,
                )
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    results = []
    try:
        for rank, p in enumerate(procs):
            out, _ = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise RuntimeError(f"trainer {rank} of {world} exited with code {p.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def run(
    *, rows: int, batch_size: int, seed: int = 7, workdir: Path | None = None, table_rows: int = 400_000
) -> dict[str, Any]:
    """Data parallelism's figures, then (``table_rows`` > 0) the memory side of model parallelism:
    the sharding benchmark's peak RSS per trainer with two tables of ``table_rows`` rows replicated
    and row-wise (``bench/sharding.py``), so the issue's one line holds both."""
    root = Path(tempfile.mkdtemp(prefix="primus-bench-train-scale-", dir=workdir))
    one = _train(
        rank=0, world=1, init=None, rows=rows, batch_size=batch_size, seed=seed, workdir=root / "one"
    )
    two = _group(2, rows=rows, batch_size=batch_size, seed=seed, workdir=root / "two")
    rows_1 = one["rows"] / one["seconds"]
    # Two trainers step together: the group's rows over the slower one's time.
    rows_2 = sum(t["rows"] for t in two) / max(t["seconds"] for t in two)
    figures: dict[str, Any] = {
        "rows": rows,
        "batch_size": batch_size,
        "cores": os.cpu_count(),
        "rows_per_s_1": round(rows_1, 1),
        "rows_per_s_2": round(rows_2, 1),
        "speedup_2": round(rows_2 / rows_1, 3),
        "comm_share_2": round(sum(t["comm_s"] for t in two) / sum(t["seconds"] for t in two), 3),
        "comm_ms_per_step_2": round(1000 * sum(t["comm_s"] for t in two) / sum(t["steps"] for t in two), 3),
        "steps_1": one["steps"],
        "steps_2": two[0]["steps"],
    }
    if table_rows > 0:
        memory = sharding.run(rows=(table_rows, table_rows), trainers=2)
        figures.update(
            {
                key: memory[key]
                for key in ("peak_rss_replicated_mb", "peak_rss_row_wise_mb", "tables_mb", "dense_mb")
            }
        )
    return figures
