"""What the runtime needs of any model it trains, built-in or the user's own.

The trainer, the optimizer pair, placement, checkpoints and the held-out evaluation all call the
model as ``model(sparse, dense, bags)`` (``bags``: the multi-hot columns by name, empty or None when
the schema has none) and ask it for its parameter split; nothing else. Keeping that
surface one small base class is what lets a user's module (training/user_model.py) train through
exactly the loop the built-in DLRM does, on the same hot path.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from airflow_provider_primus.data.bags import Bag

__all__ = ["Trainable"]


class Trainable(nn.Module):
    """A model the runtime can train: ``forward(sparse [B, S] int64, dense [B, D] float32, bags)
    -> [B]`` logits, its embedding tables (trained by the sparse optimizer) apart from the rest."""

    num_sparse: int
    num_dense: int
    # What the model does to the dense values itself (a checkpoint records it; "none": nothing).
    dense_transform: str

    def embedding_parameters(self) -> list[nn.Parameter]:
        raise NotImplementedError

    def dense_parameters(self) -> list[nn.Parameter]:
        embedding_ids = {id(p) for p in self.embedding_parameters()}
        return [p for p in self.parameters() if id(p) not in embedding_ids]

    def forward(
        self, sparse: torch.Tensor, dense: torch.Tensor, bags: Mapping[str, Bag] | None = None
    ) -> torch.Tensor:
        raise NotImplementedError
