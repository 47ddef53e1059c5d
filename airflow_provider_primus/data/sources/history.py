"""Reading a history source's planned files, whatever found them: a files source's root, or a
table's data files (their filesystem, and their columns by field id).

The one place readers (data executors, the trainer's replay and holdout feeds, sampling) ask, so a
new kind of history source changes what they read in one module.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_primus.data.model import ColumnRef
from airflow_provider_primus.data.objectstore import ResolvedAccess
from airflow_provider_primus.data.sources.files import open_source_filesystem
from airflow_provider_primus.data.sources.iceberg import data_filesystem, load_table, table_columns

_columns: dict[str, dict[str, ColumnRef]] = {}
_lock = threading.Lock()


def history_filesystem(
    source: Any, resolved: Mapping[str, ResolvedAccess] | None = None
) -> tuple[pafs.FileSystem, str]:
    """The filesystem a planned task's paths are read from, and the source's root on it."""
    if source.type == "iceberg":
        return data_filesystem(source, resolved)
    return open_source_filesystem(source, resolved)


def read_fields(source: Any) -> dict[str, ColumnRef] | None:
    """A table's current columns by field id (loaded once per process and source), None for files:
    their columns are found by name."""
    if source.type != "iceberg":
        return None
    key = source.model_dump_json()
    with _lock:
        found = _columns.get(key)
    if found is None:
        found = table_columns(source, load_table(source))
        with _lock:
            _columns[key] = found
    return found


__all__ = ["history_filesystem", "read_fields"]
