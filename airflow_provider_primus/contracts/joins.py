"""A feature-store-style enrichment step: a source's rows joined with a feature table by entity key,
**as of** each row's event time (``type: as_of_join`` in a schema's ``transforms``).

Its own module, as the python step has one: the per-column steps stay as they were. The step adds
the feature table's ``columns`` to every row: the values of the latest feature row for the row's key
whose ``time`` is at or before the row's event time. Never a later one: a feature computed after the
event would leak the future into training (the model would see what it is asked to predict).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, model_validator

from airflow_provider_primus.contracts.base import ColumnName, NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.catalogs import IcebergCatalog
from airflow_provider_primus.contracts.errors import Loc, raise_issues, suggest
from airflow_provider_primus.contracts.storage import ObjectStorage

__all__ = ["JOIN_STEP", "AsOfJoin", "FeatureTable", "join_step_issues"]

JOIN_STEP = "as_of_join"
NEEDS_EVENT_TIME = "an as_of_join needs the schema's event_time: rows join as of it"


class FeatureTable(StrictModel):
    """Where the feature rows are: Parquet files (one file or a folder of them), an Iceberg table in a
    catalog, or a Delta table; read whole by each process that joins, and again every ``refresh_s``."""

    type: Literal["files", "iceberg", "delta"]
    uri: NonEmptyStr | None = None  # files and delta: the file, folder or table root
    catalog: IcebergCatalog | None = None  # iceberg
    table: NonEmptyStr | None = None  # iceberg: namespace.table
    storage: ObjectStorage | None = None

    @model_validator(mode="after")
    def _where_fits_type(self) -> FeatureTable:
        need = {"files": ("uri",), "delta": ("uri",), "iceberg": ("catalog", "table")}[self.type]
        issues: list[tuple[Loc, str]] = [
            ((f,), f"required for a {self.type} table") for f in need if getattr(self, f) is None
        ]
        other = {"uri", "catalog", "table"} - set(need)
        issues += [
            ((f,), f"not used by a {self.type} table") for f in sorted(other) if getattr(self, f) is not None
        ]
        if issues:
            raise_issues(issues)
        return self

    @property
    def name(self) -> str:
        """What errors name (the loaders of table sources take a source's name)."""
        return f"feature table {self.table or self.uri}"


class AsOfJoin(StrictModel):
    """``columns`` of the feature table's latest row for the row's ``key`` valid at its event time."""

    type: Literal["as_of_join"]
    table: FeatureTable
    key: ColumnName  # the row's entity key column (user_id, item_id, ...)
    table_key: ColumnName | None = None  # the feature table's key column, when named otherwise
    time: ColumnName  # the feature table's column: when each feature row became valid
    time_unit: Literal["s", "ms", "us", "ns"] | None = None  # what an integer ``time`` counts (default ms)
    columns: list[ColumnName] = Field(min_length=1)
    # How often a process loads the table again (seconds): a stream's rows get the values as of the
    # last load; None loads it once per process.
    refresh_s: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = 300.0

    @property
    def outputs(self) -> list[str]:
        return list(self.columns)

    @property
    def inputs(self) -> list[str]:
        return [self.key]

    @property
    def feature_key(self) -> str:
        return self.table_key or self.key


def join_step_issues(
    step: AsOfJoin, index: int, declared: Sequence[str], event_time: str | None
) -> list[tuple[Loc, str]]:
    """What is wrong with a join against the schema it belongs to (``transforms[i]``)."""
    issues: list[tuple[Loc, str]] = []
    if event_time is None:
        issues.append((("transforms", index), NEEDS_EVENT_TIME))
    for j, name in enumerate(step.columns):
        if name not in declared:
            hint = suggest(name, declared)
            issues.append(
                (
                    ("transforms", index, "columns", j),
                    f"unknown column {name!r}; a join's columns must be declared in sparse, multi_hot or "
                    "dense" + (f"; did you mean {hint!r}?" if hint else ""),
                )
            )
    if step.key in step.columns:
        issues.append((("transforms", index, "key"), f"{step.key!r} is also a joined column"))
    return issues


def is_join_step(value: Any) -> bool:
    return (isinstance(value, Mapping) and value.get("type") == JOIN_STEP) or isinstance(value, AsOfJoin)
