"""Two towers: the user's features and the item's each become a vector; the logit is their dot
product plus a bias. Retrieval models are trained this way because the item tower can be run once
per item and indexed; for click prediction it is a cheaper, weaker cousin of DLRM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.protocol import Features, FeatureSchema, SparseFeature


def _mlp(fan_in: int, widths: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k, width in enumerate(widths):
        layers.append(nn.Linear(fan_in, width))
        if k < len(widths) - 1:
            layers.append(nn.ReLU())
        fan_in = width
    return nn.Sequential(*layers)


class Tower(nn.Module):
    """Embeddings of some sparse columns (pooled as the schema says) and some dense columns, an MLP."""

    def __init__(
        self,
        schema: FeatureSchema,
        sparse: Sequence[SparseFeature],
        dense: Sequence[int],
        widths: Sequence[int],
    ) -> None:
        super().__init__()
        d = schema.embedding_dim
        single = [f.name for f in schema.single_hot]
        self.columns = [
            (f.name, f.multi_hot, single.index(f.name) if not f.multi_hot else -1) for f in sparse
        ]
        # sparse=True: the product trains these with its sparse optimizer (the protocol's split).
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(f.num_embeddings, d, mode=f.pooling, sparse=True) for f in sparse
        )
        self.dense = list(dense)
        self.mlp = _mlp(d * len(sparse) + len(self.dense), widths)

    def forward(self, features: Features) -> torch.Tensor:
        n = len(features)
        parts: list[torch.Tensor] = []
        for (name, multi_hot, column), table in zip(self.columns, self.tables, strict=True):
            if multi_hot:
                bag = features.bags[name]
                parts.append(table(bag.ids, bag.offsets))
            else:
                ids = features.sparse[:, column]
                parts.append(table(ids, torch.arange(n, device=ids.device)))
        if self.dense:
            dense = torch.nan_to_num(features.dense[:, self.dense])
            parts.append(torch.sign(dense) * torch.log1p(dense.abs()))
        out: torch.Tensor = self.mlp(torch.cat(parts, dim=1))
        return out


class TwoTower(nn.Module):
    def __init__(self, schema: FeatureSchema, user_features: Sequence[str], tower: Sequence[int]) -> None:
        super().__init__()
        unknown = sorted(set(user_features) - {f.name for f in schema.sparse} - set(schema.dense))
        if unknown:
            raise ValueError(f"options.user_features names {unknown}, not columns of the schema")
        user_sparse = [f for f in schema.sparse if f.name in user_features]
        item_sparse = [f for f in schema.sparse if f.name not in user_features]
        if not user_sparse or not item_sparse:
            raise ValueError("each tower needs at least one sparse column: set options.user_features")
        user_dense = [k for k, name in enumerate(schema.dense) if name in user_features]
        item_dense = [k for k, name in enumerate(schema.dense) if name not in user_features]
        self.user = Tower(schema, user_sparse, user_dense, tower)
        self.item = Tower(schema, item_sparse, item_dense, tower)
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, features: Features) -> torch.Tensor:
        return (self.user(features) * self.item(features)).sum(dim=1) + self.bias


def build(schema: FeatureSchema, options: dict[str, Any]) -> TwoTower:
    """The protocol's factory."""
    default_user = [f.name for f in schema.sparse if f.name.startswith("user")] + list(schema.dense)
    user_features = list(options.get("user_features") or default_user)
    tower = [int(w) for w in options.get("tower") or [32, 16]]
    with torch.random.fork_rng(devices=[]):  # seeded, without moving the caller's random state
        torch.manual_seed(int(options.get("seed", 0)))
        return TwoTower(schema, user_features, tower)
