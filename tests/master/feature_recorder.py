"""A python model that records the features each training step gives it, for tests that check what
reaches the trainer (``options.record``: a JSON-lines file, one line per row)."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.protocol import Features, FeatureSchema


class _Recorder(nn.Module):
    def __init__(self, schema: FeatureSchema, record: str) -> None:
        super().__init__()
        self.record = record
        self.tables = nn.ModuleList(nn.Embedding(f.num_embeddings, 2, sparse=True) for f in schema.single_hot)
        self.out = nn.Linear(2 * len(schema.single_hot) + len(schema.dense), 1)

    def forward(self, features: Features) -> torch.Tensor:
        # Only a launched trainer records (it has an allotment file): not the check at submit.
        if self.training and os.environ.get("PRIMUS_ALLOTMENT_FILE"):
            with open(self.record, "a", encoding="utf-8") as f:
                for ids, values in zip(features.sparse.tolist(), features.dense.tolist(), strict=True):
                    f.write(json.dumps([ids, values]) + "\n")
        embedded = [table(features.sparse[:, i]) for i, table in enumerate(self.tables)]
        dense = torch.nan_to_num(features.dense)
        logits: torch.Tensor = self.out(torch.cat([*embedded, dense], dim=1)).squeeze(1)
        return logits


def build(schema: FeatureSchema, options: dict[str, Any]) -> nn.Module:
    return _Recorder(schema, str(options["record"]))
