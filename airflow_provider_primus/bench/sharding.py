"""``primus bench sharding``: peak memory per trainer with replicated vs row-wise embedding tables.

Two trainer processes (gloo, loopback) train the same DLRM on the same synthetic batches, once with
every table replicated and once with every table row-wise (training/sharding.py); each reports its
peak resident set (``ru_maxrss``) and the resident set it had before building the model (the
interpreter, torch and the process group: the same in both runs). The model state that moves
between the two is the tables' training footprint (weights and the sparse optimizer's state:
``tables_mb``); the dense part (``dense_mb``) is on every trainer in both. So a row-wise trainer
should peak near ``base + tables_mb / trainers + dense_mb`` and a replicated one near
``base + tables_mb + dense_mb``.

:func:`train_worker` is also what the tests run (tests/training/test_sharding.py): a real trainer
step (training/update.py's :class:`Updater`, the real process group and optimizers) under an
optional memory allotment, with an optional per-shard checkpoint at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.embedded.server_process import free_ports  # loopback ports
from airflow_provider_primus.process import stop_process_group, tied_to_launcher
from airflow_provider_primus.training.checkpoints.files import CheckpointStore
from airflow_provider_primus.training.checkpoints.shards import model_state, prune_shards
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.gpu import footprint
from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import REPLICATED, ROW_WISE, Sharding, build_model
from airflow_provider_primus.training.summary import TrainMetrics
from airflow_provider_primus.training.update import SourceWeights, Updater

log = logging.getLogger(__name__)

__all__ = ["ShardingRun", "run", "spawn", "train", "train_worker"]

MIB = 2**20
SOURCE = "synthetic"


@dataclass(frozen=True)
class ShardingRun:
    """One training run of :func:`train_worker`: the model, the data and what to record."""

    rows: tuple[int, ...]  # rows per embedding table
    plan: tuple[Sharding, ...]  # each table's sharding (the multi-hot tables' last)
    out: str  # directory the trainers write their results to
    embedding_dim: int = 16
    num_dense: int = 4
    steps: int = 4
    batch_rows: int = 256  # the global batch: shared among the trainers
    seed: int = 0
    # Bytes of data memory (RLIMIT_DATA) each trainer may add once started: the trainer's memory
    # allotment for its model state, enforced by the kernel. None: no limit.
    allotment_bytes: int | None = None
    checkpoint_dir: str | None = None  # write a (per-shard) checkpoint after the last step
    # Try building the whole replicated model under the allotment first, and record whether the
    # kernel refused it (the evidence that the tables exceed one trainer's allotment).
    probe_replicated: bool = False
    dlrm: dict[str, Any] = field(default_factory=dict)  # extra DLRM arguments
    # Multi-hot tables (rows, pooling), after the single-valued ones: lists of 0..4 IDs a row.
    multi_hot: tuple[tuple[int, str], ...] = ()

    def model_args(self) -> dict[str, Any]:
        lists = [
            {"column": f"list{k}", "num_embeddings": rows, "pooling": pooling}
            for k, (rows, pooling) in enumerate(self.multi_hot)
        ]
        return {
            **({"multi_hot": lists} if lists else {}),
            "num_embeddings": list(self.rows),
            "num_dense": self.num_dense,
            "embedding_dim": self.embedding_dim,
            "bottom_mlp": [32, self.embedding_dim],
            "top_mlp": [32, 16],
            "seed": self.seed,
            **self.dlrm,
        }


def global_batch(run: ShardingRun, step: int) -> TensorBatch:
    """The step's rows for all trainers together: the same on every trainer and in the reference."""
    g = torch.Generator().manual_seed(run.seed * 1_000_003 + step)
    n = run.batch_rows
    sparse = torch.stack([torch.randint(0, rows, (n,), generator=g) for rows in run.rows], dim=1)
    dense = torch.randn(n, run.num_dense, generator=g)
    labels = torch.randint(0, 2, (n,), generator=g).float()
    bags: dict[str, Bag] = {}
    for k, (rows, _) in enumerate(run.multi_hot):  # drawn after the rest: the other draws stay
        lengths = torch.randint(0, 5, (n,), generator=g)
        ids = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
        bags[f"list{k}"] = Bag(ids=ids, offsets=torch.cumsum(lengths, 0) - lengths)
    return TensorBatch(sparse=sparse, dense=dense, labels=labels, bags=bags)


def share(run: ShardingRun, step: int, rank: int, world: int) -> TensorBatch:
    """Trainer ``rank``'s rows of the step. Every third step trainer 0 takes them all, so the others
    join a step with no rows of their own (they must still take part in the exchanges)."""
    batch = global_batch(run, step)
    n = len(batch)
    if world > 1 and step % 3 == 2:
        return batch.slice(0, n) if rank == 0 else batch.slice(n, n)
    return batch.slice(n * rank // world, n * (rank + 1) // world)


def train(model: DLRM, optim: Optimizers, group: Group, run: ShardingRun) -> None:
    """``run.steps`` real trainer steps (``Updater``) on this trainer's shares of the batches."""
    host = torch.device("cpu")
    # As the trainer does (runtime.py): sparse Adagrad's COO gradients are not validated.
    torch.sparse.check_sparse_tensor_invariants.disable()  # type: ignore[no-untyped-call]
    updater = Updater(
        model,
        optim,
        group,
        host,
        SourceWeights("batch", frozenset(), {}),
        scores=ScoreLog(),
        freshness=Percentiles(seed=run.seed),
        metrics=TrainMetrics(),
        clock_ms=lambda: 0,
    )
    for step in range(run.steps):
        mine = share(run, step, group.rank, group.world)
        total = float(run.batch_rows)
        updater.step(
            [(SOURCE, mine)] if len(mine) else [],
            global_trained=total,
            lr_weighted=total,
            dense_lr_weighted=total,
            loss_weighted=total,
        )


def _status(field_name: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmData, VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} in /proc/self/status")


def _reset_peak_rss() -> None:
    """Start the peak resident set (VmHWM) afresh from now: what importing torch and joining the
    group peaked at is not the model's. Linux >= 4.0; where refused, the peak includes start-up."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _warm_up(run: ShardingRun) -> None:
    """One step of a tiny replicated model on this trainer alone: what torch loads on first use
    (the optimizers import torch._dynamo) is loaded before measuring and before the allotment, not
    counted against either (an import that fails halfway under the limit would leave torch broken)."""
    tiny = ShardingRun(
        rows=tuple(8 for _ in run.rows),
        plan=tuple(REPLICATED for _ in run.plan),
        out=run.out,
        steps=1,
        multi_hot=tuple((8, pooling) for _, pooling in run.multi_hot),
    )
    model = DLRM(**tiny.model_args())
    train(model, Optimizers(model), Group(), tiny)


def _refused(run: ShardingRun) -> bool:
    """Whether building the replicated model and its optimizers fails under the allotment."""
    try:
        model = DLRM(**run.model_args())
        Optimizers(model)
    except (RuntimeError, MemoryError):
        return True
    finally:
        gc.collect()
    return False


def train_worker(rank: int, world: int, init: str, run: ShardingRun) -> None:
    """One trainer process: join the group, (limit its memory), build its model, train, (save a
    checkpoint) and write what it measured and holds to ``run.out/rank-{rank}.pt``."""
    torch.set_num_threads(1)
    group = Group(rank, world, init)
    try:
        _warm_up(run)
        refused = None
        if run.allotment_bytes is not None:
            limit = _status("VmData") + run.allotment_bytes
            resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))
            if run.probe_replicated:
                refused = _refused(run)
        base_rss = _status("VmRSS")
        _reset_peak_rss()
        model = build_model(run.plan, rank, world, **run.model_args())
        optim = Optimizers(model)
        train(model, optim, group, run)
        peak_rss = _status("VmHWM")  # before the checkpoint: its serialising is not training
        need = footprint(model)
        if run.checkpoint_dir is not None:
            store = CheckpointStore(Path(run.checkpoint_dir))
            state = model_state(model, optim, store, run.steps)
            ranks = group.gather({"rank": rank})
            if group.leader:
                store.save(run.steps, {**state, "ranks": ranks})
                prune_shards(store)
            group.barrier()
        torch.save(
            {
                "rank": rank,
                "base_rss": base_rss,
                "peak_rss": peak_rss,
                "table_bytes": need.table_bytes,
                "dense_bytes": need.dense_bytes,
                "replicated_refused": refused,
                "model": model.state_dict(),
                "optim": optim.state_dict(),
            },
            Path(run.out) / f"rank-{rank}.pt",
        )
    finally:
        group.close()


def spawn(run: ShardingRun, world: int, timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Run ``world`` trainer processes of :func:`train_worker` (gloo on loopback) and return what
    each wrote, in rank order. A failed trainer stops the others and raises with its log's end."""
    out = Path(run.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "run.json"
    spec.write_text(json.dumps(dataclasses.asdict(run)))
    init = f"tcp://127.0.0.1:{free_ports(1)[0]}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = [out / f"rank-{r}.log" for r in range(world)]
    try:
        for rank in range(world):
            command = [sys.executable, "-m", __name__, str(spec), str(rank), str(world), init]
            with logs[rank].open("wb") as err:
                procs.append(
                    subprocess.Popen(
                        tied_to_launcher(command),
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + timeout_s
        while True:
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            alive = [p for p in procs if p.returncode is None]
            if failed or (alive and time.monotonic() > deadline):
                rank = failed[0] if failed else procs.index(alive[0])
                tail = logs[rank].read_text(errors="replace")[-3000:]
                raise RuntimeError(f"trainer {rank} of {world} failed or timed out:\n{tail}")
            if not alive:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                alive[0].wait(timeout=0.5)  # a failure elsewhere is seen within this
    finally:
        for p in procs:
            if p.poll() is None:
                stop_process_group(p.pid, child=p, grace_s=5)
    return [torch.load(out / f"rank-{r}.pt", weights_only=True) for r in range(world)]


def _mb(n: float) -> float:
    return round(n / MIB, 2)


def run(
    *, rows: Sequence[int] = (400_000, 400_000), embedding_dim: int = 16, steps: int = 6, trainers: int = 2
) -> dict[str, Any]:
    """Peak RSS per trainer, replicated vs row-wise, for ``trainers`` trainers (the largest of them)."""
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="primus-bench-sharding-") as tmp:
        for choice in (REPLICATED, ROW_WISE):
            log.info("%d trainers, tables %s", trainers, choice)
            shape = ShardingRun(
                rows=tuple(rows),
                plan=tuple(choice for _ in rows),
                out=str(Path(tmp) / choice),
                embedding_dim=embedding_dim,
                steps=steps,
            )
            results = spawn(shape, trainers)
            figures[choice] = results
    replicated, row_wise = figures[REPLICATED], figures[ROW_WISE]
    tables = replicated[0]["table_bytes"]
    dense = replicated[0]["dense_bytes"]
    base = max(r["base_rss"] for r in replicated + row_wise)
    return {
        "peak_rss_replicated_mb": _mb(max(r["peak_rss"] for r in replicated)),
        "peak_rss_row_wise_mb": _mb(max(r["peak_rss"] for r in row_wise)),
        "tables_mb": _mb(tables),
        "dense_mb": _mb(dense),
        "base_rss_mb": _mb(base),
        # Each trainer's peak over its own start-up resident set: the model state and the steps.
        "model_rss_replicated_mb": _mb(max(r["peak_rss"] - r["base_rss"] for r in replicated)),
        "model_rss_row_wise_mb": _mb(max(r["peak_rss"] - r["base_rss"] for r in row_wise)),
        "expected_row_wise_mb": _mb(base + tables / trainers + dense),
        "row_wise_tables_mb_per_trainer": _mb(max(r["table_bytes"] for r in row_wise)),
        "trainers": trainers,
    }


def _main(argv: Sequence[str]) -> None:
    """A trainer process of :func:`spawn`: ``RUN_JSON RANK WORLD INIT``."""
    spec, rank, world, init = argv
    fields = json.loads(Path(spec).read_text())
    fields["rows"], fields["plan"] = tuple(fields["rows"]), tuple(fields["plan"])
    train_worker(int(rank), int(world), init, ShardingRun(**fields))


if __name__ == "__main__":
    _main(sys.argv[1:])
