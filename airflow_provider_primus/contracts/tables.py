"""Lakehouse tables as history sources: an Apache Iceberg table named in a catalog, a Delta Lake table.

Separate from ``sources.py`` because a table is found through metadata (a catalog, snapshots,
manifests), not through a path template: the planner reads which data files hold a time range from
the table's manifests instead of listing folders. What the data files hold is still Parquet, read
by the same readers as a files source.

Pure data: a catalog's credentials are only *named* (an Airflow connection, or the catalog's own
properties that point at environment variables), as ``storage.py`` does for object stores.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, Strict, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, SourceName, StrictModel
from airflow_provider_primus.contracts.catalogs import IcebergCatalog
from airflow_provider_primus.contracts.errors import raise_issues
from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.contracts.sources import MissingPolicy, climbs_out, root_uri
from airflow_provider_primus.contracts.storage import ObjectStorage, storage_issues

# A namespace and a table name, dot-separated (namespaces may nest: ``lake.ads.clicks``).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


class RewritePolicy(StrictModel):
    """What a re-plan does when the table rewrote files an earlier plan of the same window held
    (compaction, overwrite, delete): the rows may already have been trained from the old files."""

    policy: Literal["fail", "replan"] = "fail"


class TableSource(StrictModel):
    """What an Iceberg and a Delta source share: the planner's window, its policies, where data files
    are read from, the schema (whose event time places each file in its window), and the readers'
    view of the files (Parquet, no success marker)."""

    name: SourceName
    granularity: Literal["day", "hour"] = "hour"
    # A window with no data file: a gap (skip, the default for a table, which has no empty folders
    # to mark a known-empty hour), or a broken pipeline (fail), or not yet (wait).
    missing: MissingPolicy = Field(default_factory=lambda: MissingPolicy(policy="skip"))
    on_rewrite: RewritePolicy = Field(default_factory=RewritePolicy)
    # How to reach metadata and data files on an S3-compatible store (endpoint, credentials' names).
    storage: ObjectStorage | None = None
    schema_: SourceSchema = Field(alias="schema")

    @model_validator(mode="after")
    def _needs_event_time(self) -> TableSource:
        if self.schema_.event_time is None:
            raise_issues(
                [(("schema", "event_time"), "required for a table: its column decides each file's window")]
            )
        return self

    @property
    def format(self) -> str:
        """What the data files are: the readers of a files source take it from here."""
        return "parquet"

    @property
    def success_marker(self) -> None:
        return None

    def columns(self) -> list[str]:
        return self.schema_.columns()


class IcebergSource(TableSource):
    """An Iceberg table read as history; ``granularity`` is the planner's window, each data file
    belonging to the window of its partition (an hour or day transform of the event-time column) or,
    for a table not partitioned by time, of its event-time column's lower bound."""

    type: Literal["iceberg"]
    catalog: IcebergCatalog
    table: str
    # Time travel: a snapshot id, or a branch or tag name; neither means the table's current state.
    snapshot_id: Annotated[int, Strict(), Field(gt=0)] | None = None
    ref: NonEmptyStr | None = None

    @field_validator("table")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _IDENTIFIER.fullmatch(value):
            raise ValueError(f"must be 'namespace.table' (letters, digits, '_'; got {value!r})")
        return value

    @model_validator(mode="after")
    def _one_way_to_travel(self) -> IcebergSource:
        if self.snapshot_id is not None and self.ref is not None:
            raise_issues(
                [(("ref",), "not allowed with 'snapshot_id': name one point of the table's history")]
            )
        if self.catalog.warehouse is not None and climbs_out(self.catalog.warehouse.split("://", 1)[-1]):
            raise_issues([(("catalog", "warehouse"), "must not contain a '..' segment")])
        return self

    def where(self) -> str:
        """Where the rows are, for messages."""
        return f"table {self.table} of the {self.catalog.type} catalog"


class DeltaSource(TableSource):
    """A Delta Lake table read as history: its versions are its snapshots. Each data file belongs to
    the window of its event-time column's minimum (the file statistics every Delta writer records)."""

    type: Literal["delta"]
    uri: NonEmptyStr  # the table's root: a local path, file:// or s3://
    version: Annotated[int, Strict(), Field(ge=0)] | None = None  # time travel; None: the latest

    @field_validator("uri")
    @classmethod
    def _uri_without_climbing(cls, value: str) -> str:
        return root_uri(value)

    @model_validator(mode="after")
    def _storage_fits_uri(self) -> DeltaSource:
        problems = storage_issues(self.uri, self.storage)
        if problems:
            raise_issues([(("storage" if self.storage is not None else "uri",), p) for p in problems])
        return self

    def where(self) -> str:
        return f"Delta table {self.uri}"


__all__ = ["DeltaSource", "IcebergCatalog", "IcebergSource", "RewritePolicy", "TableSource"]
