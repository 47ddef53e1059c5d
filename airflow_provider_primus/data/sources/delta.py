"""A Delta Lake table's data files for a time range: its versions are its snapshots.

The first plan of a table loads its state with ``deltalake`` (the log's checkpoint and the commits
after it). The plan cache keeps the version planned and its live files, so a later plan reads only
the commits written since: one listing of ``_delta_log/`` for the newest version, then one read per
new commit (its ``add`` and ``remove`` actions). A commit that removed a file an earlier plan held
(``OPTIMIZE``, an overwrite, a ``DELETE`` that rewrote files) is the planner's to report. Deletion
vectors (rows deleted without rewriting their file) and column mapping (physical column names that
differ from the schema's) are refused with a clear error, never read past.

deltalake is imported here only (``pip install 'airflow-provider-primus[delta]'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_provider_primus.contracts.tables import DeltaSource
from airflow_provider_primus.data.errors import TableError
from airflow_provider_primus.data.model import FileInfo, TableFile
from airflow_provider_primus.data.objectstore import ResolvedAccess, resolve_credentials
from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.data.sources.iceberg import EPOCH, UNIT_MICROS, TablePlan, window_of

INSTALL_HINT = "pip install 'airflow-provider-primus[delta]'"
LOG = "_delta_log"


class DeltaStates(Protocol):
    """A table's last planned version and live files (what a plan cache keeps between plans)."""

    def get_table_state(self, fp: str) -> tuple[int, list[TableFile]] | None: ...

    def put_table_state(self, fp: str, version: int, files: list[TableFile]) -> None: ...


class _NoStates:
    def get_table_state(self, fp: str) -> tuple[int, list[TableFile]] | None:
        return None

    def put_table_state(self, fp: str, version: int, files: list[TableFile]) -> None:
        return None


def _refuse(source: DeltaSource, what: str) -> TableError:
    return TableError(f"source {source.name!r}: Delta table {source.uri} {what}")


def _micros(source: DeltaSource, value: Any) -> int | None:
    """An event-time statistic (a timestamp, an ISO string from a commit's JSON stats, or an integer
    in the schema's unit) in microseconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return int((value - EPOCH).total_seconds() * 1_000_000)
    if isinstance(value, str):
        return int((datetime.fromisoformat(value.replace("Z", "+00:00")) - EPOCH).total_seconds() * 1_000_000)
    event_time = source.schema_.event_time
    unit = (event_time.unit if event_time is not None else None) or "ms"
    return int(value) // 1000 if unit == "ns" else int(value) * UNIT_MICROS[unit]


def _load(
    source: DeltaSource, resolved: Mapping[str, ResolvedAccess] | None
) -> tuple[int, list[TableFile], Any]:
    """The table's state at the source's version (or the newest), through deltalake."""
    try:
        from deltalake import DeltaTable
    except ImportError as exc:  # pragma: no cover - the dev install has it
        raise TableError(f"a delta source needs deltalake: {INSTALL_HINT} ({exc})") from None
    try:
        table = DeltaTable(
            source.uri, version=source.version, storage_options=storage_options(source, resolved)
        )
    except Exception as exc:  # deltalake raises its own (TableNotFoundError, ...)
        raise _refuse(source, f"cannot be loaded: {type(exc).__name__}: {exc}") from None
    config = table.metadata().configuration or {}
    if config.get("delta.columnMapping.mode", "none") != "none":
        raise _refuse(source, _MAPPING)
    actions = pa.table(table.get_add_actions(flatten=True))
    vectors = [c for c in actions.column_names if c.startswith("deletionVector")]
    if any(actions.column(c).null_count < len(actions) for c in vectors):
        raise _refuse(source, _DV)
    column = source.schema_.event_time_column
    low = actions.column(f"min.{column}").to_pylist() if f"min.{column}" in actions.column_names else None
    files = []
    for i, (path, size, rows) in enumerate(
        zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            actions.column("num_records").to_pylist(),
            strict=True,
        )
    ):
        micros = _micros(source, low[i] if low else None)
        files.append(TableFile(unquote(str(path)), int(size), int(rows or 0), micros))
    return int(table.version()), files, table


_MAPPING = "uses column mapping (its files' column names are not the schema's): not read"
_DV = (
    "has deletion vectors (rows deleted without rewriting their files); they are not applied, so the table "
    "is refused rather than trained with deleted rows: purge them (REORG TABLE ... APPLY (PURGE)) or plan "
    "a version from before the deletes"
)


def storage_options(source: Any, resolved: Mapping[str, ResolvedAccess] | None) -> dict[str, str]:
    """deltalake's object-store options from the contract's storage section (endpoint, addressing);
    the key pair from the environment names it gives, as the files sources read it."""
    if source.storage is None:
        return {}
    storage = source.storage
    access = resolve_credentials(storage.credentials, owner=f"source {source.name!r}", resolved=resolved)
    options = {
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_FORCE_PATH_STYLE": str(storage.addressing == "path").lower(),
    }
    endpoint = storage.endpoint or (access.endpoint if access is not None else None)
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
    region = storage.region or (access.region if access is not None else None)
    if region:
        options["AWS_REGION"] = region
    if access is not None:
        options["AWS_ACCESS_KEY_ID"] = access.credentials.access_key
        options["AWS_SECRET_ACCESS_KEY"] = access.credentials.secret_key
        if access.credentials.session_token:
            options["AWS_SESSION_TOKEN"] = access.credentials.session_token
    return options


def _newest_version(fs: pafs.FileSystem, root: str) -> int:
    names = fs.get_file_info(pafs.FileSelector(f"{root}/{LOG}", allow_not_found=True))
    versions = [
        int(i.base_name[:20]) for i in names if i.base_name.endswith(".json") and i.base_name[:20].isdigit()
    ]
    return max(versions) if versions else -1


def _commit(fs: pafs.FileSystem, root: str, version: int) -> list[dict[str, Any]] | None:
    path = f"{root}/{LOG}/{version:020d}.json"
    try:
        with fs.open_input_stream(path) as handle:
            text = handle.read().decode()
    except FileNotFoundError:
        return None  # cleaned up by log retention: the caller loads the table instead
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def plan_delta(
    source: DeltaSource,
    start: datetime,
    end: datetime,
    *,
    states: DeltaStates | None = None,
    fp: str = "",
    resolved: Mapping[str, ResolvedAccess] | None = None,
) -> TablePlan:
    """The live data files of the table's version whose windows fall in [start, end), by window."""
    store: DeltaStates = states if states is not None else _NoStates()
    fs, root = open_filesystem(source.uri, source.storage, owner=f"source {source.name!r}", resolved=resolved)
    cached = store.get_table_state(fp)
    version: int | None = None
    files: dict[str, TableFile] = {}
    operations: list[tuple[int, str]] = []
    trips = 0
    if cached is not None:
        newest = source.version if source.version is not None else _newest_version(fs, root)
        trips += 0 if source.version is not None else 1
        if newest >= cached[0]:
            files = {f.path: f for f in cached[1]}
            version = cached[0]
            for v in range(cached[0] + 1, newest + 1):
                actions = _commit(fs, root, v)
                trips += 1
                if actions is None:
                    version = None
                    break
                operations.append((v, _apply(source, actions, files)))
                version = v
    if version is None:
        version, loaded, table = _load(source, resolved)
        files = {f.path: f for f in loaded}
        trips += 1
        operations = [(int(h["version"]), str(h.get("operation", ""))) for h in reversed(table.history(50))]
    store.put_table_state(fp, version, list(files.values()))
    out = TablePlan(snapshot_id=version, operations=operations, round_trips=trips)
    lo = int((start - EPOCH).total_seconds() * 1_000_000)
    hi = int((end - EPOCH).total_seconds() * 1_000_000)
    for f in files.values():
        if f.micros is None:
            raise _refuse(
                source,
                f"file {f.path} has no statistics for {source.schema_.event_time_column!r}: "
                "its window is unknown",
            )
        if lo <= f.micros < hi:
            path = f"{root}/{f.path}" if root else f.path
            out.windows.setdefault(window_of(f.micros, source.granularity), []).append(
                FileInfo(path, f.size, rows=f.rows)
            )
    return out


def _apply(source: DeltaSource, actions: list[dict[str, Any]], files: dict[str, TableFile]) -> str:
    """One commit's actions onto the live files; the commit's operation."""
    operation = ""
    column = source.schema_.event_time_column
    for action in actions:
        if "commitInfo" in action:
            operation = str(action["commitInfo"].get("operation", ""))
        elif "metaData" in action:
            config = action["metaData"].get("configuration") or {}
            if config.get("delta.columnMapping.mode", "none") != "none":
                raise _refuse(
                    source, "uses column mapping (its files' column names are not the schema's): not read"
                )
        elif "add" in action:
            add = action["add"]
            if add.get("deletionVector"):
                raise _refuse(source, _DV)
            stats = json.loads(add.get("stats") or "{}")
            low = (stats.get("minValues") or {}).get(column)
            path = unquote(add["path"])
            files[path] = TableFile(
                path, int(add["size"]), int(stats.get("numRecords", 0)), _micros(source, low)
            )
        elif "remove" in action:
            files.pop(unquote(action["remove"]["path"]), None)
    return operation


__all__ = ["DeltaStates", "plan_delta", "storage_options"]
