"""``primus bench plan``: serial vs parallel vs incremental planning on a delayed store.

The store: ``days`` x 2 sources x 24 hourly partitions x ``files`` small Parquet files, each with a
``_SUCCESS`` marker, read through :mod:`delayed_fs` (every listing / metadata call costs ``delay``).
(a) serial: one worker, no cache; (b) the default planner (its worker count, a fresh plan cache);
(c) one more day appended, planned again with the cache from (b). (b) and (c) take seconds and
milliseconds on a VM whose speed drifts by ±15%: each is repeated and the median reported.
Separately: tasks per second planning a local tree of ``local_files`` files with no added delay.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_primus.bench.delayed_fs import delayed_filesystem
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.cache import PlanCache
from airflow_provider_primus.data.planner import PlanOptions, plan

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

START = datetime(2026, 1, 1, tzinfo=UTC)
SOURCES = ("clicks", "impressions")


def write_store(root: Path, days: range, files: int, rows: int = 64) -> int:
    table = pa.table(
        {
            "user_id": pa.array(range(rows), pa.int64()),
            "item_id": pa.array(range(rows), pa.int64()),
            "price": pa.array([float(i) for i in range(rows)], pa.float64()),
            "label": pa.array([i % 2 for i in range(rows)], pa.int8()),
        }
    )
    n = 0
    for source in SOURCES:
        for d in days:
            for h in range(24):
                t = START + timedelta(days=d, hours=h)
                part = root / source / t.strftime("%Y-%m-%d") / t.strftime("%H")
                part.mkdir(parents=True, exist_ok=True)
                for f in range(files):
                    pq.write_table(table, part / f"part-{f:03d}.parquet", write_page_checksum=True)
                    n += 1
                (part / "_SUCCESS").touch()
    return n


def spec_for(root: Path, workers: int | None = None) -> Any:
    sources = [
        {
            "name": s,
            "type": "files",
            "format": "parquet",
            "uri": str(root / s),
            "path_template": "{date}/{hour}",
            "granularity": "hour",
            "success_marker": "_SUCCESS",
            "schema": {"sparse": ["user_id", "item_id"], "dense": ["price"], "label": {"column": "label"}},
        }
        for s in SOURCES
    ]
    doc: dict[str, Any] = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "bench"},
        "spec": {"sources": sources, "mixture": [{"source": s, "weight": 1.0} for s in SOURCES]},
    }
    if workers:
        doc["spec"]["planning"] = {"workers": workers}
    return load_data_spec(doc)


def run(
    days: int = 20,
    files: int = 4,
    delay_ms: float = 20.0,
    local_files: int = 100_000,
    workdir: Path | None = None,
    *,
    parallel_runs: int = 3,
    incremental_runs: int = 5,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir, prefix="primus-bench-plan-") as tmp:
        root = Path(tmp) / "store"
        log.info("writing %d days of partitions", days)
        write_store(root, range(days), files)
        fs, handler = delayed_filesystem(delay_ms / 1000)

        def delayed(uri: str) -> tuple[pafs.FileSystem, str]:
            return fs, os.path.abspath(uri)

        spec = spec_for(root)
        end = START + timedelta(days=days)

        log.info("planning serially")
        t0 = time.perf_counter()
        serial = plan(spec, START, end, PlanOptions(workers=1, filesystem=delayed))
        serial_s = time.perf_counter() - t0
        serial_calls = handler.calls

        # (b) and (c) are short: each is repeated and its median reported, so one scheduling
        # hiccup of the VM does not decide the ratio. Every (b) starts from an empty cache, every
        # (c) from a copy of the cache (b) left.
        parallel_times, incremental_times = [], []
        for i in range(parallel_runs):
            log.info("planning in parallel, run %d/%d", i + 1, parallel_runs)
            cache_path = Path(tmp) / f"plan-cache-{i}.sqlite"
            cache = PlanCache(cache_path)
            handler.reset()
            t0 = time.perf_counter()
            parallel = plan(spec, START, end, PlanOptions(filesystem=delayed, cache=cache))
            parallel_times.append(time.perf_counter() - t0)
            cache.close()
            assert [t.task_id for t in parallel.tasks] == [t.task_id for t in serial.tasks]
            parallel_counts = dict(handler.counts)

        write_store(root, range(days, days + 1), files)
        for i in range(incremental_runs):
            log.info("planning incrementally, run %d/%d", i + 1, incremental_runs)
            copy = Path(tmp) / f"plan-cache-incremental-{i}.sqlite"
            shutil.copyfile(cache_path, copy)
            cache = PlanCache(copy)
            handler.reset()
            t0 = time.perf_counter()
            incremental = plan(
                spec, START, end + timedelta(days=1), PlanOptions(filesystem=delayed, cache=cache)
            )
            incremental_times.append(time.perf_counter() - t0)
            cache.close()
            incremental_counts = dict(handler.counts)
        parallel_s, incremental_s = statistics.median(parallel_times), statistics.median(incremental_times)
    workers, delay_s = spec.spec.planning.workers, delay_ms / 1000
    parallel_floor_s, incremental_floor_s = (
        io_floor_s(c, workers, delay_s) for c in (parallel_counts, incremental_counts)
    )
    parallel_pool_s = statistics.median(
        bare_pool_s(parallel_counts, workers, delay_s) for _ in range(parallel_runs)
    )
    incremental_pool_s = statistics.median(
        bare_pool_s(incremental_counts, workers, delay_s) for _ in range(incremental_runs)
    )

    log.info("tasks/s on a local tree of %d files", local_files)
    local = local_tasks_per_second(local_files, workdir)
    return {
        "tasks": len(serial.tasks),
        "partitions": serial.totals()["partitions"],
        "files": serial.totals()["files"],
        "delay_ms": delay_ms,
        "workers": workers,
        "parallel_runs": parallel_runs,
        "incremental_runs": incremental_runs,
        "serial_s": round(serial_s, 3),
        "parallel_s": round(parallel_s, 3),
        "speedup": round(serial_s / parallel_s, 1),
        "incremental_s": round(incremental_s, 3),
        "incremental_tasks": len(incremental.tasks),
        "incremental_ratio": round(incremental_s / parallel_s, 3),
        "incremental_vs_serial": round(incremental_s / serial_s, 4),
        # What the round trips alone allow with this many workers, even at zero CPU.
        "parallel_floor_s": round(parallel_floor_s, 3),
        "incremental_floor_s": round(incremental_floor_s, 3),
        "incremental_floor_ratio": round(incremental_floor_s / parallel_floor_s, 4),
        # The same round trips as bare sleeps on a thread pool of the same size: no planning work.
        "parallel_pool_s": round(parallel_pool_s, 3),
        "incremental_pool_s": round(incremental_pool_s, 3),
        "incremental_pool_ratio": round(incremental_pool_s / parallel_pool_s, 4),
        "serial_calls": serial_calls,
        "incremental_calls": sum(incremental_counts.values()),
        **local,
    }


def io_floor_s(counts: Mapping[str, int], workers: int, delay_s: float) -> float:
    """The least wall time ``counts`` round trips of ``delay_s`` can take on ``workers`` threads.

    No more than ``workers`` are in flight at once, and a file's footer can only be opened once its
    partition's listing has returned, so the opens start one round trip late at the earliest.
    """
    listings, opens = counts.get("list", 0), counts.get("open", 0)
    waves = max(math.ceil((listings + opens) / workers), (1 if listings else 0) + math.ceil(opens / workers))
    return waves * delay_s


def bare_pool_s(counts: Mapping[str, int], workers: int, delay_s: float) -> float:
    """Wall time of ``counts`` round trips as plain sleeps on a ``ThreadPoolExecutor`` of ``workers``.

    Each listing's completion submits its share of the footer reads, as in the planner, so this is
    what the thread pool itself costs (thread start-up, hand-offs) for that plan's I/O pattern with
    no planning work at all: the practical floor next to :func:`io_floor_s`'s ideal one.
    """
    listings, opens = counts.get("list", 0), counts.get("open", 0)
    if listings:
        follow_ups = [opens // listings + (i < opens % listings) for i in range(listings)]
    else:
        follow_ups = [0] * opens
    done: queue.SimpleQueue[int] = queue.SimpleQueue()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="primus-bench-pool") as pool:

        def submit(then: int) -> None:
            pool.submit(time.sleep, delay_s).add_done_callback(lambda _f: done.put(then))

        for then in follow_ups:
            submit(then)
        outstanding = len(follow_ups)
        while outstanding:
            then = done.get()
            outstanding += then - 1
            for _ in range(then):
                submit(0)
    return time.perf_counter() - t0


def local_tasks_per_second(n_files: int, workdir: Path | None) -> dict[str, Any]:
    """A flat local tree of ``n_files`` tiny Parquet files spread over hourly partitions, no delay."""
    if n_files <= 0:
        return {}
    with tempfile.TemporaryDirectory(dir=workdir, prefix="primus-bench-local-") as tmp:
        root = Path(tmp) / "store"
        table = pa.table({"user_id": pa.array([1, 2], pa.int64()), "label": pa.array([0, 1], pa.int8())})
        hours = max(1, n_files // 100)
        per = n_files // hours
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, write_page_checksum=True)
        payload = buf.getvalue().to_pybytes()
        for h in range(hours):
            t = START + timedelta(hours=h)
            part = root / "local" / t.strftime("%Y-%m-%d") / t.strftime("%H")
            part.mkdir(parents=True, exist_ok=True)
            for f in range(per):
                (part / f"p{f:04d}.parquet").write_bytes(payload)
        doc = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "bench-local"},
            "spec": {
                "sources": [
                    {
                        "name": "local",
                        "type": "files",
                        "format": "parquet",
                        "uri": str(root / "local"),
                        "path_template": "{date}/{hour}",
                        "granularity": "hour",
                        "schema": {"sparse": ["user_id"], "label": {"column": "label"}},
                    }
                ]
            },
        }
        spec = load_data_spec(doc)
        t0 = time.perf_counter()
        graph = plan(spec, START, START + timedelta(hours=hours), PlanOptions(min_rows=1))
        elapsed = time.perf_counter() - t0
    return {
        "local_files": per * hours,
        "local_tasks": len(graph.tasks),
        "local_s": round(elapsed, 2),
        "local_tasks_per_s": round(len(graph.tasks) / elapsed),
    }
