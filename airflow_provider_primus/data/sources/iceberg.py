"""An Iceberg table's data files for a time range, read from its metadata instead of listings.

A plan reads the table's metadata file, its snapshot's manifest list, and the manifests whose
partition summaries can hold the range: a manifest is immutable (its path is unique), so a re-plan
reads only the manifests it has not decoded before (the plan cache keeps them). Each live data file
then belongs to one window: the hour or day its partition value names (``hours(ts)``/``days(ts)``
of the event-time column), or for a table not partitioned by that column, its lower bound on the
column. Row-level deletes are refused, never ignored: a delete file would make rows the plan counts
disappear on read, or worse, be trained.

pyiceberg is imported here only (``pip install 'airflow-provider-primus[iceberg]'``): jobs without a
table source never load it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pyarrow.fs as pafs

from airflow_provider_primus.contracts.joins import FeatureTable
from airflow_provider_primus.contracts.tables import IcebergSource
from airflow_provider_primus.data.errors import TableError
from airflow_provider_primus.data.model import ColumnRef, FileInfo, TableFile
from airflow_provider_primus.data.objectstore import ResolvedAccess, resolve_credentials
from airflow_provider_primus.data.sources.files import open_filesystem

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0}  # ns: divide by 1,000
INSTALL_HINT = "pip install 'airflow-provider-primus[iceberg]'"


@dataclass
class TablePlan:
    snapshot_id: int | None
    # The table's history, oldest first: (snapshot id, its operation: append, overwrite, delete, ...).
    operations: list[tuple[int, str]]
    windows: dict[datetime, list[FileInfo]] = field(default_factory=dict)
    round_trips: int = 0
    manifests_read: int = 0
    manifests_cached: int = 0


class ManifestStore(Protocol):
    """Decoded manifests by path (what a plan cache keeps between plans)."""

    def get_manifests(self, paths: Iterable[str]) -> dict[str, list[TableFile]]: ...

    def put_manifests(self, manifests: Mapping[str, list[TableFile]]) -> None: ...


class _NoManifests:
    def get_manifests(self, paths: Iterable[str]) -> dict[str, list[TableFile]]:
        return {}

    def put_manifests(self, manifests: Mapping[str, list[TableFile]]) -> None:
        return None


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError as exc:  # pragma: no cover - the dev install has it
        raise TableError(f"an iceberg source needs pyiceberg: {INSTALL_HINT} ({exc})") from None
    return pyiceberg.catalog


def catalog_properties(
    source: IcebergSource | FeatureTable, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """pyiceberg's properties for the source's catalog; ``extra``: what an Airflow connection gave."""
    catalog = source.catalog
    assert catalog is not None  # a feature table of type iceberg has one (its contract says so)
    props: dict[str, str] = {"type": catalog.type, **catalog.properties}
    if catalog.uri is not None:
        props["uri"] = catalog.uri
    if catalog.warehouse is not None:
        props["warehouse"] = catalog.warehouse
    storage = source.storage
    if storage is not None:
        # The storage section reaches the table's metadata as it reaches its data files: endpoint,
        # region, addressing, and the key pair it names (resolved here, in this process only).
        if storage.endpoint:
            props.setdefault("s3.endpoint", storage.endpoint)
        if storage.region:
            props.setdefault("s3.region", storage.region)
        props.setdefault("s3.force-virtual-addressing", str(storage.addressing == "virtual").lower())
        access = resolve_credentials(storage.credentials, owner=source.name, resolved=None)
        if access is not None:
            props["s3.access-key-id"] = access.credentials.access_key
            props["s3.secret-access-key"] = access.credentials.secret_key
            if access.credentials.session_token:
                props["s3.session-token"] = access.credentials.session_token
            if access.endpoint and "s3.endpoint" not in props:
                props["s3.endpoint"] = access.endpoint
    props.update(extra or {})
    return props


class _CountingIO:
    """The table's FileIO, counting the files it opens: each is one round trip to the store."""

    def __init__(self, io: Any) -> None:
        self._io = io
        self._lock = threading.Lock()
        self.opened = 0

    def new_input(self, location: str) -> Any:
        with self._lock:
            self.opened += 1
        return self._io.new_input(location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)


def load_table(source: IcebergSource | FeatureTable, extra: Mapping[str, str] | None = None) -> Any:
    """The table, its errors naming the source (a wrong identifier, an unreachable catalog)."""
    catalogs = _pyiceberg()
    props = catalog_properties(source, extra)
    assert source.catalog is not None and source.table is not None
    try:
        catalog = catalogs.load_catalog(source.catalog.name, **props)
        return catalog.load_table(source.table)
    except TableError:
        raise
    except Exception as exc:  # pyiceberg raises its own and the catalogs' errors
        raise TableError(
            f"source {source.name!r}: cannot load table {source.table!r} from the "
            f"{source.catalog.type} catalog: {type(exc).__name__}: {exc}"
        ) from None


def _snapshot(source: IcebergSource, table: Any) -> Any:
    if source.snapshot_id is not None:
        snap = table.snapshot_by_id(source.snapshot_id)
        if snap is None:
            raise TableError(
                f"source {source.name!r}: table {source.table!r} has no snapshot {source.snapshot_id}"
            )
        return snap
    if source.ref is not None:
        snap = table.snapshot_by_name(source.ref)
        if snap is None:
            known = ", ".join(sorted(table.metadata.refs)) or "none"
            raise TableError(
                f"source {source.name!r}: table {source.table!r} has no branch or tag {source.ref!r} "
                f"(refs: {known})"
            )
        return snap
    return table.current_snapshot()


def table_columns(source: IcebergSource, table: Any) -> dict[str, ColumnRef]:
    """The table's current columns by name: what the source's schema must name and readers map."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = table.schema()
    arrow = schema_to_pyarrow(schema)
    return {f.name: ColumnRef(f.field_id, arrow.field(f.name).type, bool(f.required)) for f in schema.fields}


def check_columns(source: IcebergSource, columns: Mapping[str, ColumnRef], wanted: Iterable[str]) -> None:
    missing = [c for c in dict.fromkeys(wanted) if c not in columns]
    if missing:
        raise TableError(
            f"source {source.name!r}: table {source.table!r} has no column "
            + ", ".join(repr(c) for c in missing)
            + f" (its columns: {', '.join(columns)})"
        )


def _time_partition(source: IcebergSource, table: Any, spec_id: int) -> tuple[int, str] | None:
    """The position and transform ("hour"/"day") of the spec's partition field on the event-time
    column, if it has one."""
    column = source.schema_.event_time_column
    schema = table.schema()
    try:
        source_id = schema.find_field(column).field_id
    except ValueError:
        return None
    for i, pf in enumerate(table.specs()[spec_id].fields):
        kind = type(pf.transform).__name__
        if pf.source_id == source_id and kind in ("HourTransform", "DayTransform"):
            return i, "hour" if kind == "HourTransform" else "day"
    return None


def _bound_micros(source: IcebergSource, table: Any, raw: bytes | None) -> int | None:
    """The event-time column's bound from a manifest, in microseconds since the epoch."""
    if raw is None:
        return None
    from pyiceberg.conversions import from_bytes

    event_time = source.schema_.event_time
    assert event_time is not None  # the contract requires it
    ftype = table.schema().find_field(event_time.column).field_type
    value = from_bytes(ftype, raw)
    kind = type(ftype).__name__
    if kind in ("TimestampType", "TimestamptzType"):
        return int(value)
    if kind in ("TimestampNanoType", "TimestamptzNanoType"):
        return int(value) // 1000
    if kind in ("IntegerType", "LongType"):
        unit = event_time.unit or "ms"
        return int(value) // 1000 if unit == "ns" else int(value) * UNIT_MICROS[unit]
    if kind == "DateType":
        return int(value) * 86_400_000_000
    return None  # strings and others: no window from statistics


def _decode_manifest(source: IcebergSource, table: Any, manifest: Any, io: Any) -> list[TableFile]:
    partition = _time_partition(source, table, manifest.partition_spec_id)
    column = source.schema_.event_time_column
    field_id = table.schema().find_field(column).field_id
    out: list[TableFile] = []
    for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
        data = entry.data_file
        if str(getattr(data.content, "name", data.content)).upper() != "DATA":
            raise TableError(_deletes_refused(source, f"{data.file_path} is a {data.content} file"))
        if str(getattr(data.file_format, "value", data.file_format)).upper() != "PARQUET":
            raise TableError(
                f"source {source.name!r}: {data.file_path} is {data.file_format}; "
                "only Parquet data files are read"
            )
        micros: int | None = None
        if partition is not None and data.partition[partition[0]] is not None:
            unit = 3_600_000_000 if partition[1] == "hour" else 86_400_000_000
            micros = int(data.partition[partition[0]]) * unit
        else:
            micros = _bound_micros(source, table, (data.lower_bounds or {}).get(field_id))
        out.append(TableFile(data.file_path, int(data.file_size_in_bytes), int(data.record_count), micros))
    return out


def _deletes_refused(source: IcebergSource, found: str) -> str:
    return (
        f"source {source.name!r}: table {source.table!r} has row-level delete files ({found}); they are "
        "not applied, so the table is refused rather than trained with deleted rows: rewrite its data "
        "files (a compaction that applies the deletes) or plan a snapshot from before them"
    )


def _manifest_may_hold(source: IcebergSource, table: Any, manifest: Any, lo: int, hi: int) -> bool:
    """Whether the manifest's partition summary overlaps [lo, hi) microseconds (True if it cannot say)."""
    partition = _time_partition(source, table, manifest.partition_spec_id)
    summaries = manifest.partitions or []
    if partition is None or partition[0] >= len(summaries):
        return True
    summary = summaries[partition[0]]
    if summary.lower_bound is None or summary.upper_bound is None:
        return True
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType

    unit = 3_600_000_000 if partition[1] == "hour" else 86_400_000_000
    low = int(from_bytes(IntegerType(), summary.lower_bound)) * unit
    high = (int(from_bytes(IntegerType(), summary.upper_bound)) + 1) * unit
    return low < hi and lo < high


def window_of(micros: int, granularity: str) -> datetime:
    t = EPOCH + timedelta(microseconds=micros)
    t = t.replace(minute=0, second=0, microsecond=0)
    return t.replace(hour=0) if granularity == "day" else t


def data_path(uri: str) -> str:
    """A data file's path on the filesystem :func:`data_filesystem` opens: the local path for
    ``file://``, ``bucket/key`` for an object store."""
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return uri.split("://", 1)[1] if "://" in uri else uri


def data_filesystem(
    source: IcebergSource, resolved: Mapping[str, ResolvedAccess] | None = None
) -> tuple[pafs.FileSystem, str]:
    """Where the table's data files are read: the object store of ``storage`` (or an ``s3://``
    warehouse), else the local disk."""
    warehouse = source.catalog.warehouse or ""
    if source.storage is not None or warehouse.startswith("s3://"):
        bucket = warehouse.split("://", 1)[1].split("/", 1)[0] if warehouse.startswith("s3://") else ""
        return open_filesystem(
            f"s3://{bucket}", source.storage, owner=f"source {source.name!r}", resolved=resolved
        )
    return pafs.LocalFileSystem(), ""


def plan_table(
    source: IcebergSource,
    start: datetime,
    end: datetime,
    *,
    manifests: ManifestStore | None = None,
    workers: int = 8,
    table: Any = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> TablePlan:
    """The live data files of the source's snapshot whose windows fall in [start, end), by window."""
    table = table if table is not None else load_table(source)
    store: ManifestStore = manifests if manifests is not None else _NoManifests()
    io = _CountingIO(table.io)
    snapshot = _snapshot(source, table)
    operations = [
        (s.snapshot_id, str(getattr(s.summary.operation, "value", s.summary.operation)))
        for s in table.snapshots()
        if s.summary
    ]
    out = TablePlan(snapshot_id=None if snapshot is None else snapshot.snapshot_id, operations=operations)
    out.round_trips = 1  # the table's metadata file
    if snapshot is None:
        return out
    check_columns(source, table_columns(source, table), source.columns())
    listed = snapshot.manifests(io)
    lo = int((start - EPOCH).total_seconds() * 1_000_000)
    hi = int((end - EPOCH).total_seconds() * 1_000_000)
    deletes = [m for m in listed if str(getattr(m.content, "name", m.content)).upper() == "DELETES"]
    live_deletes = [m for m in deletes if (m.added_files_count or 0) + (m.existing_files_count or 0) > 0]
    if live_deletes:
        found = f"snapshot {snapshot.snapshot_id} has {len(live_deletes)} delete manifest(s)"
        raise TableError(_deletes_refused(source, found))
    data_manifests = [m for m in listed if m not in deletes and _manifest_may_hold(source, table, m, lo, hi)]
    have = store.get_manifests(m.manifest_path for m in data_manifests)
    todo = [m for m in data_manifests if m.manifest_path not in have]
    decoded: dict[str, list[TableFile]] = {}
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
            decoding = pool.map(lambda m: _decode_manifest(source, table, m, io), todo)
            for m, files in zip(todo, decoding, strict=True):
                decoded[m.manifest_path] = files
                if cancelled():
                    break
        store.put_manifests(decoded)
    out.manifests_read = len(decoded)
    out.manifests_cached = len(have)
    out.round_trips += io.opened
    for files in (*have.values(), *decoded.values()):
        for f in files:
            if f.micros is None:
                raise TableError(
                    f"source {source.name!r}: {f.path} says nothing about its event time "
                    f"({source.schema_.event_time_column!r} has no statistics and is not a partition field)"
                )
            if not lo <= f.micros < hi:
                continue
            window = window_of(f.micros, source.granularity)
            out.windows.setdefault(window, []).append(FileInfo(data_path(f.path), f.size, rows=f.rows))
    return out


__all__ = [
    "ColumnRef",
    "ManifestStore",
    "TableFile",
    "TablePlan",
    "catalog_properties",
    "check_columns",
    "data_filesystem",
    "data_path",
    "load_table",
    "plan_table",
    "table_columns",
    "window_of",
]
