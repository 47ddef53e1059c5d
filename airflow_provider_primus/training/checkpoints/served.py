"""A published snapshot as a model ready to score, built from what the snapshot itself records.

A snapshot's ``model.pt`` holds weights only; how to call them — the model's kind (``dlrm``,
``dcn_v2`` and its cross network), the table sizes, the MLP widths,
the feature columns in the order the model takes them, and what the model does to its dense values
(``model.dense_transform``) — is written beside them in the manifest's ``model`` record by the
trainer that published it. A serving host that rebuilt the model from its own copy of the training
spec could disagree with the trainer (a spec edited since, a default changed by an upgrade) and score
every row with inputs the model never saw in training: train/serve skew that no error reports.
Building the model from the record makes the served model the trained one, transform included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from airflow_provider_primus.training.model_kinds import DEFAULT_KIND, model_class, recorded_arguments
from airflow_provider_primus.training.trainable import Trainable
from airflow_provider_primus.training.user_model import PYTHON_KIND, user_model_from_record

__all__ = ["MODEL_RECORD", "model_record", "served_model"]

MODEL_RECORD = "model"  # the manifest key
_ARCHITECTURE = ("num_embeddings", "num_dense", "embedding_dim", "bottom_mlp", "top_mlp", "dense_transform")


class PublishedSnapshot(Protocol):
    """A local (``checkpoints/snapshots.py``) or object-store (``checkpoints/objects.py``) snapshot."""

    @property
    def version(self) -> int: ...

    @property
    def manifest(self) -> dict[str, Any]: ...

    def load_state(self) -> dict[str, Any]: ...


def model_record(
    model_args: Mapping[str, Any], sparse: Sequence[str], dense: Sequence[str], kind: str = DEFAULT_KIND
) -> dict[str, Any]:
    """The manifest's ``model`` record: the model's kind, its arguments (the seed aside: the weights
    replace what it draws) and the feature columns, in the order of the model's inputs."""
    return {
        **{key: model_args[key] for key in _ARCHITECTURE},
        "type": kind,
        **recorded_arguments(kind, dict(model_args)),
        "sparse": list(sparse),
        "dense": list(dense),
        # The multi-hot tables (column, rows, pooling), only when there are any.
        **({"multi_hot": list(model_args["multi_hot"])} if model_args.get("multi_hot") else {}),
    }


def served_model(snapshot: PublishedSnapshot) -> Trainable:
    """The published model, on the CPU, in eval mode, its weights checked against the manifest."""
    record = snapshot.manifest.get(MODEL_RECORD)
    if isinstance(record, dict) and record.get("type") == PYTHON_KIND:
        # The user's module, built from the recorded entrypoint, options and schema.
        user = user_model_from_record(record)
        user.load_state_dict(snapshot.load_state())
        return user.eval()
    missing = [k for k in _ARCHITECTURE if not isinstance(record, dict) or k not in record]
    if missing:
        raise ValueError(
            f"model version {snapshot.version}: the manifest's {MODEL_RECORD!r} record lacks {missing} "
            "(published before snapshots described their model); build the DLRM from the training "
            "spec it was trained with, model.dense_transform included"
        )
    assert isinstance(record, dict)  # for mypy: checked above
    kind = str(record.get("type", DEFAULT_KIND))  # recorded before kinds existed: a DLRM
    model = model_class(kind)(
        **{key: record[key] for key in _ARCHITECTURE},
        **recorded_arguments(kind, record),
        multi_hot=record.get("multi_hot") or (),
    )
    model.load_state_dict(snapshot.load_state())
    return model.eval()
