"""The built-in DLRM as a user would bring it: a factory of the model protocol (``type: python``).

``primus bench model`` trains this beside ``type: dlrm`` on the same recorded steps: the two differ
only by the protocol's path (the entrypoint, the ``Features`` record, the adapter's checks), so their
ratio is what the escape hatch costs on the hot path. Built with the job's seed from the same
generator draws, it starts from the very weights the built-in model does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.protocol import Features, FeatureSchema

__all__ = ["ENTRYPOINT", "ProtocolDLRM", "build"]

ENTRYPOINT = f"{__name__}:build"


class ProtocolDLRM(nn.Module):
    """Reads the protocol's batch, calls the built-in network: nothing else in between."""

    def __init__(self, dlrm: DLRM) -> None:
        super().__init__()
        self.dlrm = dlrm

    def forward(self, features: Features) -> torch.Tensor:
        logits: torch.Tensor = self.dlrm(features.sparse, features.dense, features.bags)
        return logits


def build(schema: FeatureSchema, options: dict[str, Any]) -> ProtocolDLRM:
    """``options``: ``bottom_mlp``, ``top_mlp``, ``dense_transform`` and ``seed`` as the built-in
    model takes them."""
    return ProtocolDLRM(
        DLRM(
            num_embeddings=[f.num_embeddings for f in schema.single_hot],
            num_dense=len(schema.dense),
            embedding_dim=schema.embedding_dim,
            bottom_mlp=list(options["bottom_mlp"]) if schema.dense else [],
            top_mlp=list(options["top_mlp"]),
            seed=int(options.get("seed", 0)),
            dense_transform=str(options.get("dense_transform", "log1p")),
            multi_hot=[
                {"column": f.name, "num_embeddings": f.num_embeddings, "pooling": f.pooling}
                for f in schema.multi_hot
            ],
        )
    )
