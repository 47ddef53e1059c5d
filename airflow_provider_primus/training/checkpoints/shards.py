"""Checkpoints of a model with row-wise tables: one file per shard, re-shardable on resume.

Each trainer writes its own shard of every row-wise table — the rows and the sparse optimizer's
state for those rows — to ``ckpt-{step}.shard-{rank}-of-{world}.pt`` next to the step's main
checkpoint, before the trainers gather their progress for it; rank 0 then writes the main file with
the dense part (MLPs, replicated tables, their optimizer state) once, and a ``sharding`` record (the
world and each row-wise table's size). The main file is written last, so it exists only once every
shard it refers to is durable: the main file is the commit point, and :func:`prune_shards` drops
shards whose main file has been pruned.

Resuming reads the rows this trainer owns *now*: with the same trainer count that is its own file;
with another one (N → M), the slices of the old shards that overlap its new range (ranges are
contiguous: training/sharding.py), each file memory-mapped so only those rows are read. A table
that was replicated when saved and is row-wise now (or the reverse) is sliced from (or assembled
into) the whole table the same way. The optimizer state sliced with the rows is every per-row
tensor (Adagrad's sum, Adam's moments); per-table counters (the step) are the same on every shard.

Per-shard files need a directory every trainer can write and read (one machine's disk, or a shared
filesystem); an ``s3://`` checkpoint directory is refused for row-wise tables up front
(``contracts/training.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from airflow_provider_primus.training.checkpoints.files import CheckpointError, CheckpointStore, atomic_save
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import RowWiseTable, row_bounds, row_wise_tables
from airflow_provider_primus.training.trainable import Trainable

__all__ = ["load_model_state", "model_state", "prune_shards", "shard_path"]

_SHARD_RE = re.compile(r"ckpt-(\d{12,})\.shard-(\d{3,})-of-(\d{3,})\.pt")


def shard_path(directory: Path, step: int, rank: int, world: int) -> Path:
    return directory / f"ckpt-{step:012d}.shard-{rank:03d}-of-{world:03d}.pt"


def _key(j: int) -> str:
    return f"embeddings.{j}.weight"


def _directory(store: object) -> Path:
    if not isinstance(store, CheckpointStore):
        raise ValueError(
            "row-wise tables are checkpointed one file per shard into a directory every trainer "
            f"shares; this checkpoint store ({type(store).__name__}) is not a directory"
        )
    return store.directory


def _param_state(optim: Optimizers, param: nn.Parameter) -> dict[str, Any]:
    if optim.sparse is None:
        return {}
    return {
        k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
        for k, v in optim.sparse.state.get(param, {}).items()
    }


def model_state(model: Trainable, optim: Optimizers, store: object, step: int) -> dict[str, Any]:
    """The model's part of the step's main checkpoint (``model``, ``optim`` and, with row-wise
    tables, ``sharding``), after writing this trainer's shard file. Every trainer calls it; only
    rank 0's return value is meant to be saved. Without row-wise tables it writes nothing and
    returns the single-file state as it always was."""
    tables = row_wise_tables(model)
    if not tables:
        return {"model": model.state_dict(), "optim": optim.state_dict()}
    directory = _directory(store)
    directory.mkdir(parents=True, exist_ok=True)
    some = next(iter(tables.values()))
    shard = {
        "step": step,
        "rank": some.rank,
        "world": some.world,
        "tables": {
            j: {
                "num_embeddings": t.num_embeddings,
                "start": t.start,
                "end": t.end,
                "weight": t.weight.detach().cpu(),
                "optim": _param_state(optim, t.weight),
            }
            for j, t in tables.items()
        },
    }
    atomic_save(shard_path(directory, step, some.rank, some.world), shard)
    dense = {k: v for k, v in model.state_dict().items() if k not in {_key(j) for j in tables}}
    optim_state = optim.state_dict()
    if optim_state["sparse"] is not None:
        optim_state["sparse"]["state"] = {
            j: s for j, s in optim_state["sparse"]["state"].items() if j not in tables
        }
    return {
        "model": dense,
        "optim": optim_state,
        "sharding": {"world": some.world, "tables": {j: t.num_embeddings for j, t in tables.items()}},
    }


def prune_shards(store: object) -> None:
    """Drop shard files older than the oldest main checkpoint the store keeps (rank 0, after it
    saved one). Newer ones are left alone: they may belong to a step whose main file is coming."""
    if not isinstance(store, CheckpointStore):
        return
    kept = store.steps()
    if not kept:
        return
    try:
        names = os.listdir(store.directory)
    except FileNotFoundError:
        return
    for name in names:
        m = _SHARD_RE.fullmatch(name)
        if m and int(m.group(1)) < kept[0]:
            (store.directory / name).unlink(missing_ok=True)


def _is_rows(value: Any, rows: int, dim: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 2 and tuple(value.shape) == (rows, dim)


def _slice_state(state: Mapping[str, Any], rows: int, dim: int, lo: int, hi: int) -> dict[str, Any]:
    """Rows [lo, hi) of a table's per-row optimizer tensors; counters as they are."""
    return {k: v[lo:hi] if _is_rows(v, rows, dim) else v for k, v in state.items()}


class _SavedTables:
    """The saved rows of the step's tables: whole in the main file, or in its shard files."""

    def __init__(self, state: Mapping[str, Any], directory: Path | None, step: int) -> None:
        self.state, self.directory, self.step = state, directory, step
        sharding = state.get("sharding") or {}
        self.world: int = int(sharding.get("world", 1))
        self.sharded: dict[int, int] = {int(j): int(n) for j, n in (sharding.get("tables") or {}).items()}
        self._files: dict[int, dict[str, Any]] = {}

    def _shard(self, rank: int) -> dict[str, Any]:
        if rank not in self._files:
            if self.directory is None:
                raise CheckpointError("the checkpoint has row-wise tables but its store is not a directory")
            path = shard_path(self.directory, self.step, rank, self.world)
            try:
                # Memory-mapped: only the rows sliced out of it below are read.
                loaded = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            except FileNotFoundError:
                raise CheckpointError(
                    f"the checkpoint at step {self.step} was written by {self.world} trainers with "
                    f"row-wise tables, and its shard {path.name} is missing"
                ) from None
            except Exception as exc:
                raise CheckpointError(f"shard {path} cannot be loaded: {exc}") from exc
            if loaded.get("world") != self.world or loaded.get("step") != self.step:
                raise CheckpointError(f"shard {path} is not shard {rank} of {self.world} at step {self.step}")
            self._files[rank] = loaded
        return self._files[rank]

    def rows(self, j: int, rows: int, dim: int, lo: int, hi: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Rows [lo, hi) of table ``j`` (``rows`` x ``dim``) and their optimizer state."""
        if j not in self.sharded:
            weight = self.state["model"][_key(j)]
            if tuple(weight.shape) != (rows, dim):
                raise CheckpointError(
                    f"table {j} was saved as {list(weight.shape)}; the model's is [{rows}, {dim}]"
                )
            sparse = self.state["optim"]["sparse"]
            saved = sparse["state"].get(j, {}) if sparse is not None else {}
            return weight[lo:hi].clone(), _slice_state(saved, rows, dim, lo, hi)
        if self.sharded[j] != rows:
            raise CheckpointError(f"table {j} was saved with {self.sharded[j]} rows; the model's has {rows}")
        bounds = row_bounds(rows, self.world)
        pieces: list[torch.Tensor] = []
        states: list[dict[str, Any]] = []
        for r in range(self.world):
            start, end = bounds[r], bounds[r + 1]
            a, b = max(lo, start), min(hi, end)
            if a >= b and not (r == 0 and lo >= hi):  # an empty range still needs the counters
                continue
            table = self._shard(r)["tables"][j]
            if (table["start"], table["end"]) != (start, end):
                raise CheckpointError(f"shard {r} of table {j} holds rows [{table['start']}, {table['end']})")
            pieces.append(table["weight"][a - start : max(a, b) - start])
            states.append(_slice_state(table["optim"], end - start, dim, a - start, max(a, b) - start))
        weight = torch.cat(pieces) if pieces else torch.empty(0, dim)  # a copy: the files can go
        merged = {
            k: torch.cat([s[k] for s in states]) if _is_rows_slice(v, dim) else v
            for k, v in (states[0] if states else {}).items()
        }
        return weight, merged


def _is_rows_slice(value: Any, dim: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == dim


def load_model_state(
    model: Trainable, optim: Optimizers, state: Mapping[str, Any], store: object, step: int
) -> None:
    """Restore the model and its optimizers from the step's main checkpoint ``state`` and, for
    tables that are row-wise now or were when saved, from the rows this trainer owns now."""
    tables = row_wise_tables(model)
    saved = _SavedTables(state, store.directory if isinstance(store, CheckpointStore) else None, step)
    if not tables and not saved.sharded:
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        return
    moved = sorted(set(tables) | set(saved.sharded))
    dense = {k: v for k, v in state["model"].items() if k not in {_key(j) for j in moved}}
    missing, unexpected = model.load_state_dict(dense, strict=False)
    if unexpected or set(missing) != {_key(j) for j in moved}:
        raise CheckpointError(
            f"the checkpoint at step {step} does not fit the model: missing {sorted(set(missing))}, "
            f"unexpected {sorted(unexpected)}"
        )
    optim_state = dict(state["optim"])
    if optim_state["sparse"] is not None:
        sparse = dict(optim_state["sparse"])
        sparse["state"] = {j: s for j, s in sparse["state"].items() if j not in moved}
        optim_state["sparse"] = sparse
    optim.load_state_dict(optim_state)
    params = model.embedding_parameters()
    for j in moved:
        param = params[j]
        table = cast(DLRM, model).embeddings[j]  # only a built-in model has row-wise tables
        rows = table.num_embeddings if isinstance(table, RowWiseTable) else param.shape[0]
        lo, hi = (table.start, table.end) if isinstance(table, RowWiseTable) else (0, rows)
        weight, opt = saved.rows(j, rows, param.shape[1], lo, hi)
        with torch.no_grad():
            param.copy_(weight)
        if optim.sparse is not None:
            optim.sparse.state[param] = {
                k: v.to(param.device) if _is_rows_slice(v, param.shape[1]) else v for k, v in opt.items()
            }
