"""``PrimusDataLoader``: the trainer side of the data service.

Fan-in from every data executor the dispatcher knows (new ones are picked up while iterating),
credit-based flow control (a batch consumed by the trainer returns one credit to the executor that
sent it), conversion to torch tensors without per-row Python, and exact progress: a batch counts in
``progress()`` once handed to the trainer, and is acknowledged to the dispatcher when the trainer
asks for the next one (or stops iterating).
Rows already consumed (re-sent after an executor died) are sliced away before they reach the
trainer, so each planned row is yielded exactly once per pass. Several loaders sharing one data
service (data-parallel trainers) ``claim`` each batch's rows at the dispatcher first: a row another
trainer claimed is left to it, so across trainers too each row is trained once. ``progress()`` is
what a checkpoint stores; passing it back as ``progress=`` resumes with nothing lost or repeated.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyarrow import flight

from airflow_provider_primus.data.service.auth import call_options, flight_client
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.service.intervals import IntervalSet
from airflow_provider_primus.data.service.wire import dumps, loads
from airflow_provider_primus.data.tensors import TensorBatch, to_tensors
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.tls import JobCa


class DataServiceError(PrimusError):
    """The job failed (too many quarantined tasks) or the service stopped answering."""


class _Connection:
    """One DoExchange stream to one data executor."""

    def __init__(  # noqa: PLR0917 - one stream's parts
        self, name: str, location: str, token: str, credits: int, out: queue.Queue[Any], ca: JobCa | None
    ) -> None:
        self.name = name
        self.client = flight_client(location, ca)
        descriptor = flight.FlightDescriptor.for_command(b"consume")
        self.writer, self.reader = self.client.do_exchange(descriptor, call_options(token))
        self._lock = threading.Lock()
        self.closed = False
        # Credits go back in groups of half the window: a quarter of the control messages (and of
        # the wake-ups they cause on both sides) of one per batch, while the executor always keeps
        # at least half its window to send into.
        self._return_every = max(1, credits // 2)
        self._owed = 0
        self.grant(credits)
        self.thread = threading.Thread(
            target=self._pump, args=(out,), name=f"primus-fanin-{name}", daemon=True
        )
        self.thread.start()

    def grant(self, n: int) -> None:
        with self._lock:
            if not self.closed:
                try:
                    self.writer.write_metadata(pa.py_buffer(dumps({"credit": n})))
                except (flight.FlightError, pa.ArrowException, OSError):
                    self.closed = True

    def consumed(self) -> None:
        """One batch of this stream was taken by the trainer: its credit goes back (grouped)."""
        self._owed += 1
        if self._owed >= self._return_every:
            owed, self._owed = self._owed, 0
            self.grant(owed)

    def _pump(self, out: queue.Queue[Any]) -> None:
        try:
            while True:
                chunk = self.reader.read_chunk()
                meta = loads(chunk.app_metadata.to_pybytes() if chunk.app_metadata else None) or {}
                if meta.get("eof"):
                    if meta.get("error"):
                        out.put((self, {"error": meta["error"]}, None))
                    break
                if chunk.data is not None:
                    out.put((self, meta, chunk.data))
        except StopIteration:
            pass
        except (flight.FlightError, pa.ArrowException, OSError):
            pass  # the executor died: whatever it did not deliver is leased again
        finally:
            out.put((self, None, None))

    def close(self) -> None:
        with self._lock:
            self.closed = True
            with contextlib.suppress(flight.FlightError, pa.ArrowException, OSError):
                self.writer.done_writing()
        self.client.close()


class PrimusDataLoader:
    def __init__(
        self,
        dispatcher: str,
        token: str,
        *,
        sparse: Sequence[str],
        dense: Sequence[str],
        extra: Sequence[str] = (),
        credits: int = 4,
        progress: Mapping[str, Iterable[tuple[int, int]]] | None = None,
        poll_s: float = 0.2,
        ack_every_s: float = 0.2,
        stall_timeout_s: float = 600.0,
        grace_s: float = 0.0,
        stop_when_idle: bool = False,
        batch_rows: int | None = None,
        ca: JobCa | None = None,
        claim: bool = False,
    ) -> None:
        """``ca``: the job's CA, for servers on ``grpc+tls://`` (default: ``$PRIMUS_TLS_DIR``'s)."""
        self._token = token
        self._ca = ca
        self.claim = claim
        self._dispatcher = DispatcherClient(dispatcher, token, grace_s=grace_s, ca=ca)
        # With an open graph (windows appended to a running job) an iteration ends when every task
        # known so far is consumed; ``idle`` then tells the caller to come back later, not that the
        # pass is over. Iterating again continues from ``progress()``.
        self.stop_when_idle = stop_when_idle
        self.idle = False
        self.sparse, self.dense, self.extra = tuple(sparse), tuple(dense), tuple(extra)
        self.credits = credits
        # Executors send messages of their own size (bigger ones: fewer per-message costs and
        # wake-ups on both sides); the loader yields them cut to ``batch_rows`` (None: as received).
        if batch_rows is not None and batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1 (got {batch_rows})")
        self.batch_rows = batch_rows
        self.poll_s = poll_s
        self.ack_every_s = ack_every_s
        self.stall_timeout_s = stall_timeout_s
        self._consumed: dict[str, IntervalSet] = {t: IntervalSet(r) for t, r in (progress or {}).items()}
        self._unacked: dict[str, list[tuple[int, int]]] = {}
        self._handed: tuple[str, int, int] | None = None
        self._connections: dict[str, _Connection] = {}
        self._refused: dict[str, float] = {}
        self._queue: queue.Queue[Any] = queue.Queue()
        self.rows = 0
        self.duplicates_dropped = 0
        # Each task's source, as its executor names it: one data service can serve several files
        # sources (a job's), and the trainer keeps their rows apart.
        self.sources: dict[str, str] = {}

    def progress(self) -> dict[str, list[tuple[int, int]]]:
        """Rows the trainer has consumed, per task (a checkpoint's data progress)."""
        return {t: s.ranges() for t, s in self._consumed.items() if s.ranges()}

    def _settle(self) -> None:
        if self._handed is not None:
            task, a, b = self._handed
            self._unacked.setdefault(task, []).append((a, b))
            self._handed = None

    def _flush_acks(self) -> None:
        if self._unacked:
            acks, self._unacked = self._unacked, {}
            self._dispatcher.ack(acks)

    def _connect_new(self, status: dict[str, Any]) -> None:
        now = time.monotonic()
        for name, info in status["executors"].items():
            location = info["location"]
            key = f"{name}@{location}"
            if key in self._connections or now - self._refused.get(key, -1e9) < 1.0:
                continue
            try:
                self._connections[key] = _Connection(
                    key, location, self._token, self.credits, self._queue, self._ca
                )
            except (flight.FlightError, pa.ArrowException, OSError):
                self._refused[key] = now

    def __iter__(self) -> Iterator[TensorBatch]:
        return cast(Iterator[TensorBatch], self.batches())

    def acknowledge(self) -> None:
        """Acknowledge what was handed over now, without asking for the next batch (a trainer that
        holds rows while others wait on its acknowledgement: an ordered graph's barrier)."""
        self._settle()
        self._flush_acks()

    def batches(self, pause_s: float | None = None) -> Iterator[TensorBatch | None]:
        """The batches; with ``pause_s``, None each time no batch came for that long, so that a
        trainer of several can step on without rows (the rows may be held by another trainer's
        stream until that trainer steps: waiting here for them could wait for ever)."""
        last_ack = time.monotonic()
        last_progress = time.monotonic()
        last_discovery = time.monotonic()
        self.idle = False
        self._connect_new(self._dispatcher.status())
        try:
            while True:
                try:
                    # A short wait first: while batches flow, no control RPC is made per batch.
                    conn, meta, data = self._queue.get(timeout=0.02)
                except queue.Empty:
                    # Out of batches: acknowledge now (that may be what finishes the pass) and ask
                    # the cheap question before waiting.
                    self._flush_acks()
                    last_ack = time.monotonic()
                    state = self._dispatcher.finished()
                    if state["failed"]:
                        status = self._dispatcher.status()
                        raise DataServiceError(f"data job failed: {status['quarantined']}") from None
                    if state["finished"] and self._queue.empty():
                        return
                    if self.stop_when_idle and state.get("idle") and self._queue.empty():
                        self.idle = True
                        return
                    if time.monotonic() - last_discovery >= self.poll_s:
                        # Starved, if only for a moment: an executor added since (a scale-out) is
                        # what would feed us. Waiting for a whole poll_s without a batch first would
                        # never find it while one executor keeps trickling batches in.
                        self._connect_new(self._dispatcher.status())
                        last_discovery = time.monotonic()
                    try:
                        conn, meta, data = self._queue.get(timeout=self.poll_s)
                    except queue.Empty:
                        if pause_s is not None and time.monotonic() - last_progress >= pause_s:
                            yield None
                        if time.monotonic() - last_discovery >= self.poll_s:
                            status = self._dispatcher.status()
                            self._connect_new(status)
                            last_discovery = time.monotonic()
                            if time.monotonic() - last_progress > self.stall_timeout_s:
                                raise DataServiceError(
                                    f"no data for {self.stall_timeout_s:.0f}s: {status}"
                                ) from None
                        continue
                if data is None:
                    if meta is None:  # the stream ended: forget it so a restarted executor reconnects
                        self._connections.pop(conn.name, None)
                        conn.close()
                    continue
                last_progress = time.monotonic()
                task, start = meta["task"], int(meta["start"])
                if meta.get("source") is not None:
                    self.sources[task] = meta["source"]
                consumed = self._consumed.setdefault(task, IntervalSet())
                fresh = consumed.missing(start, start + data.num_rows)
                seen = data.num_rows - sum(b - a for a, b in fresh)
                if seen:
                    # Rows the trainer already has came again. Either an executor re-sent them, or
                    # the dispatcher lost their acknowledgement (a master restarted from its last
                    # saved progress): they are consumed, so acknowledge them again — dropped
                    # unacknowledged, their task would never complete and the pass never end.
                    self.duplicates_dropped += seen
                    self._unacked.setdefault(task, []).extend(consumed.present(start, start + data.num_rows))
                if self.claim and fresh:
                    fresh = self._dispatcher.claim({task: fresh}).get(task, [])
                if self.batch_rows is not None:
                    step = self.batch_rows
                    fresh = [(lo, min(lo + step, b)) for a, b in fresh for lo in range(a, b, step)]
                for a, b in fresh:
                    piece = data.slice(a - start, b - a)
                    # Progress counts a batch once it is handed to the trainer (like a stateful
                    # DataLoader's state_dict), so a checkpoint taken after the training step
                    # includes it; the dispatcher hears of it when the trainer asks for the next one.
                    consumed.add(a, b)
                    self.rows += b - a
                    self._handed = (task, a, b)
                    batch = to_tensors(piece, sparse=self.sparse, dense=self.dense, extra=self.extra)
                    batch.origin, batch.positions = task, np.arange(a, b, dtype=np.int64)
                    batch.window = meta.get("window")
                    yield batch
                    self._settle()
                conn.consumed()
                if time.monotonic() - last_ack >= self.ack_every_s:
                    self._flush_acks()
                    last_ack = time.monotonic()
        finally:
            try:
                self._settle()
                self._flush_acks()
            finally:
                for conn in list(self._connections.values()):
                    conn.close()
                self._connections.clear()
