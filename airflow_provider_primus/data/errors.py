"""Errors of the data layer, in one place so every adapter and the planner raise the same types."""

from __future__ import annotations

from airflow_provider_primus.data.model import MissingPartition
from airflow_provider_primus.errors import PrimusError


class PlanCancelled(PrimusError):
    """Planning was cancelled (Ctrl-C, a killed Airflow task); nothing partial is returned."""


class MissingPartitionError(PrimusError):
    """A partition required by policy ``fail`` (or still absent after ``wait``) is missing."""

    def __init__(self, missing: MissingPartition) -> None:
        super().__init__(f"source {missing.source!r}: partition {missing.path} is missing ({missing.reason})")
        self.missing = missing


class CorruptFileError(PrimusError):
    """A data file that cannot be read or decoded (corrupt, truncated, not of its format)."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"cannot read {path}: {detail}")
        self.path = path


class FileChangedError(CorruptFileError):
    """A file changed between planning and reading (an object's ETag, a file's size, modification
    time or Parquet footer differ from the planned ones): the plan's row numbers do not describe it
    any more, so it is refused rather than read, and its task is quarantined as a corrupt one is."""


class TableError(PrimusError):
    """A table source cannot be planned as its contract says: the catalog or table cannot be loaded,
    a column is missing, the table holds what is refused rather than misread (row-level deletes)."""


class TableRewrittenError(TableError):
    """Files an earlier plan of a window held were removed by a later snapshot (compaction, overwrite,
    delete) and the source's ``on_rewrite`` policy is ``fail``: their rows may be trained already."""
