"""The trainer's model (of the kind ``model.type`` names), where it lives and its optimizers, built
from the contracts.

One place answers "which model does this job train, on which device, updated how": the runtime asks
for an :class:`AssembledModel` and never looks at the model's arguments itself, so a new model kind
or a new placement rule changes this module, not the training loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.training import PrimusTraining, multi_hot_columns, table_sizes
from airflow_provider_primus.training.checkpoints.served import model_record
from airflow_provider_primus.training.gpu import Placement, place_model, placement_for
from airflow_provider_primus.training.model_kinds import kind_arguments
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import build_model, sharding_plan
from airflow_provider_primus.training.trainable import Trainable
from airflow_provider_primus.training.user_model import (
    PYTHON_KIND,
    UserModel,
    build_user_model,
    feature_schema,
    user_record,
)

log = logging.getLogger(__name__)

__all__ = ["AssembledModel", "assemble_model"]


@dataclass
class AssembledModel:
    model: Trainable
    record: dict[str, Any]  # published with every snapshot: a serving host builds the same model
    placement: Placement
    optim: Optimizers


def assemble_model(
    training: PrimusTraining,
    data: PrimusData,
    *,
    columns: tuple[Sequence[str], Sequence[str]],
    rank: int,
    world: int,
    device: torch.device,
) -> AssembledModel:
    """The model for this trainer of ``world`` (its shards when tables are row-wise), placed on
    ``device`` or beside it, with its sparse and dense optimizers. ``columns``: the sparse and dense
    feature columns, in the order of the model's inputs."""
    spec = training.spec
    sparse_cols, dense_cols = columns
    # Sparse Adagrad builds COO gradients torch cannot cheaply validate; we opt out explicitly
    # (the default) rather than let every step warn about it.
    torch.sparse.check_sparse_tensor_invariants.disable()  # type: ignore[no-untyped-call]
    model: Trainable
    if spec.model.type == PYTHON_KIND:
        assert spec.model.entrypoint is not None  # the contract requires it for this type
        schema = feature_schema(training, data)
        model = build_user_model(spec.model.entrypoint, schema, spec.model.options, spec.seed)
        record = user_record(spec.model.entrypoint, spec.model.options, schema, sparse_cols, dense_cols)
    else:
        model, record = _built_in(training, data, columns=(sparse_cols, dense_cols), rank=rank, world=world)
    placement = placement_for(model, device, spec.optimizer.sparse.type, spec.optimizer.dense.type)
    if placement.dense != placement.embeddings and isinstance(model, UserModel):
        # A user's module moves as one: its tables cannot stay behind on the host.
        host = torch.device("cpu")
        placement = Placement(host, host, f"{placement.reason}; a python model moves as one module: the host")
    log.info("model placement: %s", placement.reason)
    place_model(model, placement)
    optim = Optimizers(
        model,
        sparse=spec.optimizer.sparse.type,
        sparse_lr=spec.optimizer.sparse.lr,
        dense=spec.optimizer.dense.type,
        dense_lr=spec.optimizer.dense.lr,
    )
    return AssembledModel(model, record, placement, optim)


def _built_in(
    training: PrimusTraining,
    data: PrimusData,
    *,
    columns: tuple[Sequence[str], Sequence[str]],
    rank: int,
    world: int,
) -> tuple[Trainable, dict[str, Any]]:
    """A built-in kind (each table replicated or row-wise per ``model.sharding``), and its record."""
    spec = training.spec
    sparse_cols, dense_cols = columns
    sizes = table_sizes(training, data)
    lists = multi_hot_columns(data)
    model_args: dict[str, Any] = {
        "num_embeddings": [sizes[c] for c in sparse_cols],
        "num_dense": len(dense_cols),
        "embedding_dim": spec.model.embedding_dim,
        "bottom_mlp": spec.model.bottom_mlp if dense_cols else [],
        "top_mlp": spec.model.top_mlp,
        "seed": spec.seed,
        "dense_transform": spec.model.dense_transform,
        **kind_arguments(spec.model),
    }
    if lists:  # absent otherwise: a model without lists records (and rebuilds) exactly as before
        model_args["multi_hot"] = [
            {"column": m.column, "num_embeddings": sizes[m.column], "pooling": m.pooling} for m in lists
        ]
    kind = spec.model.type
    # Each table replicated or row-wise per the spec's model.sharding (training/sharding.py).
    tables = [*sparse_cols, *(m.column for m in lists)]
    model = build_model(sharding_plan(spec.model.sharding, tables), rank, world, kind=kind, **model_args)
    return model, model_record(model_args, sparse_cols, dense_cols, kind)
