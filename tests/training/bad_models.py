"""Model factories that break the protocol, one way each, for the entrypoint checks' tests."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.protocol import Features, FeatureSchema

NOT_CALLABLE = 42


class _Linear(nn.Module):
    def __init__(self, schema: FeatureSchema, width: int = 1) -> None:
        super().__init__()
        self.table = nn.EmbeddingBag(schema.single_hot[0].num_embeddings, width, sparse=True)

    def forward(self, features: Features) -> torch.Tensor:
        ids = features.sparse[:, 0]
        out: torch.Tensor = self.table(ids, torch.arange(len(features)))
        return out


def two_logits(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _Linear(schema, width=2)  # [B, 2]


def column_logits(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _Linear(schema, width=1)  # [B, 1], the commonest slip


def raises(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    raise ValueError(f"unknown option {sorted(options)[0]!r}")


def not_a_module(schema: FeatureSchema, options: dict[str, Any]) -> object:
    return {"weights": [1, 2, 3]}


class _Failing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, features: Features) -> torch.Tensor:
        return features.bags["no_such_column"].ids * self.w


def failing_forward(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _Failing()


class _Constant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, features: Features) -> torch.Tensor:
        return torch.zeros(len(features), requires_grad=True)


def detached(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _Constant()


def exits(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    raise SystemExit(3)  # user code that ends the process it runs in


class _FailsOnRealBatches(nn.Module):
    """Passes the check (4 synthetic rows) and raises on the first real batch: a bug the check cannot
    see, which must fail the job with this frame in its status, not restart it forever."""

    def __init__(self, schema: FeatureSchema) -> None:
        super().__init__()
        self.inner = _Linear(schema)

    def forward(self, features: Features) -> torch.Tensor:
        if len(features) > 4:
            raise IndexError(f"batch of {len(features)} rows is larger than this model's buffer")
        return self.inner(features).squeeze(1)


def fails_on_real_batches(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _FailsOnRealBatches(schema)
