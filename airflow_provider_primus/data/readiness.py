"""Is a files source's data for a time range there yet? The one check behind the partition sensor.

``DataPartitionSensor.poke`` (a worker, blocking) and ``DataPartitionTrigger`` (the triggerer, which
runs this in a thread) call the same function, so a poke and a deferral can never disagree about
what "ready" means. The partition times and folders come from the planner's own helpers
(``partition_times``, ``FileSource.render_path``, ``open_filesystem``, ``list_partition``), so the
sensor waits for exactly the partitions a plan over the same range would read.

Ready means: the source's success marker exists when it declares one (writers put the marker last,
so a marker vouches for the data — an empty partition with a marker is a real, empty hour); without
a marker, at least one data file of the source's format. An empty folder is a writer that has not
started, not an empty partition, so it stays missing. The source's ``missing`` policy does not apply:
it tells the planner how to treat a gap, whereas a sensor exists to wait for one to close.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.loader import load_data_spec
from airflow_provider_primus.contracts.sources import FileSource
from airflow_provider_primus.data.model import MissingPartition
from airflow_provider_primus.data.sources.files import list_partition, open_source_filesystem, partition_times
from airflow_provider_primus.errors import PrimusError

__all__ = [
    "Readiness",
    "ReadinessError",
    "check_partitions",
    "check_source",
    "load_files_source",
    "parse_time",
]

# Listings are round trips (~20 ms on an object store); a day of hourly partitions is 24 of them.
DEFAULT_WORKERS = 16


class ReadinessError(ValueError, PrimusError):
    """The question cannot be asked: unreadable spec, unknown or non-files source, or a bad range.

    Waiting cannot fix any of these, so callers fail at once instead of polling until a timeout.
    """


@dataclass(frozen=True)
class Readiness:
    """Every partition of one source in [start, end), each ready or missing with the reason."""

    source: str
    ready: tuple[str, ...]  # partition folders, in time order
    missing: tuple[MissingPartition, ...]  # in time order

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def missing_paths(self) -> list[str]:
        return [m.path for m in self.missing]

    def describe_missing(self, limit: int = 10) -> str:
        """One line a person reads in the task log: the first few gaps and why."""
        shown = "; ".join(f"{m.path} ({m.reason})" for m in self.missing[:limit])
        more = f"; and {len(self.missing) - limit} more" if len(self.missing) > limit else ""
        return (
            f"{len(self.missing)} of {len(self.missing) + len(self.ready)} partitions missing: {shown}{more}"
        )


def parse_time(value: str | datetime, what: str = "time") -> datetime:
    """An ISO 8601 string (as Airflow renders ``data_interval_start.isoformat()``) or a datetime, in
    UTC; naive values are taken as UTC, like the spec's windows, so every machine reads the same hours."""
    if isinstance(value, datetime):
        parsed = value
    else:
        text = str(value).strip()
        if not text:
            raise ReadinessError(
                f"{what} is empty: this run has no data interval (a manual run without a logical "
                "date?); pass start and end explicitly"
            )
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ReadinessError(f"{what} must be an ISO 8601 time, got {text!r}") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def load_files_source(spec_path: str | Path, source: str) -> FileSource:
    """The named files source of a PrimusData document; ``ReadinessError`` says why not."""
    try:
        spec = load_data_spec(spec_path)
    except SpecError as exc:
        raise ReadinessError(f"invalid PrimusData {spec_path}: {exc}") from None
    try:
        found = spec.spec.source(source)
    except KeyError as exc:
        raise ReadinessError(str(exc.args[0])) from None
    if not isinstance(found, FileSource):
        raise ReadinessError(
            f"source {source!r} is a {found.type} source; partition readiness applies to files sources "
            "(wait on a stream with StreamFreshnessSensor)"
        )
    return found


def _partition_reason(fs: pafs.FileSystem, path: str, source: FileSource) -> str | None:
    """None when the partition is ready, else why it is not."""
    try:
        found = list_partition(fs, path, fmt=source.format, success_marker=source.success_marker)
    except OSError as exc:  # pyarrow's I/O errors: often transient on object stores, so keep waiting
        return f"cannot list: {exc}"
    if isinstance(found, str):
        return found
    if not found and not source.success_marker:
        return f"no {source.format} data files yet"
    return None


def check_partitions(
    source: FileSource,
    start: datetime,
    end: datetime,
    *,
    known_ready: Collection[str] = (),
    workers: int = DEFAULT_WORKERS,
    filesystem: Callable[[str], tuple[pafs.FileSystem, str]] | None = None,
) -> Readiness:
    """List every partition of ``source`` in [start, end) once (blocking: call it from a thread in
    async code). ``known_ready`` skips partitions a previous poll found ready — a success marker is
    never taken back — so a long wait lists only what is still missing."""
    if end <= start:
        raise ReadinessError(f"end ({end.isoformat()}) must be after start ({start.isoformat()})")
    try:
        fs, root = filesystem(source.uri) if filesystem is not None else open_source_filesystem(source)
    except (OSError, ValueError) as exc:  # pyarrow: unknown scheme, bad URI (ArrowInvalid is a ValueError)
        raise ReadinessError(f"source {source.name!r}: cannot open {source.uri}: {exc}") from None
    partitions = [
        (t, f"{root}/{source.render_path(t)}") for t in partition_times(start, end, source.granularity)
    ]
    skip = set(known_ready)
    todo = [(t, path) for t, path in partitions if path not in skip]
    if len(todo) > 1 and workers > 1:
        with ThreadPoolExecutor(
            max_workers=min(workers, len(todo)), thread_name_prefix="primus-ready"
        ) as pool:
            reasons = list(pool.map(lambda item: _partition_reason(fs, item[1], source), todo))
    else:
        reasons = [_partition_reason(fs, path, source) for _, path in todo]
    why = {path: reason for (_, path), reason in zip(todo, reasons, strict=True)}
    ready = tuple(path for _, path in partitions if why.get(path) is None)
    missing = tuple(
        MissingPartition(source.name, t, path, reason)
        for t, path in partitions
        if (reason := why.get(path)) is not None
    )
    return Readiness(source.name, ready, missing)


def check_source(spec_path: str | Path, source: str, start: str | datetime, end: str | datetime) -> Readiness:
    """Load, parse and check in one call: what a sensor's poke does."""
    files = load_files_source(spec_path, source)
    return check_partitions(files, parse_time(start, "start"), parse_time(end, "end"))
