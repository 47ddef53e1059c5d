"""The built-in model kinds a training contract's ``model.type`` names, and what each is built from.

The trainer, row-wise sharding and a served snapshot all build "the job's model"; each asks here
which class a kind is and which arguments beyond DLRM's it takes, so a kind is added in one place
and a snapshot records what its kind needs to be rebuilt.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_primus.contracts.training import Model
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.training.dcn_v2 import CROSS_LAYERS, DCNv2
from airflow_provider_primus.training.dlrm import DLRM

__all__ = ["DEFAULT_KIND", "KINDS", "UnknownModelKindError", "kind_arguments", "model_class"]

DEFAULT_KIND = "dlrm"
# kind -> (class, the arguments it takes beyond DLRM's, in a snapshot's record)
KINDS: dict[str, tuple[type[DLRM], tuple[str, ...]]] = {
    "dlrm": (DLRM, ()),
    "dcn_v2": (DCNv2, ("cross_layers", "cross_rank")),
}


class UnknownModelKindError(PrimusError):
    """A snapshot or a caller names a model kind this version does not build (a newer version
    published it): building some other model would score with the wrong network."""


def model_class(kind: str) -> type[DLRM]:
    found = KINDS.get(kind)
    if found is None:
        raise UnknownModelKindError(f"unknown model type {kind!r}; this version builds {', '.join(KINDS)}")
    return found[0]


def kind_arguments(model: Model) -> dict[str, Any]:
    """What ``model.type``'s class takes beyond DLRM's arguments, defaults filled in."""
    if model.type == "dcn_v2":
        return {"cross_layers": model.cross_layers or CROSS_LAYERS, "cross_rank": model.cross_rank}
    return {}


def recorded_arguments(kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """The kind's own arguments as a snapshot's record holds them."""
    model_class(kind)
    return {key: record[key] for key in KINDS[kind][1] if key in record}
