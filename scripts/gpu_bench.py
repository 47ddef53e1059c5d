"""Trainer steps/s and GPU utilisation on a machine with a GPU, as one JSON line.

    python scripts/gpu_bench.py [--steps 400] [--batch-size 4096] [--rows-per-table N] [--device cuda|cpu]

The project's own trainer (``training/runtime.Trainer`` with its GPU path: the placement decision,
pinned host memory, non-blocking copies on a copy stream, ``training/gpu.py``) trains the click
model of ``primus gen``'s data document on batches already in memory (``MemoryFeed``, as ``primus
bench hybrid``'s mixer figure does), so the figures are the trainer's and the GPU's, not the data
plane's. While the timed steps run, the GPU's utilisation is sampled every 100 ms
(``torch.cuda.utilization``, which reads NVML; else ``nvidia-smi``).

``--rows-per-table`` sets every embedding table's rows (default: the data document's hash buckets):
large enough, the tables no longer fit on the GPU and stay on the host with the dense layers on the
GPU, which the ``placement`` field shows. ``--device cpu`` runs the same measurement on the CPU (a
baseline, and a dry run of this script where no GPU is lent). Asked for a GPU where torch sees none,
it says so on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

WARMUP_STEPS = 20
SAMPLE_S = 0.1


class Utilisation:
    """The GPU's utilisation (percent), sampled on a thread while the timed steps run."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.samples: list[float] = []
        self.source: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-utilisation", daemon=True)

    def _read(self) -> float | None:
        import torch

        if self.source in (None, "nvml"):
            try:
                value = float(torch.cuda.utilization(self.index))
                self.source = "nvml"
                return value
            except Exception:  # no pynvml / NVML: ask nvidia-smi instead
                self.source = "nvidia-smi" if shutil.which("nvidia-smi") else "unavailable"
        if self.source == "nvidia-smi":
            out = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                    "-i",
                    str(self.index),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=10,
            )
            try:
                return float(out.stdout.strip().splitlines()[0])
            except (IndexError, ValueError):
                self.source = "unavailable"
        return None

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            value = self._read()
            if value is not None:
                self.samples.append(value)
            elif self.source == "unavailable":
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)

    def figures(self) -> dict[str, Any]:
        s = self.samples
        return {
            "gpu_util_mean": round(statistics.fmean(s), 1) if s else None,
            "gpu_util_p50": round(statistics.median(s), 1) if s else None,
            "gpu_util_samples": len(s),
            "gpu_util_source": self.source,
        }


def batches(data: Any, training: Any, count: int, rows: int, seed: int) -> list[Any]:
    """``count`` random batches of ``rows`` rows shaped as the data document's features."""
    import torch

    from airflow_provider_primus.contracts.training import feature_columns, table_sizes
    from airflow_provider_primus.data.tensors import TensorBatch

    sparse_cols, dense_cols = feature_columns(data)
    sizes = table_sizes(training, data)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        sparse = torch.stack([torch.randint(0, sizes[c], (rows,), generator=g) for c in sparse_cols], dim=1)
        out.append(
            TensorBatch(
                sparse=sparse,
                dense=torch.randn(rows, len(dense_cols), generator=g),
                labels=torch.randint(0, 2, (rows,), generator=g).float(),
            )
        )
    return out


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import torch

    from airflow_provider_primus.contracts import load_data_spec
    from airflow_provider_primus.contracts.training import feature_columns, validate_training_spec
    from airflow_provider_primus.gen.clicklog import World
    from airflow_provider_primus.gen.files import write_data_spec
    from airflow_provider_primus.training.feeds.feed import MemoryFeed
    from airflow_provider_primus.training.runtime import Trainer, TrainOptions

    world = World.from_defaults(history_days=1, stream_days=0, rows_per_day=100)
    data = load_data_spec(write_data_spec(world, root, bootstrap_servers="127.0.0.1:9092", topic="clicks"))
    model: dict[str, Any] = {}
    if args.rows_per_table:
        model["buckets"] = {c: args.rows_per_table for c in feature_columns(data)[0]}
    training = validate_training_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "gpu-bench"},
            "spec": {
                "mode": "batch",
                "batch_size": args.batch_size,
                "device": args.device,
                "seed": args.seed,
                "model": model,
                "checkpoint": {"every_steps": 0, "every_s": 0},
                "publish": {"every_steps": 0, "every_s": 0},
            },
        }
    )
    steps = WARMUP_STEPS + args.steps
    feed = MemoryFeed("history", batches(data, training, steps, args.batch_size, args.seed))
    times: list[float] = []
    cuda = args.device == "cuda"
    util: Utilisation | None = None

    def trace(step: int, _parts: Any) -> None:
        if step == WARMUP_STEPS:  # the timed part starts: the warm-up's work done, sampling on
            if cuda:
                torch.cuda.synchronize()
            if util is not None:
                util.start()
        times.append(time.perf_counter())

    options = TrainOptions(
        workdir=root / "train", mode="batch", resume=False, feeds={"history": feed}, trace=trace
    )
    trainer = Trainer(data, training, options)
    index = (trainer.device.index or 0) if cuda else 0
    placement = trainer.placement.to_dict()
    util = Utilisation(index) if cuda else None
    try:
        trainer.run()
        if cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
    finally:
        if util is not None:
            util.stop()
    timed = len(times) - WARMUP_STEPS  # the steps after the warm-up's last one, which starts the clock
    seconds = end - times[WARMUP_STEPS - 1]
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(index) if cuda else "cpu",
        "torch": torch.__version__,
        "steps": timed,
        "batch_size": args.batch_size,
        "steps_per_s": round(timed / seconds, 1),
        "rows_per_s": round(timed * args.batch_size / seconds),
        "placement": placement,
        "table_rows": args.rows_per_table or "hash buckets",
    }
    if cuda:
        result["peak_gpu_mem_mb"] = round(torch.cuda.max_memory_allocated(index) / 2**20)
        result.update(util.figures() if util is not None else {})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=400, help=f"timed steps, after {WARMUP_STEPS} warm-up ones"
    )
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--rows-per-table", type=int, help="every embedding table's rows")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be at least 1")
    try:
        import torch
    except ImportError:
        print("gpu_bench: needs torch (pip install 'airflow-provider-primus[train]')", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_bench: no GPU: torch {torch.__version__} (CUDA build {torch.version.cuda or 'none'}) "
            "sees no CUDA device on this machine; nothing to measure (--device cpu measures the CPU)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="primus-gpu-bench-") as tmp:
        print(json.dumps(measure(args, Path(tmp))))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's package
    sys.exit(main())
