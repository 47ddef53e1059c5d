"""The data executor: leases tasks, reads and transforms them, serves batches over Arrow Flight.

One process per executor (``primus serve-data``). Four threads:

* the **reader** leases a work item and decodes only the needed columns of its row range; the
  **transform** thread applies the source's transforms (vectorised) to the previous batch meanwhile
  and puts results into a queue of ``window`` slots — when the queue is full both block, so a slow
  trainer slows the reads and memory stays bounded;
* the **heartbeat** keeps the executor's leases, learns shortened ends (splits) and publishes
  metrics (rows/s, bytes/s, time blocked on storage vs on credit, CPU seconds);
* the **Flight server** streams batches to a trainer's loader over DoExchange, one batch per credit
  the loader granted; each batch carries (task, first row, rows) so the loader can deduplicate and
  acknowledge exactly.
"""

from __future__ import annotations

import collections
import json
import math
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyarrow import flight

from airflow_provider_primus.contracts.data import is_history
from airflow_provider_primus.data.errors import CorruptFileError, TableError
from airflow_provider_primus.data.reader import READ_ROWS, read_task
from airflow_provider_primus.data.service.auth import advertised, server_args
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.service.options import DataExecutorOptions
from airflow_provider_primus.data.service.wire import dumps, loads
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from airflow_provider_primus.data.transforms import BatchTransformer, SchemaMismatchError, Transformed
from airflow_provider_primus.data.user_transforms import TransformOutputError, UserTransformError
from airflow_provider_primus.process import StopRequested
from airflow_provider_primus.resources.allotment import AllotmentWatcher
from airflow_provider_primus.resources.own_usage import own_usage
from airflow_provider_primus.tls import JobCa, load_job_ca

BATCH, END, EOF = "batch", "end", "eof"


def _usage_fields() -> dict[str, Any]:
    """The executor's own CPU and memory, so a master that cannot see the process (a pod) can."""
    usage = own_usage()
    return {"cpu_s": usage["cpu_s"], "rss": usage["rss"], "usage_source": usage["source"]}


@dataclass
class Metrics:
    started: float = field(default_factory=time.monotonic)
    rows: int = 0
    bytes: int = 0
    batches_served: int = 0
    blocked_storage_s: float = 0.0  # reading + decoding + transforming
    blocked_credit_s: float = 0.0  # waiting for queue space (the trainer is slower)
    max_queued: int = 0
    failures: int = 0

    def snapshot(self, queued: int) -> dict[str, Any]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        return {
            "rows": self.rows,
            "bytes": self.bytes,
            "rows_per_s": round(self.rows / elapsed, 1),
            "bytes_per_s": round(self.bytes / elapsed, 1),
            "batches_served": self.batches_served,
            "batches_waiting": queued,
            "max_queued": self.max_queued,
            "blocked_storage_s": round(self.blocked_storage_s, 3),
            "blocked_credit_s": round(self.blocked_credit_s, 3),
            "failures": self.failures,
            **_usage_fields(),
        }


class DataExecutor(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(
        self,
        *,
        name: str,
        dispatcher: str,
        token: str,
        spec: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        window: int = 8,
        batch_rows: int = 8192,
        heartbeat_s: float = 1.0,
        passthrough: tuple[str, ...] = (),
        master_grace_s: float = 0.0,
        transform_threads: int = 2,
        ca: JobCa | None = None,
    ) -> None:
        """``ca``: the job's CA; with it the executor serves TLS and verifies its dispatcher."""
        super().__init__(**server_args(host, port, token, ca))
        self.name = name
        self.location = advertised(host, self.port, tls=ca is not None)
        self.client = DispatcherClient(dispatcher, token, grace_s=master_grace_s, ca=ca)
        self.spec = spec
        self.window = window
        self.batch_rows = batch_rows
        self.heartbeat_s = heartbeat_s
        self.passthrough = passthrough
        self.transformers = {
            s.name: BatchTransformer(s.schema_, passthrough=passthrough)
            for s in spec.spec.sources
            if is_history(s)
        }
        self.transform_threads = max(1, transform_threads)
        # Rows are decoded and transformed in chunks of up to a whole Parquet decode (READ_ROWS), then cut
        # into ``batch_rows`` batches only when sent: per-call overhead made transforming 8,192 rows
        # at a time ~25% dearer per row than 65,536. Decoded chunks wait for the transform pool (room
        # for one per transform thread, so the reader decodes the next meanwhile), transformed chunks
        # for credit: as many as hold ``window`` batches, so memory stays bounded by the window.
        # A chunk holds at most half the window's rows, so a small window keeps a small executor.
        self.chunk_rows = max(batch_rows, min(READ_ROWS, window * batch_rows // 2))
        self._raw: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=self.transform_threads)
        self.queue: queue.Queue[tuple[Any, ...]] = queue.Queue(
            maxsize=max(1, -(-window * batch_rows // self.chunk_rows))
        )
        self._failed_items: set[str] = set()
        # Per item, the task rows its transforms left out for having no label: reported with the
        # item's release, so the dispatcher counts them and still sees every row accounted for.
        self._unlabelled: dict[str, list[tuple[int, int]]] = {}
        self._front: collections.deque[tuple[Any, ...]] = collections.deque()
        self.ends: dict[str, int | None] = {}
        # Each task's window (its time group): the trainer shuffles history within a window only.
        self.windows: dict[str, str] = {}
        self.sources: dict[str, str] = {}  # and its source (a job's data service serves several)
        self.metrics = Metrics()
        self._metrics_lock = threading.Lock()
        self.stopping = threading.Event()
        self.eof_served = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.client.register(self.name, self.location)
        loops = (
            (self._read_loop, "reader"),
            (self._transform_loop, "transform"),
            (self._heartbeat_loop, "heartbeat"),
        )
        for target, tname in loops:
            thread = threading.Thread(target=target, name=f"primus-{tname}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop our threads before the server: a Python thread still inside a Flight call while
        the C++ server is torn down aborts the process."""
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.shutdown()

    # --- reader ----------------------------------------------------------------------------------

    def _put(self, target: queue.Queue[tuple[Any, ...]], entry: tuple[Any, ...]) -> bool:
        """Block until there is room (backpressure); False when the executor is stopping."""
        while not self.stopping.is_set():
            try:
                target.put(entry, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _read_loop(self) -> None:
        try:
            while not self.stopping.is_set():
                resp = self.client.lease(self.name)
                if "failed" in resp:
                    self._put(self._raw, (EOF, resp["failed"]))
                    return
                if "task" not in resp:
                    if resp.get("finished"):
                        self._put(self._raw, (EOF, None))
                        return
                    self.stopping.wait(0.05)  # nothing leasable right now: ask again shortly
                    continue
                self._read_item(resp)
        except Exception as exc:  # the dispatcher is gone: nothing more to serve
            print(f"primus-executor {self.name}: reader stopped: {exc}", file=sys.stderr, flush=True)
            self._put(self._raw, (EOF, str(exc)))

    def _fail(self, item_id: str, exc: BaseException) -> None:
        self.metrics.failures += 1
        self.ends.pop(item_id, None)
        self._failed_items.add(item_id)
        self._unlabelled.pop(item_id, None)
        path = getattr(exc, "path", None)  # the file a read or schema error names, if one
        file = path if isinstance(path, str) and not path.startswith("<") else None
        self.client.fail(self.name, item_id, f"{type(exc).__name__}: {exc}", file=file)

    def _read_item(self, lease: dict[str, Any]) -> None:
        """Read the item's rows (decode only); the transform thread works on the previous batch
        meanwhile, so decoding and transforming overlap on two cores."""
        item_id, task = lease["item_id"], lease["task"]
        start, end = lease["start_row"], lease["end_row"]
        self.ends[item_id] = end
        self.windows[task.task_id] = task.group
        self.sources[task.task_id] = task.source
        source = self.spec.spec.source(task.source)
        transformer = self.transformers[source.name]
        fs, _ = history_filesystem(source)
        # What errors of the transforms name: the file, when the task reads one.
        where = task.slices[0].path if len(task.slices) == 1 else f"<task {task.task_id}>"
        pos = start
        natural_end = True
        try:
            batches = read_task(
                task,
                fmt=source.format,
                columns=[*transformer.input_columns(), *self.passthrough],
                batch_rows=self.chunk_rows,
                start_row=start,
                end_row=end,
                filesystem=fs,
                fields=read_fields(source),
                decode_threads=False,
            )
            while True:
                t0 = time.monotonic()
                batch = next(batches, None)
                self._add_busy(time.monotonic() - t0)
                if batch is None:
                    break
                if item_id not in self.ends:  # reclaimed while we were unreachable, or failed
                    return
                current_end = self.ends[item_id]
                if current_end is not None and pos + batch.num_rows >= current_end:
                    batch = batch.slice(0, max(0, current_end - pos))
                    natural_end = False
                if batch.num_rows:
                    raw = (BATCH, item_id, task.task_id, pos, batch, transformer, where)
                    if not self._put(self._raw, raw):
                        return
                    pos += batch.num_rows
                if not natural_end:
                    break
        except (CorruptFileError, SchemaMismatchError, TableError, OSError, pa.ArrowException) as exc:
            self._fail(item_id, exc)
            return
        total = pos if (end is None and natural_end) else None
        self._put(self._raw, (END, item_id, total))

    def _transform_loop(self) -> None:
        """Hand batches to the transform pool in order; the stream thread takes the results in the
        same order. Transforms of consecutive batches run side by side (NumPy and Arrow compute
        release the GIL), so one executor is not bound to a single core's transform speed."""
        with ThreadPoolExecutor(self.transform_threads, thread_name_prefix="primus-transform") as pool:
            while not self.stopping.is_set():
                try:
                    entry = self._raw.get(timeout=0.5)
                except queue.Empty:
                    continue
                kind, item_id = entry[0], entry[1]
                if kind == BATCH:
                    _, item_id, task_id, pos, batch, transformer, where = entry
                    if item_id in self._failed_items:
                        continue
                    t0 = time.monotonic()
                    done = pool.submit(self._transform, transformer, batch, where)
                    if not self._put(self.queue, (BATCH, item_id, task_id, pos, done)):
                        return
                    self.metrics.blocked_credit_s += time.monotonic() - t0
                    self.metrics.max_queued = max(self.metrics.max_queued, self.queue.qsize())
                elif kind == END and item_id in self._failed_items:
                    continue
                else:
                    if not self._put(self.queue, entry):
                        return
                    if kind == EOF:
                        return

    def _transform(self, transformer: BatchTransformer, batch: pa.RecordBatch, where: str) -> Transformed:
        t0 = time.monotonic()
        try:
            return transformer.transform(batch, where)
        finally:
            self._add_busy(time.monotonic() - t0)

    def _add_busy(self, seconds: float) -> None:
        """Reader and transform threads both add to the storage-side time (thread-seconds)."""
        with self._metrics_lock:
            self.metrics.blocked_storage_s += seconds

    def _transformed(self, entry: tuple[Any, ...]) -> list[tuple[int, pa.RecordBatch]] | None:
        """The chunk's transform result as runs of consecutive task rows, each (first row, batch), or
        None when its item failed (now or before). Rows left out for having no label split the
        chunk into runs (a batch on the wire names one range of rows) and are noted for the
        item's release."""
        item_id, first_row, done = entry[1], entry[3], entry[4]
        if item_id in self._failed_items:
            return None
        if isinstance(done, list):  # the unsent rest of a chunk, put back
            return done
        try:
            out: Transformed = done.result()
        except (
            SchemaMismatchError,
            UserTransformError,
            TransformOutputError,
            pa.ArrowException,
            ValueError,
        ) as exc:
            # The user's function raising on these rows is this task's problem, like a malformed file.
            self._fail(item_id, exc)
            return None
        if not len(out.unlabelled):
            return [(first_row, out.batch)]
        skipped = _ranges(out.unlabelled)
        self._unlabelled.setdefault(item_id, []).extend((first_row + a, first_row + b) for a, b in skipped)
        runs: list[tuple[int, pa.RecordBatch]] = []
        kept = pos = 0  # rows of the output used so far; input row reached
        for a, b in [*skipped, (out.batch.num_rows + len(out.unlabelled), 0)]:
            if a > pos:
                runs.append((first_row + pos, out.batch.slice(kept, a - pos)))
                kept += a - pos
            pos = b
        return runs

    # --- heartbeat -------------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_s):
            # Only items we held *before* asking can be judged by the answer: one leased while the
            # heartbeat was in flight is simply not in it yet.
            asked_about = set(self.ends)
            try:
                resp = self.client.heartbeat(self.name, self.metrics.snapshot(self.queue.qsize()))
            except flight.FlightError:
                continue
            if not resp.get("known"):
                if resp.get("fenced") or not self.client.register(self.name, self.location):
                    # The master replaced this incarnation (it was hung): serving on beside the
                    # replacement could only send rows twice. Stop; the master kills it anyway.
                    print(f"primus-executor {self.name}: replaced; stopping", file=sys.stderr, flush=True)
                    self.stopping.set()
                    return
                continue
            held = resp["items"]
            for item_id in asked_about:
                if item_id in held:
                    if item_id in self.ends:
                        self.ends[item_id] = held[item_id]
                else:
                    self.ends.pop(item_id, None)

    # --- Flight ----------------------------------------------------------------------------------

    def _take(self, closed: threading.Event) -> tuple[Any, ...] | None:
        if self._front:
            return self._front.popleft()
        while not closed.is_set() and not self.stopping.is_set():
            try:
                return self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
        return None

    def do_action(self, context: Any, action: flight.Action) -> Any:
        if action.type == "metrics":
            yield dumps(self.metrics.snapshot(self.queue.qsize()))
        else:
            raise flight.FlightServerError(f"unknown action {action.type!r}")

    def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        credits = threading.Semaphore(0)
        closed = threading.Event()

        def read_credits() -> None:
            try:
                while True:
                    chunk = reader.read_chunk()
                    meta = loads(chunk.app_metadata.to_pybytes() if chunk.app_metadata else None) or {}
                    for _ in range(int(meta.get("credit", 0))):
                        credits.release()
            except (StopIteration, flight.FlightError, pa.ArrowException, OSError):
                pass
            finally:
                closed.set()
                credits.release()

        credit_thread = threading.Thread(target=read_credits, name="primus-credits", daemon=True)
        credit_thread.start()
        eof = False
        try:
            eof = self._stream(writer, credits, closed)
        finally:
            # The reader belongs to this call: let the credit thread finish with it before the call
            # ends (the consumer half-closes after the end of stream, or the stream breaks).
            credit_thread.join(timeout=10)
        if eof:
            self.eof_served.set()

    def _stream(self, writer: Any, credits: threading.Semaphore, closed: threading.Event) -> bool:
        """Serve batches until the consumer leaves (False) or the job's end was sent (True)."""
        started = False
        while True:
            entry = self._take(closed)
            if entry is None:
                return False
            kind = entry[0]
            if kind == BATCH:
                runs = self._transformed(entry)
                if runs is None:
                    continue
                _, item_id, task_id, _, _ = entry
                for i, (first_row, chunk) in enumerate(runs):
                    for offset in range(0, chunk.num_rows, self.batch_rows):
                        # Wait for a credit, but not past our own shutdown: a consumer that vanished
                        # without its stream breaking would otherwise hold this call, and the
                        # server's shutdown, for ever.
                        while not credits.acquire(timeout=0.2):
                            if closed.is_set() or self.stopping.is_set():
                                break
                        if closed.is_set() or self.stopping.is_set():
                            # Not delivered: the next consumer gets the rest of the chunk.
                            rest = [(first_row + offset, chunk.slice(offset)), *runs[i + 1 :]]
                            self._front.appendleft((BATCH, item_id, task_id, first_row + offset, rest))
                            return False
                        out = chunk.slice(offset, self.batch_rows)
                        if not started:
                            writer.begin(out.schema)
                            started = True
                        writer.write_with_metadata(
                            out,
                            dumps(
                                {
                                    "task": task_id,
                                    "source": self.sources.get(task_id),
                                    "window": self.windows.get(task_id),
                                    "start": first_row + offset,
                                    "rows": out.num_rows,
                                }
                            ),
                        )
                        self.metrics.rows += out.num_rows
                        self.metrics.bytes += out.nbytes
                        self.metrics.batches_served += 1
            elif kind == END:
                _, item_id, total = entry
                if item_id in self._failed_items:
                    continue
                self.ends.pop(item_id, None)
                self.client.release(self.name, item_id, total, self._unlabelled.pop(item_id, []))
            else:
                if started:
                    writer.write_metadata(dumps({"eof": True, "error": entry[1]}))
                self._front.appendleft(entry)  # every later consumer sees the end too
                return True


def _ranges(rows: np.ndarray[Any, np.dtype[np.int64]]) -> list[tuple[int, int]]:
    """Ascending row numbers as half-open runs of consecutive ones."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts, ends = np.concatenate(([0], breaks)), np.concatenate((breaks, [len(rows)]))
    return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, ends, strict=True)]


def serve(options: DataExecutorOptions, spec: Any, token: str) -> int:
    allotment = AllotmentWatcher()  # thread pools follow the backend's allotment (resizes too)
    granted = allotment.current()
    transform_threads = options.transform_threads
    if granted is not None:
        # More transform threads than allotted cores only add chunks in flight (memory), not speed.
        transform_threads = min(transform_threads, max(1, math.ceil(granted.cpu)))
    executor = DataExecutor(
        name=options.name,
        dispatcher=options.dispatcher,
        token=token,
        spec=spec,
        host=options.host,
        port=options.port,
        window=options.window,
        batch_rows=options.batch_rows,
        passthrough=options.passthrough,
        heartbeat_s=options.heartbeat_s,
        master_grace_s=options.master_grace_s,
        transform_threads=transform_threads,
        ca=load_job_ca(),  # the job's CA when it runs with TLS (``$PRIMUS_TLS_DIR``)
    )
    # The Flight server already accepts calls; this thread only waits for the end of the job.
    stop = StopRequested()
    if granted is not None:
        allotment.apply_threads(granted)
        allotment.start_thread()
    executor.start()
    print(json.dumps({"executor": executor.name, "location": executor.location}), flush=True)
    while not stop.wait(0.5):
        if executor.eof_served.is_set() or executor.stopping.is_set():
            break
    # The owner is gone or asked us to stop; nothing here is durable, so a shutdown that hangs (a
    # Flight call stuck in the transport) must not keep the process alive.
    watchdog = threading.Timer(20.0, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    executor.stop()
    watchdog.cancel()
    return 0
