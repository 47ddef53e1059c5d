"""A DLRM-style click model: embeddings for sparse IDs, MLPs for dense features, dot interactions.

The embedding tables dominate the parameter count and see only the rows a batch touches, so their
gradients are sparse (``EmbeddingBag(sparse=True)``) and they get their own optimizer
(:mod:`airflow_provider_primus.training.optim`); :meth:`DLRM.embedding_parameters` and
:meth:`DLRM.dense_parameters` are that split.

IDs are not range-checked: the transform layer hashes every sparse column into its table's bucket
count, so an out-of-range ID is a configuration error that the embedding lookup itself reports.

Multi-hot (list) columns get one ``EmbeddingBag`` each, in the pooling their schema declares (``sum``
or ``mean``; an empty list pools to zeros), after the single-valued columns' tables; each pooled
vector is one more feature of the interaction, exactly like a single ID's embedding.

Dense values are transformed inside :meth:`DLRM.forward` (:func:`dense_input`), not upstream: the
model is the one thing training, the held-out evaluation and a served snapshot all call, so none of
them can skip or repeat the transform (train/serve skew), and a stateless transform keeps checkpoints,
exact resume and sharded or elastic training exactly as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.training.trainable import Trainable

__all__ = [
    "DENSE_TRANSFORMS",
    "DLRM",
    "POOLINGS",
    "dense_input",
    "device_for",
    "embedding_table",
    "init_bound",
]

# The training contract's ``model.dense_transform`` choices (contracts/training.py), default first.
DENSE_TRANSFORMS = ("log1p", "none")
# How a multi-hot column's IDs pool (the data contract's ``multi_hot[].pooling``), default first.
POOLINGS = ("sum", "mean")


def device_for(choice: str) -> torch.device:
    """The training spec's ``device``: ``auto`` takes a GPU when torch sees one."""
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _linear(fan_in: int, fan_out: int, generator: torch.Generator) -> nn.Linear:
    # torch's default initialisation draws from (and advances) the global RNG: let it, on a fork of
    # that RNG, then overwrite. (Building on "meta" instead imports torch._dynamo: 2 s per process.)
    with torch.random.fork_rng(devices=[]):
        layer = nn.Linear(fan_in, fan_out)
    with torch.no_grad():
        # The reference DLRM's scheme: Glorot-normal weights, biases scaled by the output width.
        layer.weight.normal_(0.0, math.sqrt(2.0 / (fan_in + fan_out)), generator=generator)
        layer.bias.normal_(0.0, math.sqrt(1.0 / fan_out), generator=generator)
    return layer


def _mlp(fan_in: int, widths: Sequence[int], generator: torch.Generator, *, relu_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k, width in enumerate(widths):
        layers.append(_linear(fan_in, width, generator))
        if relu_last or k < len(widths) - 1:
            layers.append(nn.ReLU())
        fan_in = width
    return nn.Sequential(*layers)


def _check_transform(transform: str) -> None:
    if transform not in DENSE_TRANSFORMS:
        raise ValueError(f"dense_transform must be one of {list(DENSE_TRANSFORMS)}, got {transform!r}")


def dense_input(dense: torch.Tensor, transform: str) -> torch.Tensor:
    """What the bottom MLP sees of the raw dense values.

    Nulls arrive as NaN (``to_tensors``) and become 0, the neutral input, as do infinities. Then
    ``log1p`` maps each value to ``sign(x) * log(1 + |x|)``: raw logs are heavy-tailed (prices,
    counts, durations spanning orders of magnitude) and an MLP fed them as they are is dominated by
    their largest values; the reference DLRM takes ``log(x + 1)`` of Criteo's dense counts for that
    reason. The signed form is defined for every real value (a negative balance, a delta), is the
    identity near 0 (slope 1) and needs no statistics of the data, so it cannot drift between a
    backfill and the stream, and nothing about it is learned or checkpointed. ``none`` leaves the
    values as they are, for columns already scaled upstream.
    """
    _check_transform(transform)
    values = torch.nan_to_num(dense, nan=0.0, posinf=0.0, neginf=0.0)
    if transform == "log1p":
        values = torch.sign(values) * torch.log1p(values.abs())
    return values


def init_bound(rows: int) -> float:
    """A table's initial values are uniform in ±this (the reference DLRM's scheme)."""
    return math.sqrt(1.0 / rows)


def embedding_table(rows: int, dim: int, generator: torch.Generator, mode: str = "sum") -> nn.EmbeddingBag:
    # An explicit weight skips the default initialisation (and its use of the global RNG).
    bag = nn.EmbeddingBag(rows, dim, mode=mode, sparse=True, _weight=torch.empty(rows, dim))
    bound = init_bound(rows)
    with torch.no_grad():
        bag.weight.uniform_(-bound, bound, generator=generator)
    return bag


def _positive(name: str, values: Sequence[int]) -> None:
    bad = [v for v in values if v < 1]
    if bad:
        raise ValueError(f"{name} must all be >= 1, got {list(values)}")


def _multi_hot_tables(multi_hot: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, str]]:
    """(column, rows, pooling) of each multi-hot table, checked: the form a snapshot's record holds
    them in is JSON, so it is read field by field here."""
    out: list[tuple[str, int, str]] = []
    for entry in multi_hot:
        column, rows, pooling = str(entry["column"]), int(entry["num_embeddings"]), str(entry["pooling"])
        if pooling not in POOLINGS:
            raise ValueError(
                f"multi_hot column {column!r}: pooling must be one of {list(POOLINGS)}, got {pooling!r}"
            )
        _positive(f"multi_hot column {column!r}'s num_embeddings", [rows])
        out.append((column, rows, pooling))
    return out


class DLRM(Trainable):
    """Click-through logits from sparse IDs ``[n, n_sparse]``, dense features ``[n, n_dense]`` and
    the multi-hot columns' bags (``multi_hot``: ``{column, num_embeddings, pooling}`` each).

    With ``num_dense == 0`` there is no bottom MLP (``bottom_mlp`` is ignored, so one config can
    serve sources with and without dense features) and the top MLP sees only the interactions.
    ``dense_transform`` is applied to the dense values in every forward pass (:func:`dense_input`).
    """

    def __init__(
        self,
        *,
        num_embeddings: Sequence[int],
        num_dense: int,
        embedding_dim: int,
        bottom_mlp: Sequence[int],
        top_mlp: Sequence[int],
        seed: int = 0,
        dense_transform: str = DENSE_TRANSFORMS[0],
        multi_hot: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        super().__init__()
        _check_transform(dense_transform)
        _positive("num_embeddings", num_embeddings)
        lists = _multi_hot_tables(multi_hot)
        _positive("embedding_dim", [embedding_dim])
        _positive("top_mlp widths", top_mlp)
        if num_dense < 0:
            raise ValueError(f"num_dense must be >= 0, got {num_dense}")
        if num_dense > 0:
            if not bottom_mlp:
                raise ValueError("bottom_mlp must have at least one layer when num_dense > 0")
            _positive("bottom_mlp widths", bottom_mlp)
            if bottom_mlp[-1] != embedding_dim:
                # The bottom output is dotted with the embeddings, so the widths must agree.
                raise ValueError(
                    f"bottom_mlp's last width ({bottom_mlp[-1]}) must equal embedding_dim ({embedding_dim})"
                )
        n_features = len(num_embeddings) + len(lists) + (1 if num_dense > 0 else 0)
        top_in = self._top_width(n_features, num_dense, embedding_dim)

        self.num_sparse = len(num_embeddings)
        self.num_dense = num_dense
        self.embedding_dim = embedding_dim
        self.dense_transform = dense_transform
        self.bag_columns = tuple(column for column, _, _ in lists)
        generator = torch.Generator().manual_seed(seed)
        # The single-valued columns' tables, then the multi-hot ones: one list, so sharding, the
        # sparse optimizer and checkpoints treat every table alike (``embeddings.{j}``).
        self.embeddings = nn.ModuleList(
            self._make_tables(
                [*num_embeddings, *(rows for _, rows, _ in lists)],
                embedding_dim,
                generator,
                ["one"] * len(num_embeddings) + [pooling for _, _, pooling in lists],
            )
        )
        self.bottom: nn.Sequential | None = (
            _mlp(num_dense, bottom_mlp, generator, relu_last=False) if num_dense > 0 else None
        )
        self._make_interaction(n_features, generator)
        top = _mlp(top_in, top_mlp, generator, relu_last=True)
        top.append(_linear(top_mlp[-1] if top_mlp else top_in, 1, generator))
        self.top = top

    def _top_width(self, n_features: int, num_dense: int, embedding_dim: int) -> int:
        """The top MLP's input width: the pairwise dot products, and the bottom MLP's output beside
        them. The hook through which another interaction (training/dcn_v2.py) sizes the top."""
        n_pairs = n_features * (n_features - 1) // 2
        top_in = n_pairs + (embedding_dim if num_dense > 0 else 0)
        if top_in == 0:
            # One sparse feature and no dense ones: nothing to interact, the top MLP would see nothing.
            raise ValueError(
                "the model has no input to its top MLP: with num_dense == 0 it needs at least two "
                f"sparse features (got {n_features})"
            )
        return top_in

    def _make_interaction(self, n_features: int, generator: torch.Generator) -> None:
        """The interaction's own state, built after the bottom MLP and before the top one (so the
        draws from ``generator`` keep that order). The dot interaction learns nothing: its pair
        indices are buffers, so they follow the module to its device; not persistent: they derive
        from the shape."""
        del generator
        rows, cols = torch.triu_indices(n_features, n_features, offset=1)
        self.pair_rows: torch.Tensor
        self.pair_cols: torch.Tensor
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)

    def _make_tables(
        self,
        num_embeddings: Sequence[int],
        embedding_dim: int,
        generator: torch.Generator,
        modes: Sequence[str],
    ) -> list[nn.Module]:
        """The tables, drawn from ``generator`` in order before the MLPs: the hook through which a
        row-wise sharded model (training/sharding.py) builds only its own rows from the same draws.
        Each table is called as ``table(ids, offsets)`` and has its rows in ``.weight``; ``modes``
        says how each pools: ``one`` (one ID a row: a single-valued column), ``sum`` or ``mean``."""
        return [
            embedding_table(n, embedding_dim, generator, "sum" if mode == "one" else mode)
            for n, mode in zip(num_embeddings, modes, strict=True)
        ]

    def embedding_parameters(self) -> list[nn.Parameter]:
        return [cast(nn.Parameter, bag.weight) for bag in self.embeddings]

    def forward(
        self, sparse: torch.Tensor, dense: torch.Tensor, bags: Mapping[str, Bag] | None = None
    ) -> torch.Tensor:
        if sparse.dim() != 2 or sparse.shape[1] != self.num_sparse:
            raise ValueError(f"sparse must be [n, {self.num_sparse}], got {list(sparse.shape)}")
        if dense.dim() != 2 or dense.shape[1] != self.num_dense:
            raise ValueError(f"dense must be [n, {self.num_dense}], got {list(dense.shape)}")
        if sparse.shape[0] != dense.shape[0]:
            raise ValueError(f"sparse has {sparse.shape[0]} rows but dense has {dense.shape[0]}")
        n = sparse.shape[0]
        features: list[torch.Tensor] = []
        bottom_out: torch.Tensor | None = None
        if self.bottom is not None:
            bottom_out = self.bottom(dense_input(dense, self.dense_transform))
            features.append(bottom_out)
        # One ID per bag: EmbeddingBag rather than Embedding for its fused sparse-gradient kernel.
        # The tables may live on the host while the dense layers are on a GPU (training/gpu.py):
        # the lookup runs where the tables are, the pooled vectors go to the dense layers' device.
        # On one device both moves are no-ops.
        compute = next(self.top.parameters()).device
        weights = self.embedding_parameters()
        tables = weights[0].device if weights else compute
        ids = sparse.to(tables)
        offsets = torch.arange(n, device=tables, dtype=ids.dtype)
        # Without multi-hot columns every table is a single-valued column's: the loop as it always was.
        single = self.embeddings if not self.bag_columns else list(self.embeddings)[: self.num_sparse]
        features.extend(
            bag(ids[:, j], offsets).to(compute, non_blocking=True) for j, bag in enumerate(single)
        )
        if self.bag_columns:
            features.extend(self._pooled(bags or {}, n, tables, compute))
        logits: torch.Tensor = self.top(self._interact(features, bottom_out))
        return logits.squeeze(1)

    def _pooled(
        self, bags: Mapping[str, Bag], n: int, tables: torch.device, compute: torch.device
    ) -> list[torch.Tensor]:
        """Each multi-hot column's pooled vectors ``[n, d]``, in the order of its tables."""
        out: list[torch.Tensor] = []
        for k, column in enumerate(self.bag_columns):
            bag = bags.get(column)
            if bag is None:
                raise ValueError(f"multi-hot column {column!r} has no bag in this batch (got {sorted(bags)})")
            if bag.offsets.shape[0] != n:
                raise ValueError(
                    f"multi-hot column {column!r} has {bag.offsets.shape[0]} rows, the batch {n}"
                )
            table = self.embeddings[self.num_sparse + k]
            out.append(table(bag.ids.to(tables), bag.offsets.to(tables)).to(compute, non_blocking=True))
        return out

    def _interact(self, features: list[torch.Tensor], bottom_out: torch.Tensor | None) -> torch.Tensor:
        """The top MLP's input from the pooled features (``[n, d]`` each, the bottom MLP's output
        first when there are dense features)."""
        stacked = torch.stack(features, dim=1)  # [n, F, d]
        dots = torch.bmm(stacked, stacked.transpose(1, 2))  # [n, F, F]
        interactions = dots[:, self.pair_rows, self.pair_cols]  # [n, F(F-1)/2]
        return interactions if bottom_out is None else torch.cat([bottom_out, interactions], dim=1)
