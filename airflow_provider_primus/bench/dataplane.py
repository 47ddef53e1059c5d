"""``primus bench dataplane``: the data service end to end vs reading in the trainer's own process.

Data: a click log (26 categorical IDs ``c1..c26``, 13 dense floats ``i1..i13`` with nulls, an int8
``label``, an ``event_time``) written as Parquet, about ``ROWS_PER_FILE`` rows per file and two files
per hourly partition, row groups of ``ROW_GROUP_ROWS`` rows; generated with a fixed seed in worker
processes (not timed, and it leaves nothing in this process's memory). Its PrimusData spec hashes
every ID into ``HASH_BUCKETS`` buckets and fills and casts every dense column; the planner cuts it
into tasks of about ``TARGET_ROWS_PER_TASK`` rows.

Variants, each over the same task graph, each checked to deliver exactly the planned rows:

(a) **bare**: this process reads, transforms and converts every task to tensors itself;
(b) **e2e1**: an in-process dispatcher service, one ``primus serve-data`` executor process and a
    ``PrimusDataLoader`` iterating in this process to the end;
(c) **e2e2**: the same with two executor processes;
(d) **e2e1_s3** (``store="s3"``): (b) with the same files in a real S3-compatible server that the
    benchmark starts (SeaweedFS, ``embedded/s3``) on loopback, planned and read over S3 with ranged
    reads; ``s3_vs_local`` is its rows/s ÷ (b)'s;
(e) **e2e1_tls** (``tls=True``): (b) with a job CA made for the run, the dispatcher and executor
    serving TLS and the loader verifying them (``tls.py``); ``tls_cost`` is 1 - its rows/s ÷ (b)'s.

Each variant runs ``rounds`` times, interleaved in rotated order; figures are medians (see ``run``).

The service clocks start once every executor process has reported ready (so interpreter start-up
is not counted; an executor may have read up to ``window`` batches by then) and stop when the
loader's iteration ends, which includes its end-of-data detection. CPU is ``time.process_time()``
of this process: for (b) that is the loader plus the in-process dispatcher service's threads (and
the memory sampler's), for (a) the whole read. Executor CPU and peak RSS of every process are sampled
with psutil every ``SAMPLE_S`` seconds; the loader's memory figure is this process's peak RSS growth
during the iteration.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.credentials import new_token
from airflow_provider_primus.data.graph import TaskGraph
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
from airflow_provider_primus.data.service.launch import ExecutorStartError, launch_executor
from airflow_provider_primus.data.service.loader import DataServiceError, PrimusDataLoader
from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.data.tensors import to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer
from airflow_provider_primus.process import stop_process_group, tied_to_launcher
from airflow_provider_primus.tls import TLS_DIR_ENV, JobCa

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

START = datetime(2026, 1, 1, tzinfo=UTC)
SEED = 20261129
SPARSE = tuple(f"c{i}" for i in range(1, 27))
DENSE = tuple(f"i{i}" for i in range(1, 14))
# Distinct IDs per categorical column, shaped like the Criteo click logs (a few huge, many small).
CARDINALITIES = (
    1_460, 583, 10_000_000, 2_202_608, 305, 24, 12_517, 633, 3, 93_145, 5_683, 8_351_593, 3_194,
    27, 14_992, 5_461_306, 10, 5_652, 2_173, 4, 7_046_547, 18, 15, 286_181, 105, 142_572,
)  # fmt: skip
DENSE_NULL_SHARE = (0.0, 0.45, 0.0, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.2)
ROWS_PER_FILE = 500_000
FILES_PER_HOUR = 2
ROW_GROUP_ROWS = 65_536
TARGET_ROWS_PER_TASK = 250_000
HASH_BUCKETS = 1_000_003
SAMPLE_S = 0.05
EXIT_WAIT_S = 5.0
STALL_S = 60.0  # a loader without data this long fails the run instead of waiting (default 600 s)
MIB = 1024 * 1024


# -- data -------------------------------------------------------------------------------------------


def click_table(index: int, rows: int, hour: datetime) -> pa.Table:
    """File ``index`` of the click log: deterministic for a given (index, rows)."""
    rng = np.random.default_rng([SEED, index])
    columns: dict[str, pa.Array] = {}
    for name, cardinality in zip(SPARSE, CARDINALITIES, strict=True):
        # Power-law skew: low IDs are frequent (popular items), the tail is long.
        skewed = np.floor(cardinality * rng.random(rows) ** 3).astype(np.int64)
        columns[name] = pa.array(skewed)
    for name, null_share in zip(DENSE, DENSE_NULL_SHARE, strict=True):
        values = np.floor(rng.lognormal(mean=1.0, sigma=1.5, size=rows))
        mask = rng.random(rows) < null_share if null_share else None
        columns[name] = pa.array(values, type=pa.float64(), mask=mask)
    columns["label"] = pa.array((rng.random(rows) < 0.25).astype(np.int8))
    start_us = int(hour.timestamp() * 1_000_000)
    offsets = np.sort(rng.integers(0, 3_600 * 1_000_000, rows, dtype=np.int64))
    columns["event_time"] = pa.array(start_us + offsets, type=pa.timestamp("us", tz="UTC"))
    return pa.table(columns)


def write_files(root: str, indices: Sequence[int], rows: int) -> None:
    """Files ``indices`` of the store, ``rows`` rows each (run in a worker process)."""
    for index in indices:
        hour = START + timedelta(hours=index // FILES_PER_HOUR)
        part = Path(root) / hour.strftime("%Y-%m-%d") / hour.strftime("%H")
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            click_table(index, rows, hour),
            part / f"part-{index % FILES_PER_HOUR:03d}.parquet",
            row_group_size=ROW_GROUP_ROWS,
            write_page_checksum=True,  # what the executors verify: their cost is part of the benchmark
        )


def write_store(root: Path, rows: int, files: int) -> int:
    """``files`` Parquet files of ``ceil(rows / files)`` rows each; returns the rows written.

    Plain worker processes (one per core): twice as fast on two cores, and nothing the generation
    allocated stays in this process to blur its memory figures.
    """
    per_file = math.ceil(rows / files)
    root.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(files, os.cpu_count() or 1))
    procs = []
    for w in range(workers):
        code = (
            "import sys, json; from airflow_provider_primus.bench.dataplane import write_files; "
            "write_files(*json.loads(sys.argv[1]))"
        )
        argument = json.dumps([str(root), list(range(w, files, workers)), per_file])
        command = [sys.executable, "-c", code, argument]
        procs.append(subprocess.Popen(tied_to_launcher(command)))
    failed = [p.args for p in procs if p.wait() != 0]
    if failed:
        raise BenchmarkError(f"generating the store failed: {failed}")
    for h in range(math.ceil(files / FILES_PER_HOUR)):
        hour = START + timedelta(hours=h)
        (root / hour.strftime("%Y-%m-%d") / hour.strftime("%H") / "_SUCCESS").touch()
    return per_file * files


def spec_document(root: Path | str, storage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The bench's data document over ``root`` (a local folder or an ``s3://`` URI with ``storage``)."""
    transforms: list[dict[str, Any]] = [{"column": c, "hash_bucket": HASH_BUCKETS} for c in SPARSE]
    for name in DENSE:
        transforms += [{"column": name, "fill": 0}, {"column": name, "cast": "float32"}]
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "bench-dataplane"},
        "spec": {
            "planning": {"target_rows_per_task": TARGET_ROWS_PER_TASK},
            "sources": [
                {
                    "name": "clicks",
                    "type": "files",
                    "format": "parquet",
                    "uri": str(root),
                    "path_template": "{date}/{hour}",
                    "granularity": "hour",
                    "success_marker": "_SUCCESS",
                    **({"storage": storage} if storage else {}),
                    "schema": {
                        "sparse": list(SPARSE),
                        "dense": list(DENSE),
                        "label": {"column": "label"},
                        "event_time": "event_time",
                        "transforms": transforms,
                    },
                }
            ],
        },
    }


# -- measuring ----------------------------------------------------------------------------------------


@dataclass
class _Sampler:
    """Peak RSS and CPU seconds (since the first sample) of some processes, polled from a thread."""

    pids: Sequence[int]
    peak: dict[int, int] = field(default_factory=dict)
    cpu_first: dict[int, float] = field(default_factory=dict)
    cpu_last: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._procs = {pid: psutil.Process(pid) for pid in self.pids}

    def sample(self) -> None:
        for pid, proc in self._procs.items():
            try:
                rss = proc.memory_info().rss
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue  # an executor that has finished: its last sample stands
            self.peak[pid] = max(self.peak.get(pid, 0), rss)
            self.cpu_first.setdefault(pid, times.user + times.system)
            self.cpu_last[pid] = times.user + times.system

    def cpu_s(self, pid: int) -> float:
        return self.cpu_last.get(pid, 0.0) - self.cpu_first.get(pid, 0.0)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def __enter__(self) -> _Sampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="primus-bench-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


@dataclass
class _Variant:
    rows: int
    wall_s: float
    cpu_s: float
    label_sum: int
    executor_peak_rss: int = 0
    executor_cpu_s: float = 0.0
    loader_rss_growth: int = 0
    executor_bad_exits: int = 0


def _expect(name: str, got: _Variant, planned: int, label_sum: int | None = None) -> None:
    if got.rows != planned:
        raise BenchmarkError(f"{name}: delivered {got.rows} rows, planned {planned}")
    if label_sum is not None and got.label_sum != label_sum:
        raise BenchmarkError(f"{name}: labels sum to {got.label_sum}, the bare read to {label_sum}")


def run_bare(spec: Any, graph: TaskGraph, batch_rows: int) -> _Variant:
    source = spec.spec.sources[0]
    transformer = BatchTransformer(source.schema_)
    columns = transformer.input_columns()
    fs, _ = open_filesystem(source.uri)
    rows = label_sum = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for task in graph.tasks:
        for batch in read_task(
            task, fmt=source.format, columns=columns, batch_rows=batch_rows, filesystem=fs
        ):
            tensors = to_tensors(transformer(batch), sparse=SPARSE, dense=DENSE)
            rows += len(tensors)
            label_sum += int(tensors.labels.sum())
    return _Variant(rows, time.perf_counter() - t0, time.process_time() - c0, label_sum)


def _unfinished(dispatcher: Dispatcher) -> str:
    """The work items not done, with their acknowledged rows: what a stalled run was waiting for."""
    items = [
        f"{i.item_id} {i.state} by {i.executor} [{i.start}, {i.end}) "
        f"acked {dispatcher.acked[i.task.task_id].ranges()}"
        for i in list(dispatcher.items.values())
        if i.state != "done"
    ]
    return "unfinished items: " + ("; ".join(items) or "none")


def run_service(
    spec_path: Path,
    graph: TaskGraph,
    *,
    executors: int,
    batch_rows: int,
    message_rows: int,
    window: int,
    credits: int,
    tls_dir: Path | None = None,
) -> _Variant:
    """``tls_dir``: a job CA's folder; the dispatcher and executors serve TLS from it."""
    token = new_token()
    ca = JobCa.read(tls_dir) if tls_dir is not None else None
    server = DispatcherServer(Dispatcher(graph.tasks, graph.edges), token, ca=ca).start()
    env = {TLS_DIR_ENV: str(tls_dir)} if tls_dir is not None else {}
    procs: list[subprocess.Popen[str]] = []
    try:
        for i in range(executors):  # each is ready (serving) when launch_executor returns
            try:
                launched = launch_executor(
                    f"bench-e{i}",
                    server.location,
                    spec_path,
                    token,
                    window=window,
                    batch_rows=message_rows,
                    env=env,
                )
            except ExecutorStartError as exc:
                raise BenchmarkError(str(exc)) from exc
            procs.append(launched.proc)
        loader = PrimusDataLoader(
            server.location,
            token,
            sparse=SPARSE,
            dense=DENSE,
            credits=credits,
            stall_timeout_s=STALL_S,
            batch_rows=batch_rows,
            ca=ca,
        )
        me = os.getpid()
        rows = label_sum = 0
        with _Sampler([me, *(p.pid for p in procs)]) as sampler:
            base_rss = sampler.peak[me]
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                for tensors in loader:
                    rows += len(tensors)
                    label_sum += int(tensors.labels.sum())
            except DataServiceError as exc:
                raise BenchmarkError(
                    f"{executors} executor(s): {exc}; {_unfinished(server.dispatcher)}"
                ) from exc
            wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        status = server.dispatcher.status()
        if status["quarantined"] or not status["finished"]:
            raise BenchmarkError(f"the data job did not finish cleanly: {status}")
        # Executors exit by themselves once they have served the end of the job.
        deadline = time.monotonic() + EXIT_WAIT_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return _Variant(
            rows,
            wall_s,
            cpu_s,
            label_sum,
            executor_peak_rss=max(sampler.peak.get(p.pid, 0) for p in procs),
            executor_cpu_s=sum(sampler.cpu_s(p.pid) for p in procs),
            loader_rss_growth=max(0, sampler.peak[me] - base_rss),
            executor_bad_exits=sum(1 for p in procs if p.returncode not in (None, 0)),
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_process_group(proc.pid, child=proc, grace_s=10)
            if proc.stdout is not None:
                proc.stdout.close()
        server.stop()


# -- the object store ---------------------------------------------------------------------------------

BUCKET = "bench"
KEY_ENV, SECRET_ENV = "PRIMUS_BENCH_S3_KEY", "PRIMUS_BENCH_S3_SECRET"


@contextlib.contextmanager
def object_store(root: Path, workdir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The local store copied into a SeaweedFS server started for the run (loopback, a key pair made
    for it): yields the ``s3://`` root and the source's ``storage`` section. The key pair is in this
    process's environment while it runs (the planner here and the executors it starts read it)."""
    from airflow_provider_primus.embedded.s3 import EmbeddedS3, ensure_seaweedfs

    server = EmbeddedS3(ensure_seaweedfs(), workdir)
    state = server.start()
    saved = {name: os.environ.get(name) for name in (KEY_ENV, SECRET_ENV)}
    try:
        os.environ[KEY_ENV], os.environ[SECRET_ENV] = state.access_key, state.secret_key
        s3 = pafs.S3FileSystem(
            access_key=state.access_key,
            secret_key=state.secret_key,
            region=state.region,
            scheme="http",
            endpoint_override=state.endpoint.split("://", 1)[1],
            allow_bucket_creation=True,
        )
        s3.create_dir(BUCKET)
        pafs.copy_files(str(root), f"{BUCKET}/store", pafs.LocalFileSystem(), s3)
        storage = {
            "endpoint": state.endpoint,
            "region": state.region,
            "addressing": "path",
            "credentials": {"env": {"access_key_id": KEY_ENV, "secret_access_key": SECRET_ENV}},
        }
        yield f"s3://{BUCKET}/store", storage
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()


# -- the benchmark ------------------------------------------------------------------------------------


def run(  # noqa: PLR0917 - the benchmark's knobs, as `primus bench dataplane` names them
    rows: int = 5_000_000,
    workdir: Path | None = None,
    batch_rows: int = 8192,
    window: int = 2,
    credits: int = 2,
    files: int | None = None,
    rounds: int = 5,
    message_rows: int = 32768,
    store: str = "local",
    tls: bool = False,
) -> dict[str, Any]:
    """``rounds`` rounds of all variants; ``files`` defaults to one per ``ROWS_PER_FILE`` rows.
    ``store="s3"`` adds (d), reading the same files from a real object store; ``tls`` adds (e).

    A shared two-core machine drifts by ±15% over minutes, and the variant that runs right after
    another inherits its memory and cache state. So the variants are interleaved, each round in a
    rotated order (bare first, then e2e1 first, ...), and each figure is the median over the rounds;
    ``ratio_rounds`` keeps each round's own e2e1 / bare for the spread.
    """
    if min(rows, batch_rows, message_rows, window, credits, rounds, 1 if files is None else files) < 1:
        raise ValueError(
            "rows, files, batch_rows, message_rows, window, credits and rounds must be at least 1"
        )
    if store not in ("local", "s3"):
        raise ValueError(f"store must be 'local' or 's3' (got {store!r})")
    files = files or max(1, math.ceil(rows / ROWS_PER_FILE))
    names = (
        ("bare", "e2e1", "e2e2") + (("e2e1_s3",) if store == "s3" else ()) + (("e2e1_tls",) if tls else ())
    )
    results: dict[str, list[_Variant]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(dir=workdir, prefix="primus-bench-dataplane-"))
        root = Path(tmp) / "store"
        log.info("writing %d rows in %d files", rows, files)
        written = write_store(root, rows, files)
        spec_path = Path(tmp) / "data.yaml"
        spec_path.write_text(yaml.safe_dump(spec_document(root), sort_keys=False))
        spec = load_data_spec(spec_path)
        hours = math.ceil(files / FILES_PER_HOUR)
        graph = plan(spec, START, START + timedelta(hours=hours), PlanOptions())
        planned = sum(t.rows or 0 for t in graph.tasks)
        if planned != written or graph.problems:
            raise BenchmarkError(f"planned {planned} of {written} rows; problems: {graph.problems}")

        knobs: dict[str, Any] = {
            "batch_rows": batch_rows,
            "message_rows": message_rows,
            "window": window,
            "credits": credits,
        }
        variants = {
            "bare": lambda: run_bare(spec, graph, batch_rows),
            "e2e1": lambda: run_service(spec_path, graph, executors=1, **knobs),
            "e2e2": lambda: run_service(spec_path, graph, executors=2, **knobs),
        }
        if store == "s3":
            uri, storage = stack.enter_context(object_store(root, Path(tmp) / "s3"))
            s3_spec_path = Path(tmp) / "data-s3.yaml"
            s3_spec_path.write_text(yaml.safe_dump(spec_document(uri, storage), sort_keys=False))
            s3_graph = plan(
                load_data_spec(s3_spec_path), START, START + timedelta(hours=hours), PlanOptions()
            )
            if sum(t.rows or 0 for t in s3_graph.tasks) != planned or s3_graph.problems:
                raise BenchmarkError(f"the object store's plan differs: problems {s3_graph.problems}")
            variants["e2e1_s3"] = lambda: run_service(s3_spec_path, s3_graph, executors=1, **knobs)
        if tls:
            tls_dir = Path(tmp) / "tls"
            JobCa.create("bench-dataplane").write(tls_dir)
            variants["e2e1_tls"] = lambda: run_service(
                spec_path, graph, executors=1, tls_dir=tls_dir, **knobs
            )
        label_sum: int | None = None
        for r in range(rounds):
            turn = r % len(names)
            for name in names[turn:] + names[:turn]:
                log.info("round %d/%d: %s", r + 1, rounds, name)
                got = variants[name]()
                _expect(name, got, planned, label_sum)
                label_sum = got.label_sum
                results[name].append(got)

    mrows = planned / 1e6
    rate = {name: statistics.median(planned / v.wall_s for v in results[name]) for name in names}
    bare_cpu = statistics.median(v.cpu_s for v in results["bare"]) / mrows
    loader_cpu = statistics.median(v.cpu_s for v in results["e2e1"]) / mrows
    executor_cpu = statistics.median(v.executor_cpu_s for v in results["e2e1"]) / mrows
    service = [v for name in names if name.startswith("e2e") for v in results[name]]
    extra: dict[str, Any] = {}
    plain = results["e2e1"]

    def per_round(name: str) -> list[float]:
        """Each round's rows/s of ``name`` ÷ e2e1's in the same round: the spread behind a median."""
        return [round(p.wall_s / v.wall_s, 3) for p, v in zip(plain, results[name], strict=True)]

    if store == "s3" or tls:
        # CPU seconds per million rows of the whole pipeline (executor + trainer process): unlike
        # rows/s it barely moves when other work shares the machine, so it shows what TLS or the
        # object store cost even where the rates are noise.
        extra["service_cpu_s_per_mrow"] = {
            name: round(statistics.median(v.cpu_s + v.executor_cpu_s for v in results[name]) / mrows, 3)
            for name in names
            if name.startswith("e2e1")
        }
    if store == "s3":
        extra["e2e1_s3_rows_s"] = round(rate["e2e1_s3"])
        extra["s3_vs_local"] = round(rate["e2e1_s3"] / rate["e2e1"], 3)
        extra["s3_vs_local_rounds"] = per_round("e2e1_s3")
    if tls:
        extra["e2e1_tls_rows_s"] = round(rate["e2e1_tls"])
        extra["tls_cost"] = round(1 - rate["e2e1_tls"] / rate["e2e1"], 3)
        extra["tls_cost_rounds"] = [round(1 - r, 3) for r in per_round("e2e1_tls")]
    return {
        "rows": planned,
        "files": files,
        "tasks": len(graph.tasks),
        "rounds": rounds,
        "bare_rows_s": round(rate["bare"]),
        "e2e1_rows_s": round(rate["e2e1"]),
        "e2e2_rows_s": round(rate["e2e2"]),
        "ratio": round(rate["e2e1"] / rate["bare"], 3),
        "ratio2": round(rate["e2e2"] / rate["bare"], 3),
        **extra,
        "ratio_rounds": [
            round(b.wall_s / e.wall_s, 3) for b, e in zip(results["bare"], results["e2e1"], strict=True)
        ],
        "loader_cpu_s_per_mrow": round(loader_cpu, 3),
        "bare_cpu_s_per_mrow": round(bare_cpu, 3),
        "cpu_ratio": round(loader_cpu / bare_cpu, 3),
        "executor_cpu_s_per_mrow": round(executor_cpu, 3),
        "executor_bad_exits": sum(v.executor_bad_exits for v in service),
        "peak_rss_mb": {
            "executor": round(max(v.executor_peak_rss for v in service) / MIB),
            "loader": round(max(v.loader_rss_growth for v in service) / MIB),
        },
        "batch_rows": batch_rows,
        "message_rows": message_rows,
        "window": window,
        "credits": credits,
        "store": store,
        "tls": tls,
    }
