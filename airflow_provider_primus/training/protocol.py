"""The model protocol: what a user's model factory is given and what its module's ``forward`` sees.

A ``python`` model is ``factory(schema: FeatureSchema, options: dict) -> torch.nn.Module`` whose
``forward(features: Features) -> Tensor`` returns one logit per row (shape ``[B]``). These records
are the whole surface a user package depends on, so they are small, frozen and versioned
(``PROTOCOL_VERSION``): a field is added, never renamed or removed, within a version.

The shape follows what engineers coming from TorchRec or a plain PyTorch loop already know:
single-valued IDs as one ``[B, S]`` matrix (the fast path, as DLRM reads them), variable-length
(multi-hot) columns as a flat ``ids`` tensor with per-row ``offsets`` (``nn.EmbeddingBag``'s own
input, TorchRec's jagged layout for one key), dense values raw as ``[B, D]`` float32 (nulls as NaN;
:func:`airflow_provider_primus.training.dlrm.dense_input` is the product's transform, for models
that want it).

What the product owns for such a model: parameters of ``nn.EmbeddingBag``/``nn.Embedding`` modules
built with ``sparse=True`` are the embedding tables (the sparse optimizer's), everything else is
dense (:func:`split_parameters`); checkpoints, resume, several trainers and publishing treat the
module like the built-in ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch import nn

from airflow_provider_primus.data.bags import Bag

__all__ = [
    "PROTOCOL_VERSION",
    "Bag",
    "FeatureSchema",
    "Features",
    "SparseFeature",
    "split_parameters",
    "synthetic_features",
]

PROTOCOL_VERSION = 1

Pooling = Literal["sum", "mean"]


@dataclass(frozen=True)
class SparseFeature:
    """One sparse column: its table's row count (IDs are hashed into ``0..num_embeddings-1``),
    whether a row holds a list of IDs (``multi_hot``) and how such a list is pooled, and the longest
    list kept (``max_length``; None: no cap)."""

    name: str
    num_embeddings: int
    multi_hot: bool = False
    pooling: Pooling = "sum"
    max_length: int | None = None


@dataclass(frozen=True)
class FeatureSchema:
    """What the factory is given about the data: the sparse columns in order (single-valued ones are
    the columns of ``Features.sparse`` in this order, multi-hot ones the keys of ``Features.bags``),
    the dense columns in order, and the embedding dimension the job asks for."""

    sparse: tuple[SparseFeature, ...]
    dense: tuple[str, ...]
    embedding_dim: int
    version: int = PROTOCOL_VERSION

    @property
    def single_hot(self) -> tuple[SparseFeature, ...]:
        return tuple(f for f in self.sparse if not f.multi_hot)

    @property
    def multi_hot(self) -> tuple[SparseFeature, ...]:
        return tuple(f for f in self.sparse if f.multi_hot)

    def to_dict(self) -> dict[str, object]:
        """The form a child process, a snapshot's record and the docs carry."""
        return {
            "version": self.version,
            "embedding_dim": self.embedding_dim,
            "dense": list(self.dense),
            "sparse": [
                {
                    "name": f.name,
                    "num_embeddings": f.num_embeddings,
                    "multi_hot": f.multi_hot,
                    "pooling": f.pooling,
                    "max_length": f.max_length,
                }
                for f in self.sparse
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSchema:
        sparse = cast(Sequence[Mapping[str, Any]], data.get("sparse") or [])
        dense = cast(Sequence[str], data.get("dense") or [])
        return cls(
            sparse=tuple(SparseFeature(**dict(f)) for f in sparse),
            dense=tuple(str(d) for d in dense),
            embedding_dim=int(str(data["embedding_dim"])),
            version=int(str(data.get("version", PROTOCOL_VERSION))),
        )


@dataclass(frozen=True)
class Features:
    """A model's input for ``B`` rows: ``sparse`` ``[B, S]`` int64 (the schema's single-valued
    columns), ``dense`` ``[B, D]`` float32 raw (NaN for nulls), ``bags`` the multi-hot columns by
    name."""

    sparse: torch.Tensor
    dense: torch.Tensor
    bags: Mapping[str, Bag] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.sparse.shape[0])

    def to(self, device: torch.device) -> Features:
        return Features(
            sparse=self.sparse.to(device),
            dense=self.dense.to(device),
            bags={k: Bag(b.ids.to(device), b.offsets.to(device)) for k, b in self.bags.items()},
        )


def synthetic_features(schema: FeatureSchema, rows: int, seed: int = 0) -> Features:
    """A batch shaped by ``schema`` with IDs in range, lists of 0..max_length (at most 5 when
    uncapped) and standard-normal dense values: what validation feeds a user's model."""
    g = torch.Generator().manual_seed(seed)
    single = schema.single_hot
    sparse = (
        torch.stack([torch.randint(0, f.num_embeddings, (rows,), generator=g) for f in single], dim=1)
        if single
        else torch.zeros((rows, 0), dtype=torch.int64)
    )
    bags: dict[str, Bag] = {}
    for f in schema.multi_hot:
        longest = f.max_length if f.max_length is not None else 5
        lengths = torch.randint(0, longest + 1, (rows,), generator=g)
        offsets = torch.cumsum(lengths, 0) - lengths
        ids = torch.randint(0, f.num_embeddings, (int(lengths.sum()),), generator=g)
        bags[f.name] = Bag(ids=ids, offsets=offsets)
    dense = torch.randn(rows, len(schema.dense), generator=g)
    return Features(sparse=sparse, dense=dense, bags=bags)


def split_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(embedding tables, the rest): the weights of ``sparse=True`` embedding modules first.

    A model may say it itself with ``embedding_parameters()`` (the built-in ones do): then that is
    the first list."""
    own = getattr(model, "embedding_parameters", None)
    if callable(own):
        tables = list(own())
    else:
        tables = [
            module.weight
            for module in model.modules()
            if isinstance(module, nn.EmbeddingBag | nn.Embedding) and module.sparse
        ]
    ids = {id(p) for p in tables}
    return tables, [p for p in model.parameters() if id(p) not in ids]
