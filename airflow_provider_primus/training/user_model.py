"""A user's own model (``model.type: python``) trained by the product's runtime.

The user's module speaks the model protocol (training/protocol.py: ``forward(Features) -> [B]``);
the runtime speaks ``model(sparse, dense, bags)`` (training/trainable.py). :class:`UserModel` is the adapter:
one ``Features`` record per step around the tensors the stager has already placed, nothing copied,
so a user model trains on the built-in models' hot path, with their optimizers, checkpoints, several
trainers and publishing.

A snapshot's record (:func:`user_record`) names the entrypoint, its options, the feature schema
and the version of the package that provided the factory, so a serving host builds the module that
was trained (:func:`user_model_from_record`) rather than whatever its own job document says now.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.training import (
    PrimusTraining,
    feature_columns,
    multi_hot_columns,
    table_sizes,
)
from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.errors import TerminalError, user_frames
from airflow_provider_primus.training.entrypoint import build_model
from airflow_provider_primus.training.protocol import (
    PROTOCOL_VERSION,
    Features,
    FeatureSchema,
    SparseFeature,
    split_parameters,
)
from airflow_provider_primus.training.trainable import Trainable

log = logging.getLogger(__name__)

__all__ = [
    "PYTHON_KIND",
    "UserModel",
    "UserModelError",
    "build_user_model",
    "feature_schema",
    "package_of",
    "user_model_from_record",
    "user_record",
]

PYTHON_KIND = "python"
_LIBRARY = (Path(torch.__file__).resolve().parent,)  # frames in it are not the user's


class UserModelError(TerminalError):
    """The user's model raised, or broke the protocol, while training. The same rows would do it
    again after a restart, so the job fails at once with the user's own frames in its status and
    events instead of spending its restarts in a crash loop."""


def feature_schema(training: PrimusTraining, data: PrimusData) -> FeatureSchema:
    """What the factory is told about the data: the sparse columns with their table sizes (the
    ``buckets`` override, else the hash bucket count), then the multi-hot ones with their pooling
    and cap, the dense columns, the embedding width."""
    sparse, dense = feature_columns(data)
    sizes = table_sizes(training, data)
    lists = tuple(
        SparseFeature(
            name=m.column,
            num_embeddings=sizes[m.column],
            multi_hot=True,
            pooling=m.pooling,
            max_length=m.max_length,
        )
        for m in multi_hot_columns(data)
    )
    return FeatureSchema(
        sparse=tuple(SparseFeature(name=c, num_embeddings=sizes[c]) for c in sparse) + lists,
        dense=tuple(dense),
        embedding_dim=training.spec.model.embedding_dim,
    )


class UserModel(Trainable):
    """The user's module behind the runtime's ``model(sparse, dense, bags)``."""

    def __init__(self, module: nn.Module, schema: FeatureSchema, entrypoint: str) -> None:
        super().__init__()
        self.user = module
        self.schema = schema
        self.entrypoint = entrypoint
        self.num_sparse = len(schema.single_hot)
        self.bag_columns = tuple(f.name for f in schema.multi_hot)
        self.num_dense = len(schema.dense)
        self.dense_transform = "none"  # the protocol hands the dense values over raw
        self._tables, _ = split_parameters(module)

    def embedding_parameters(self) -> list[nn.Parameter]:
        # The same Parameter objects after .to(device): modules move their parameters' data.
        return list(self._tables)

    def forward(
        self, sparse: torch.Tensor, dense: torch.Tensor, bags: Mapping[str, Bag] | None = None
    ) -> torch.Tensor:
        missing = [f.name for f in self.schema.multi_hot if f.name not in (bags or {})]
        if missing:  # the runtime's own fault, not the user's: not a UserModelError
            raise ValueError(f"multi-hot column(s) {missing} have no bag in this batch")
        try:
            logits = self.user(Features(sparse=sparse, dense=dense, bags=dict(bags or {})))
        except Exception as exc:
            raise UserModelError(f"{self.entrypoint}'s forward raised {user_frames(exc, _LIBRARY)}") from exc
        rows = sparse.shape[0]
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (rows,):
            got = f"shape {list(logits.shape)}" if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise UserModelError(
                f"{self.entrypoint} returned {got} for {rows} rows, expected logits of shape [B]"
            )
        return logits


def build_user_model(
    entrypoint: str, schema: FeatureSchema, options: Mapping[str, Any], seed: int
) -> UserModel:
    """The user's module, built with torch's generator seeded by the job's ``seed``: every trainer of
    a group builds the same initial weights (their replicated tables must agree), and a rerun too."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_model(entrypoint, schema, options)
    return UserModel(module, schema, entrypoint)


def package_of(entrypoint: str) -> dict[str, str] | None:
    """The installed distribution that provides the entrypoint's top-level package, and its version
    (None when it is imported from a path rather than installed)."""
    top = entrypoint.split(":", 1)[0].split(".", 1)[0]
    for name in importlib.metadata.packages_distributions().get(top, []):
        try:
            return {"name": name, "version": importlib.metadata.version(name)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def user_record(
    entrypoint: str,
    options: Mapping[str, Any],
    schema: FeatureSchema,
    sparse: Sequence[str],
    dense: Sequence[str],
) -> dict[str, Any]:
    """A snapshot's ``model`` record for a python model: enough to build the same module again."""
    return {
        "type": PYTHON_KIND,
        "entrypoint": entrypoint,
        "options": dict(options),
        "schema": schema.to_dict(),
        "package": package_of(entrypoint),
        "protocol_version": PROTOCOL_VERSION,
        "dense_transform": "none",
        "sparse": list(sparse),
        "dense": list(dense),
    }


def user_model_from_record(record: Mapping[str, Any]) -> UserModel:
    """The recorded module, built in this process (its weights are loaded by the caller). A serving
    host whose package version differs from the trained one is told so: its factory may build
    another network, which loading the weights then refuses by name."""
    entrypoint = str(record["entrypoint"])
    recorded = record.get("package")
    here = package_of(entrypoint)
    if isinstance(recorded, dict) and here is not None and here.get("version") != recorded.get("version"):
        log.warning(
            "%s was trained with %s %s; this host has %s", entrypoint, recorded.get("name"),
            recorded.get("version"), here.get("version"),
        )  # fmt: skip
    schema = FeatureSchema.from_dict(record["schema"])
    return build_user_model(entrypoint, schema, record.get("options") or {}, seed=0)
