"""What every contract model shares: strictness, immutability and the constrained field types.

Its own module so that the documents (PrimusData, PrimusTraining, PrimusJob) and the parts they are
built from (schemas, sources) validate names, times and counts by one definition.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

# A user's callable, ``package.module:attribute``: a python model's factory (training/entrypoint.py
# checks it can be built) and a python transform's function (data/user_transforms.py). One rule, here,
# because the schema and the training contract both use it and neither may import the other.
ENTRYPOINT_FORM = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?")


def as_utc(value: datetime) -> datetime:
    """Naive times are taken as UTC: a window must mean the same hours on every machine."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
            f"letter or digit, at most 63 characters (got {value!r})"
        )
    return value


def _source_name(value: str) -> str:
    if len(value) > 63 or not _SOURCE_NAME.fullmatch(value):
        raise ValueError(
            f"must be lowercase letters, digits, '-' and '_', starting and ending with a letter or "
            f"digit, at most 63 characters (got {value!r})"
        )
    return value


def _column_name(value: str) -> str:
    if not value or value.strip() != value:
        raise ValueError(f"must be a non-empty column name without surrounding spaces (got {value!r})")
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
# The patterns are repeated into the JSON Schema so a CRD rejects what the validators reject.
Name = Annotated[
    str,
    AfterValidator(_dns_label),
    Field(json_schema_extra={"pattern": f"^{_DNS_LABEL.pattern}$", "maxLength": 63}),
]
SourceName = Annotated[
    str,
    AfterValidator(_source_name),
    Field(json_schema_extra={"pattern": f"^{_SOURCE_NAME.pattern}$", "maxLength": 63}),
]
ColumnName = Annotated[str, AfterValidator(_column_name)]
NonEmptyStr = Annotated[str, AfterValidator(_non_empty), Field(json_schema_extra={"minLength": 1})]
# Strict so that YAML's ``true`` is not quietly read as 1 worker or a weight of 1.0.
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]

# Upper bounds for the counts that size memory, processes or work. A value past these is a typo or a
# unit mistake (``batch_size: 1e12``) that would otherwise validate and fail late and far from its
# cause (out of memory on the trainer, a planner that never ends). Each is generous: orders of
# magnitude above what the field's practice uses (TorchRec and Monolith batches are 1-64 Ki rows).
MAX_BATCH_ROWS = 1 << 20
MAX_ROWS = 100_000_000  # rows held at once: a task, an evaluation window
MAX_WIDTH = 65_536  # a layer's width, an embedding's dimension
MAX_BUCKETS = 1 << 31  # rows of one embedding table on one trainer
MAX_THREADS = 1_024
MAX_PROCESSES = 10_000
MAX_KEEP = 1_000  # checkpoints or published versions kept
BatchRows = Annotated[int, Strict(), Field(gt=0, le=MAX_BATCH_ROWS)]
RowCount = Annotated[int, Strict(), Field(gt=0, le=MAX_ROWS)]
Width = Annotated[int, Strict(), Field(gt=0, le=MAX_WIDTH)]
BucketCount = Annotated[int, Strict(), Field(gt=0, le=MAX_BUCKETS)]
ThreadCount = Annotated[int, Strict(), Field(gt=0, le=MAX_THREADS)]
ProcessCount = Annotated[int, Strict(), Field(gt=0, le=MAX_PROCESSES)]
KeepCount = Annotated[int, Strict(), Field(gt=0, le=MAX_KEEP)]


class StrictModel(BaseModel):
    """Unknown keys are errors and validated specs never change: the base of every contract model."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Metadata(StrictModel):
    """Kubernetes-shaped so the same document can later be applied as a custom resource.

    ``annotations`` are free-form strings, as Kubernetes has them; the contract itself writes one: what
    an older version cannot express is kept there by a conversion down (contracts/versions.py)."""

    name: Name
    annotations: dict[NonEmptyStr, str] | None = None
