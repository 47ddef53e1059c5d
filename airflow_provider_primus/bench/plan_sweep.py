"""``primus bench plan --sweep``: the planner as the source and day counts grow, and an Iceberg table
of the largest point planned from its manifests instead of listings.

One store, built once for the largest point: ``sources`` x ``days`` x 24 hourly partitions x
``files`` Parquet files (hard links to one small file: the planner lists each partition and reads
each file's footer, so what matters is the number of objects, not their bytes). Each point of the
sweep plans the first ``days`` days of the first ``sources`` sources through :mod:`delayed_fs`
(``delay`` per listing or footer read) in a process of its own, so its peak memory is its own. Per
point: plan time, the I/O floor of its round trips on the planner's workers, the round trips, the
process's peak RSS, tasks per second.

Then the largest point's files registered in an Iceberg table (a SQL catalog on SQLite, one commit
per source and day, as a daily ingestion leaves it) and planned through a FileIO with the same delay
per file opened: the manifests replace the listings and footer reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_primus.bench.delayed_fs import delayed_filesystem
from airflow_provider_primus.bench.plan import io_floor_s
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.planner import PlanOptions, plan

log = logging.getLogger(__name__)

__all__ = ["DAYS", "SOURCES", "sweep"]

START = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = (5, 20, 60)
SOURCES = (1, 2, 8)
ROWS = 64
LINKS_PER_FILE = 50_000
SCHEMA = {
    "sparse": ["user_id", "item_id"],
    "dense": ["price"],
    "label": {"column": "label"},
    "event_time": "ts",
}


def _table() -> pa.Table:
    return pa.table(
        {
            "user_id": pa.array(range(ROWS), pa.int64()),
            "item_id": pa.array(range(ROWS), pa.int64()),
            "price": pa.array([float(i) for i in range(ROWS)], pa.float64()),
            "label": pa.array([i % 2 for i in range(ROWS)], pa.int8()),
            "ts": pa.array([START] * ROWS, pa.timestamp("us", tz="UTC")),
        }
    )


def build_store(root: Path, sources: int, days: int, files: int) -> int:
    """The sweep's store: hard links to one Parquet file; the number of files made."""
    root.mkdir(parents=True, exist_ok=True)
    original = root / "original.parquet"
    pq.write_table(_table(), original, write_page_checksum=True)
    n = 0
    target = original
    for s in range(sources):
        for d in range(days):
            for h in range(24):
                t = START + timedelta(days=d, hours=h)
                part = root / f"s{s}" / t.strftime("%Y-%m-%d") / t.strftime("%H")
                part.mkdir(parents=True, exist_ok=True)
                for f in range(files):
                    if n % LINKS_PER_FILE == 0:  # a file system caps the links to one inode (ext4: 65,000)
                        target = root / f"original-{n // LINKS_PER_FILE}.parquet"
                        shutil.copyfile(original, target)
                    os.link(target, part / f"part-{f:03d}.parquet")
                    n += 1
    return n


def _spec(root: Path, sources: int) -> Any:
    return load_data_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "sweep"},
            "spec": {
                "sources": [
                    {
                        "name": f"s{s}",
                        "type": "files",
                        "format": "parquet",
                        "uri": str(root / f"s{s}"),
                        "path_template": "{date}/{hour}",
                        "granularity": "hour",
                        "schema": SCHEMA,
                    }
                    for s in range(sources)
                ]
            },
        }
    )


def plan_point(root: Path, days: int, sources: int, delay_ms: float) -> dict[str, Any]:
    """One point, in this process: plan time, round trips, floor, peak RSS, CPU time."""
    fs, handler = delayed_filesystem(delay_ms / 1000)
    spec = _spec(root, sources)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    graph = plan(
        spec,
        START,
        START + timedelta(days=days),
        PlanOptions(filesystem=lambda uri: (fs, os.path.abspath(uri))),
    )
    plan_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    workers = spec.spec.planning.workers
    return {
        "days": days,
        "sources": sources,
        "files": graph.totals()["files"],
        "plan_s": round(plan_s, 3),
        "floor_s": round(io_floor_s(handler.counts, workers, delay_ms / 1000), 3),
        "round_trips": handler.calls,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tasks_per_s": round(len(graph.tasks) / plan_s),
        # The plan's CPU time (every thread): over the machine's cores, the floor a CPU-bound plan
        # cannot beat however many round trips are in flight.
        "cpu_s": round(cpu_s, 3),
        "cpu_floor_s": round(cpu_s / (os.cpu_count() or 1), 3),
    }


def _in_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_primus.bench.plan_sweep", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def build_iceberg(root: Path, sources: int, days: int, files: int) -> Path:
    """The store's files registered in an Iceberg table partitioned by ``hours(ts)``: data files
    described from the one file they link to (no footer read per file), one commit per source-day."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.transforms import HourTransform
    from pyiceberg.typedef import Record

    lake = root / "lake"
    (lake / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("default", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse")
    catalog.create_namespace("sweep")
    table = catalog.create_table("sweep.events", schema=_table().schema)
    with table.update_spec() as spec:
        spec.add_field("ts", HourTransform(), "ts_hour")
    table = catalog.load_table("sweep.events")
    original = root / "original.parquet"
    metadata = pq.read_metadata(original)
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(table.schema(), table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(table.schema()),
    ).to_serialized_dict()
    stats.pop("partition", None)
    size = original.stat().st_size
    for s in range(sources):
        for d in range(days):
            with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
                for h in range(24):
                    t = START + timedelta(days=d, hours=h)
                    hour = int((t - START).total_seconds() // 3600) + int(START.timestamp() // 3600)
                    folder = root / f"s{s}" / t.strftime("%Y-%m-%d") / t.strftime("%H")
                    for f in range(files):
                        data = DataFile.from_args(
                            content=DataFileContent.DATA,
                            file_path=f"file://{folder}/part-{f:03d}.parquet",
                            file_format=FileFormat.PARQUET,
                            partition=Record(hour),
                            file_size_in_bytes=size,
                            **stats,
                        )
                        data.spec_id = table.spec().spec_id
                        append.append_data_file(data)
            table = catalog.load_table("sweep.events")
    return lake


class _DelayedIO:
    """A table's FileIO with ``delay_s`` per file opened (a manifest list, a manifest)."""

    def __init__(self, io: Any, delay_s: float) -> None:
        self._io, self._delay_s, self.opened = io, delay_s, 0

    def new_input(self, location: str) -> Any:
        self.opened += 1
        time.sleep(self._delay_s)
        return self._io.new_input(location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)


def plan_iceberg_point(lake: Path, days: int, delay_ms: float) -> dict[str, Any]:
    from airflow_provider_primus.data.sources.iceberg import load_table

    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "sweep-iceberg"},
        "spec": {
            "sources": [
                {
                    "name": "events",
                    "type": "iceberg",
                    "catalog": {
                        "type": "sql",
                        "uri": f"sqlite:///{lake}/catalog.db",
                        "warehouse": f"file://{lake}/warehouse",
                    },
                    "table": "sweep.events",
                    "granularity": "hour",
                    "schema": SCHEMA,
                }
            ]
        },
    }
    spec = load_data_spec(doc)
    import pyiceberg.catalog.sql
    import pyiceberg.io.pyarrow  # noqa: F401

    t0 = time.perf_counter()
    time.sleep(delay_ms / 1000)  # the metadata file
    source = spec.spec.sources[0]
    assert source.type == "iceberg"
    table = load_table(source)
    table.io = _DelayedIO(table.io, delay_ms / 1000)
    graph = plan(spec, START, START + timedelta(days=days), PlanOptions(tables=lambda _source: table))
    plan_s = time.perf_counter() - t0
    return {
        "files": graph.totals()["files"],
        "plan_s": round(plan_s, 3),
        "round_trips": graph.totals()["round_trips"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def sweep(
    *,
    files: int = 40,
    delay_ms: float = 20.0,
    days: tuple[int, ...] = DAYS,
    sources: tuple[int, ...] = SOURCES,
    iceberg: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir, prefix="primus-bench-sweep-") as tmp:
        root = Path(tmp) / "store"
        log.info("linking %d files", max(sources) * max(days) * 24 * files)
        build_store(root, max(sources), max(days), files)
        points = []
        for d in days:
            for s in sources:
                log.info("planning %d days x %d sources", d, s)
                points.append(_in_child("point", str(root), str(d), str(s), str(delay_ms)))
                log.info("point: %s", json.dumps(points[-1]))
        out: dict[str, Any] = {"delay_ms": delay_ms, "files_per_partition": files, "sweep": points}
        if iceberg:
            log.info("registering the largest point's files in an Iceberg table")
            lake = build_iceberg(root, max(sources), max(days), files)
            log.info("planning the Iceberg table")
            found = _in_child("iceberg", str(lake), str(max(days)), str(delay_ms))
            listing = next(p for p in points if p["days"] == max(days) and p["sources"] == max(sources))
            out["iceberg"] = {
                "files": found["files"],
                "plan_s": found["plan_s"],
                "listing_plan_s": listing["plan_s"],
                "speedup": round(listing["plan_s"] / found["plan_s"], 1),
                "round_trips": found["round_trips"],
                "peak_rss_mb": found["peak_rss_mb"],
            }
    return out


def _main() -> None:
    parser = argparse.ArgumentParser(prog="plan_sweep")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("point")
    p.add_argument("root", type=Path)
    p.add_argument("days", type=int)
    p.add_argument("sources", type=int)
    p.add_argument("delay_ms", type=float)
    i = sub.add_parser("iceberg")
    i.add_argument("lake", type=Path)
    i.add_argument("days", type=int)
    i.add_argument("delay_ms", type=float)
    args = parser.parse_args()
    if args.what == "point":
        print(json.dumps(plan_point(args.root, args.days, args.sources, args.delay_ms)))
    else:
        print(json.dumps(plan_iceberg_point(args.lake, args.days, args.delay_ms)))


if __name__ == "__main__":
    _main()
