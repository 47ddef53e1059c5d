"""Row-wise sharded embedding tables: a table too large for one trainer is split across all of them.

A ``row_wise`` table of ``n`` rows is cut into one contiguous range per trainer (trainer r of W owns
rows ``[n*r//W, n*(r+1)//W)``; :func:`row_bounds`). Contiguous rather than hashed: the transform
layer has already hashed every sparse ID into its bucket, so the IDs of a batch are spread evenly
over the range anyway, and a range makes re-sharding to another trainer count a slice of the
concatenated shards (training/checkpoints/shards.py) instead of a reshuffle.

**A lookup** (:class:`RowWiseTable`, called like ``EmbeddingBag(mode="sum")``) is three
``all_to_all_single`` exchanges on the trainers' process group: how many IDs each trainer sends to
each owner, the IDs themselves (grouped by owner), and the owners' rows back to the askers. The
**backward** is the reverse of the last one: each asker's gradient rows go back to their owners,
which build a sparse gradient of their shard from them (rows asked for by several trainers sum, as
the replicated path's all-reduce sums them), so each trainer's sparse optimizer updates its own
rows only. Every trainer takes part in every step's exchanges, with zero IDs when it has no rows:
:func:`exchanges_rows` tells the updater (training/update.py) to run the forward and backward then.
gloo supports ``all_to_all_single`` on CPU tensors (uneven splits included), NCCL on CUDA tensors.

A multi-hot column's table shards the same way: its IDs are looked up across the trainers like any
others, and the rows come back to the asker, which pools them itself: a sum over its own rows (the
per-owner partial sums add up to the same thing), a mean that sum over the list's length (an empty
list pools to zeros, as ``EmbeddingBag`` does).

Replicated tables stay ``nn.EmbeddingBag`` and are all-reduced as before (training/distributed.py);
the shards' gradients are sparse, which is how that all-reduce knows to leave them alone.

The initial values of a sharded table are exactly those of the replicated one: the same generator
draws the same sequence, a chunk at a time, and each trainer keeps the chunks' rows that are its own
(:func:`_draw_rows`), so a trainer never holds more than its shard and one chunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.distributed as dist
from torch import nn

from airflow_provider_primus.training.dlrm import DLRM, init_bound
from airflow_provider_primus.training.model_kinds import DEFAULT_KIND, model_class

__all__ = [
    "REPLICATED",
    "ROW_WISE",
    "RowWiseTable",
    "ShardedDLRM",
    "build_model",
    "exchanges_rows",
    "full_state_dict",
    "row_bounds",
    "row_wise_tables",
    "sharding_plan",
]

Sharding = Literal["replicated", "row_wise"]
REPLICATED: Sharding = "replicated"
ROW_WISE: Sharding = "row_wise"
# Rows drawn at a time while initialising a shard: bounds the scratch memory next to the shard.
_DRAW_CHUNK_ROWS = 16_384


def row_bounds(rows: int, world: int) -> list[int]:
    """Trainer r of ``world`` owns rows ``[bounds[r], bounds[r + 1])`` of a table of ``rows`` rows."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    return [rows * r // world for r in range(world + 1)]


def _draw_rows(rows: int, dim: int, generator: torch.Generator, start: int, end: int) -> torch.Tensor:
    """Rows ``[start, end)`` of what ``embedding_table(rows, dim, generator)`` would draw, leaving
    ``generator`` where drawing the whole table leaves it (uniform_ draws element by element in
    order, so chunked draws equal one big draw: tests/training/test_sharding.py checks it)."""
    bound = init_bound(rows)
    out = torch.empty(end - start, dim)
    scratch = torch.empty(min(_DRAW_CHUNK_ROWS, rows), dim)
    for lo in range(0, rows, _DRAW_CHUNK_ROWS):
        hi = min(lo + _DRAW_CHUNK_ROWS, rows)
        chunk = scratch[: hi - lo]
        chunk.uniform_(-bound, bound, generator=generator)
        keep_lo, keep_hi = max(lo, start), min(hi, end)
        if keep_lo < keep_hi:
            out[keep_lo - start : keep_hi - start] = chunk[keep_lo - lo : keep_hi - lo]
    return out


@dataclass
class _Exchange:
    """One lookup's routing, kept for its backward: who sent what to whom, in which order."""

    order: torch.Tensor  # the asker's IDs sorted by owner: positions into the original batch
    send: list[int]  # IDs this trainer sent to each owner
    recv: list[int]  # IDs this trainer received from each asker
    local: torch.Tensor  # the received IDs as rows of this trainer's shard
    shape: torch.Size  # the shard's


def _all_to_all(rows: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
    out = rows.new_empty((sum(recv), *rows.shape[1:]))
    dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv, input_split_sizes=send)
    return out


class _RowWiseLookup(torch.autograd.Function):
    """Rows of a sharded table for a batch of IDs (forward) and their gradients back to the owners
    as a sparse gradient of the local shard (backward)."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, ids: torch.Tensor, table: RowWiseTable) -> torch.Tensor:
        world = table.world
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= table.num_embeddings):
            raise IndexError(
                f"IDs [{int(ids.min())}, {int(ids.max())}] are outside this row-wise table's "
                f"{table.num_embeddings} rows"
            )
        owners = torch.searchsorted(table.owner_bounds, ids, right=True)
        order = torch.argsort(owners, stable=True)
        send = torch.bincount(owners, minlength=world)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        send_counts, recv_counts = send.tolist(), recv.tolist()
        asked = _all_to_all(ids[order], send_counts, recv_counts)
        local = asked - table.start
        answered = _all_to_all(weight.detach()[local], recv_counts, send_counts)
        out = torch.empty_like(answered)
        out[order] = answered
        ctx.exchange = _Exchange(order, send_counts, recv_counts, local, weight.shape)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ex: _Exchange = ctx.exchange
        returned = _all_to_all(grad[ex.order], ex.send, ex.recv)
        sparse = torch.sparse_coo_tensor(ex.local.unsqueeze(0), returned, ex.shape)
        return sparse, None, None


class RowWiseTable(nn.Module):
    """This trainer's rows ``[start, end)`` of a table of ``num_embeddings`` rows, looked up across
    all trainers. Called as ``table(ids, offsets)``: bags of IDs pooled as ``mode`` says (``one``:
    one ID a bag, a single-valued column's; ``sum`` or ``mean`` as ``EmbeddingBag``'s modes), so it
    stands in for a replicated table in :class:`DLRM` unchanged."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        rank: int,
        world: int,
        weight: torch.Tensor,
        *,
        mode: str = "one",
    ):
        super().__init__()
        if mode not in ("one", "sum", "mean"):
            raise ValueError(f"mode must be 'one', 'sum' or 'mean', got {mode!r}")
        self.mode = mode
        bounds = row_bounds(num_embeddings, world)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.rank, self.world = rank, world
        self.start, self.end = bounds[rank], bounds[rank + 1]
        if tuple(weight.shape) != (self.end - self.start, embedding_dim):
            raise ValueError(
                f"trainer {rank} of {world} owns rows [{self.start}, {self.end}) of this table; "
                f"got a weight of shape {list(weight.shape)}"
            )
        self.weight = nn.Parameter(weight)
        # The first row of every owner but the first: searchsorted(..., right=True) is the owner.
        self.owner_bounds: torch.Tensor
        self.register_buffer("owner_bounds", torch.tensor(bounds[1:-1], dtype=torch.int64), persistent=False)

    def extra_repr(self) -> str:
        return (
            f"rows [{self.start}, {self.end}) of {self.num_embeddings}, dim {self.embedding_dim}, "
            f"trainer {self.rank} of {self.world}, mode {self.mode}"
        )

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        if self.world == 1:  # one shard: the whole table, still with a sparse gradient
            return nn.functional.embedding(ids, self.weight, sparse=True)
        return cast(torch.Tensor, _RowWiseLookup.apply(self.weight, ids, self))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        ids = ids.to(torch.int64)
        vectors = self._rows(ids)
        bags = offsets.shape[0]
        if self.mode == "one" and bags == ids.shape[0]:  # a single-valued column: rows are the bags
            return vectors
        # right=True: an empty bag shares its offset with the next, whose IDs these are.
        bag_of = torch.searchsorted(offsets, torch.arange(ids.shape[0], device=ids.device), right=True) - 1
        pooled = vectors.new_zeros((bags, self.embedding_dim)).index_add(0, bag_of, vectors)
        if self.mode != "mean":
            return pooled
        lengths = torch.bincount(bag_of, minlength=bags).clamp(min=1).to(pooled.dtype)
        return pooled / lengths.unsqueeze(1)


class ShardedDLRM(DLRM):
    """A :class:`DLRM` whose tables are replicated or row-wise per ``plan`` (one entry per sparse
    column, in order), as trainer ``rank`` of ``world``. Everything else is DLRM's, unchanged."""

    def __init__(self, *, plan: Sequence[Sharding], rank: int, world: int, **dlrm: Any) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        # Read by _make_tables during DLRM.__init__, before nn.Module's bookkeeping exists.
        object.__setattr__(self, "_plan", list(plan))
        object.__setattr__(self, "_shard_of", (rank, world))
        super().__init__(**dlrm)

    def _make_tables(
        self,
        num_embeddings: Sequence[int],
        embedding_dim: int,
        generator: torch.Generator,
        modes: Sequence[str],
    ) -> list[nn.Module]:
        plan: list[Sharding] = self.__dict__["_plan"]
        rank, world = self.__dict__["_shard_of"]
        if len(plan) != len(num_embeddings):
            raise ValueError(
                f"the sharding plan names {len(plan)} tables; the model has {len(num_embeddings)}"
            )
        tables: list[nn.Module] = []
        for n, choice, mode in zip(num_embeddings, plan, modes, strict=True):
            if choice == ROW_WISE:
                bounds = row_bounds(n, world)
                rows = _draw_rows(n, embedding_dim, generator, bounds[rank], bounds[rank + 1])
                tables.append(RowWiseTable(n, embedding_dim, rank, world, rows, mode=mode))
            elif choice == REPLICATED:
                tables.extend(super()._make_tables([n], embedding_dim, generator, [mode]))
            else:
                raise ValueError(f"unknown sharding {choice!r}; choose {REPLICATED!r} or {ROW_WISE!r}")
        return tables


def sharding_plan(choices: Mapping[str, str], columns: Sequence[str]) -> list[Sharding]:
    """Each table's sharding (the training spec's ``model.sharding``; default replicated), for
    ``columns``: the sparse columns, then the multi-hot ones, the model's table order. A name that
    is not one of them is an error naming it."""
    unknown = sorted(set(choices) - set(columns))
    if unknown:
        raise ValueError(
            f"model.sharding names {unknown}, not sparse columns (sparse columns: {list(columns)})"
        )
    plan: list[Sharding] = []
    for column in columns:
        choice = choices.get(column, REPLICATED)
        if choice not in (REPLICATED, ROW_WISE):
            raise ValueError(f"model.sharding.{column}: {choice!r}; choose {REPLICATED!r} or {ROW_WISE!r}")
        plan.append(choice)
    return plan


def build_model(
    plan: Sequence[Sharding], rank: int, world: int, *, kind: str = DEFAULT_KIND, **dlrm: Any
) -> DLRM:
    """The trainer's model of ``kind`` (training/model_kinds.py): the kind's plain class when every
    table is replicated, else the same network holding this trainer's shards (:class:`ShardedDLRM`'s
    tables, the kind's interaction)."""
    cls = model_class(kind)
    if all(choice == REPLICATED for choice in plan):
        return cls(**dlrm)
    return _sharded(cls)(plan=plan, rank=rank, world=world, **dlrm)


_SHARDED: dict[type[DLRM], type[ShardedDLRM]] = {DLRM: ShardedDLRM}


def _sharded(cls: type[DLRM]) -> type[ShardedDLRM]:
    """``cls`` with row-wise tables: the sharding hook (``_make_tables``) and a kind's interaction
    hooks are disjoint, so the two compose by inheritance (one class per kind, made once)."""
    if cls not in _SHARDED:
        _SHARDED[cls] = type(f"Sharded{cls.__name__}", (ShardedDLRM, cls), {"__module__": __name__})
    return _SHARDED[cls]


def row_wise_tables(model: nn.Module) -> dict[int, RowWiseTable]:
    """The model's sharded tables by table index (empty for a replicated model)."""
    tables = getattr(model, "embeddings", None)
    if not isinstance(tables, nn.ModuleList):
        return {}
    return {j: t for j, t in enumerate(tables) if isinstance(t, RowWiseTable)}


def exchanges_rows(model: nn.Module) -> bool:
    """Whether the model's forward and backward are collective (a table sharded over >1 trainer):
    then every trainer must run both every step, with zero rows if it has none."""
    return any(t.world > 1 for t in row_wise_tables(model).values())


def full_state_dict(model: nn.Module) -> dict[str, Any]:
    """The model's state with every sharded table whole, on rank 0 (other ranks get ``{}``).
    Collective: every trainer calls it. Each shard is received straight into its rows of the whole
    table (point to point), so rank 0 holds each whole table once, one table after the other; this
    is what a published snapshot needs (serving reads one file)."""
    state = model.state_dict()
    leader = not dist.is_initialized() or dist.get_rank() == 0
    for j, table in row_wise_tables(model).items():
        if table.world == 1:
            continue
        key = f"embeddings.{j}.weight"
        shard = state.pop(key).detach().cpu()
        bounds = row_bounds(table.num_embeddings, table.world)
        if not leader:
            if shard.shape[0]:
                dist.send(shard.contiguous(), dst=0)
            continue
        whole = torch.empty((table.num_embeddings, table.embedding_dim), dtype=shard.dtype)
        whole[bounds[0] : bounds[1]] = shard
        for r in range(1, table.world):
            if bounds[r + 1] > bounds[r]:
                dist.recv(whole[bounds[r] : bounds[r + 1]], src=r)
        state[key] = whole
    return state if leader else {}
