"""Feeds: one per source, the mixer's view of it — rows ready now, take rows, finished, its state.

A file feed runs that source's part of the data service inside the trainer: a dispatcher (thread)
over the planned tasks and data-executor processes tied to the trainer's life, read through
``PrimusDataLoader``. Rows the loader handed over but the mixer has not trained yet stay in the
feed's buffer (in served order, or in a seeded shuffle buffer within each window); a checkpoint
stores them, with the shuffle's state and the loader's progress, so a resumed run trains exactly the
rows an uninterrupted one would have, in the same order.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient, DispatcherServer
from airflow_provider_primus.data.service.launch import ExecutorProcess, launch_executor
from airflow_provider_primus.data.service.loader import PrimusDataLoader
from airflow_provider_primus.data.tensors import TensorBatch, take_rows
from airflow_provider_primus.training.feeds.shuffle import ShuffleBuffer
from airflow_provider_primus.training.stream.source import StreamSource

__all__ = ["SHARED_PAUSE_S", "Feed", "Fifo", "FileFeed", "MemoryFeed", "ServiceReader", "StreamFeed"]

SHARED_PAUSE_S = 0.2  # how long a trainer of several waits for rows before stepping on without


class Feed(Protocol):
    """The trainer's view of a source; ready-made ones (``MemoryFeed``) stand in for sources in benchmarks."""

    name: str
    stream: bool

    def available(self, want: int) -> int: ...
    def take(self, rows: int) -> list[TensorBatch]: ...
    def exhausted(self) -> bool: ...
    def state(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class Fifo:
    """Rows in the order served: history in time order (``mixing.shuffle.buffer_rows: 0``)."""

    def __init__(self, batches: Sequence[TensorBatch] = ()) -> None:
        self._buffer: collections.deque[TensorBatch] = collections.deque(batches)
        self._rows = sum(len(b) for b in self._buffer)

    def wants(self) -> int:
        return 0

    def __len__(self) -> int:
        return self._rows

    def put(self, batch: TensorBatch) -> None:
        self._buffer.append(batch)
        self._rows += len(batch)

    def take(self, rows: int) -> list[TensorBatch]:
        out = take_rows(self._buffer, rows)
        self._rows -= sum(len(b) for b in out)
        return out

    def state(self) -> list[TensorBatch]:
        return list(self._buffer)


def _hold(shuffle: tuple[int, int] | None, state: Mapping[str, Any] | None) -> Fifo | ShuffleBuffer:
    """The feed's buffer: a shuffle of ``(buffer_rows, seed)`` or the served order, at ``state``."""
    buffered = list(state["buffered"]) if state else []
    if shuffle is None or shuffle[0] <= 0:
        return Fifo(buffered)
    saved = state.get("shuffle") if state else None
    hold = ShuffleBuffer(shuffle[0], shuffle[1], saved)
    if saved is None:  # a checkpoint from before shuffling (or of a run without it)
        for batch in buffered:
            hold.put(batch)
    return hold


class ServiceReader:
    """One trainer's connection to a data service, shared by the feeds of the files sources it
    serves. A job's master runs one data service for all of the job's files sources (one task graph,
    one set of data executors, one exactly-once ledger), so its rows arrive interleaved: each batch
    is put in the buffer of the source its task belongs to. Filling one feed stops once another's
    buffer holds twice what that feed last asked for: the mixer then finds those rows ready and takes
    them as spare capacity, so no buffer grows without bound and no feed waits on another."""

    def __init__(
        self,
        location: str,
        *,
        token: str,
        sparse: Sequence[str],
        dense: Sequence[str],
        passthrough: Sequence[str],
        progress: Mapping[str, Any] | None,
        open_graph: bool = False,
        grace_s: float = 0.0,
        claim: bool = False,
    ) -> None:
        self.location = location
        self.loader = PrimusDataLoader(
            location,
            token,
            sparse=sparse,
            dense=dense,
            extra=passthrough,
            progress=progress,
            credits=8,
            grace_s=grace_s,
            stop_when_idle=open_graph,
            claim=claim,
        )
        # Trainers sharing the data service step on without rows rather than wait for them: the
        # rows may sit in another trainer's stream until that trainer steps, with us.
        self._pause_s = SHARED_PAUSE_S if claim else None
        self._it: Iterator[TensorBatch | None] = self.loader.batches(self._pause_s)
        self._retry_at = 0.0
        self.done = False
        self.holds: dict[str, Fifo | ShuffleBuffer] = {}
        self._targets: dict[str, int] = {}
        self._owner: dict[str, str] = {}  # task -> the source whose feed received its rows

    def join(self, name: str, hold: Fifo | ShuffleBuffer, progress: Mapping[str, Any] | None) -> None:
        """A feed of source ``name``, its buffer, and the tasks its checkpointed progress covers."""
        self.holds[name] = hold
        for task in progress or {}:
            self._owner[task] = name

    def _source_of(self, task: str | None) -> str:
        if len(self.holds) == 1:  # one feed over the service: all its rows (a holdout's feed too)
            return next(iter(self.holds))
        source = self.loader.sources.get(task or "")
        if source is None or source not in self.holds:
            raise RuntimeError(
                f"the data service at {self.location} sent rows of task {task} of source {source!r}, "
                f"which this trainer does not read (it reads {', '.join(sorted(self.holds))})"
            )
        return source

    def fill(self, name: str, target: int) -> None:
        """Read until ``name``'s buffer holds ``target`` rows, the pass ends, another feed's buffer
        is full (see the class), or (several trainers) nothing came for a moment."""
        self._targets[name] = target
        hold = self.holds[name]
        while len(hold) < target and not self.done and not self._others_full(name, target):
            if self.loader.idle:  # an open graph with nothing left for now: look again shortly
                if time.monotonic() < self._retry_at:
                    break
                self._it = self.loader.batches(self._pause_s)
            try:
                batch = next(self._it)
            except StopIteration:
                if self.loader.idle:
                    self._retry_at = time.monotonic() + 1.0
                    break
                self.done = True
                break
            if batch is None:  # nothing for now (a trainer of several): this step goes on without
                break
            source = self._source_of(batch.origin)
            self._owner[batch.origin or ""] = source
            self.holds[source].put(batch)
        if self.loader.claim:
            self.loader.acknowledge()  # the others may wait on what we hold (an ordered graph)

    def _others_full(self, name: str, target: int) -> bool:
        """Another feed holds twice what it last asked for (or, not asked yet, twice ``target``)."""
        return any(
            len(hold) >= 2 * max(self._targets.get(other, 0), target)
            for other, hold in self.holds.items()
            if other != name
        )

    def progress(self, name: str) -> dict[str, list[tuple[int, int]]]:
        """The rows of ``name``'s tasks handed over (its checkpoint's progress, keyed by task)."""
        single = len(self.holds) == 1
        return {t: r for t, r in self.loader.progress().items() if single or self._owner.get(t) == name}

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class FileFeed:
    stream = False

    def __init__(
        self,
        name: str,
        tasks: Sequence[Task],
        edges: Sequence[tuple[str, str]],
        *,
        spec_path: Path,
        token: str,
        sparse: Sequence[str],
        dense: Sequence[str],
        passthrough: Sequence[str] = (),
        executors: int = 1,
        batch_rows: int = 4096,
        state: Mapping[str, Any] | None = None,
        shuffle: tuple[int, int] | None = None,
    ) -> None:
        """``shuffle``: ``(buffer_rows, seed)`` to shuffle within each window, None for served order."""
        self.name = name
        self.server: DispatcherServer | None = None
        self.executors: list[ExecutorProcess] = []
        self._owns_service = True
        progress = dict(state["progress"]) if state else None
        server = DispatcherServer(Dispatcher(tasks, edges, progress=progress), token).start()
        self.server = server
        try:
            for i in range(executors):
                self.executors.append(
                    launch_executor(
                        f"{name}-{i}",
                        server.location,
                        spec_path,
                        token,
                        batch_rows=batch_rows,
                        passthrough=tuple(passthrough),
                    )
                )
            service = ServiceReader(
                server.location,
                token=token,
                sparse=sparse,
                dense=dense,
                passthrough=passthrough,
                progress=progress,
            )
        except Exception:
            self.close()
            raise
        self._join(service, state, shuffle)

    @classmethod
    def attach(
        cls,
        names: Sequence[str],
        location: str,
        *,
        token: str,
        sparse: Sequence[str],
        dense: Sequence[str],
        passthrough: Sequence[str] = (),
        states: Mapping[str, Mapping[str, Any] | None],
        open_graph: bool = False,
        grace_s: float = 0.0,
        shuffle: tuple[int, int] | None = None,
        rewind: Mapping[str, Any] | None = None,
        claim: bool = False,
    ) -> list[FileFeed]:
        """One feed per files source of ``names`` over a data service someone else runs (a job's
        master and its data executors), sharing one connection to it. ``states``: each source's
        checkpointed state; ``rewind``: where the service's consumption restarts (the checkpoint's,
        of every trainer and every source; None: another trainer rewinds it); ``claim``: other
        trainers read the same service."""
        # The master's dispatcher may have seen acknowledgements newer than our checkpoint (we
        # crashed after them): consumption restarts from what the checkpoint holds.
        if rewind is not None:
            client = DispatcherClient(location, token, grace_s=grace_s)
            try:
                client.rewind(dict(rewind))
            finally:
                client.close()
        progress: dict[str, Any] = {}
        for name in names:
            progress.update(dict((states.get(name) or {}).get("progress") or {}))
        service = ServiceReader(
            location,
            token=token,
            sparse=sparse,
            dense=dense,
            passthrough=passthrough,
            progress=progress,
            open_graph=open_graph,
            grace_s=grace_s,
            claim=claim,
        )
        feeds = []
        for name in names:
            feed = cls.__new__(cls)
            feed.name = name
            feed.server = None
            feed.executors = []
            feed._owns_service = name == names[0]  # the first closes the shared connection
            feed._join(service, states.get(name), shuffle)
            feeds.append(feed)
        return feeds

    def _join(
        self, service: ServiceReader, state: Mapping[str, Any] | None, shuffle: tuple[int, int] | None
    ) -> None:
        self.service = service
        self.location = service.location
        self.loader = service.loader
        self._hold = _hold(shuffle, state)
        service.join(self.name, self._hold, (state or {}).get("progress"))
        self.watermark_ms = int(state["watermark_ms"]) if state else 0
        self.window: str | None = state.get("window") if state else None  # of the rows taken last

    def available(self, want: int) -> int:
        """Blocks until ``want`` rows are buffered (and a shuffle's pool can stay full) or the
        window is finished: batch data is always "there", only the pipeline's latency stands
        between, so waiting keeps runs deterministic."""
        self.service.fill(self.name, want + self._hold.wants())
        return len(self._hold)

    def take(self, rows: int) -> list[TensorBatch]:
        out = self._hold.take(rows)
        for b in out:
            if b.event_time_ms is not None and len(b):
                self.watermark_ms = max(self.watermark_ms, int(b.event_time_ms.max()))
            if b.window is not None:
                self.window = b.window
        return out

    def exhausted(self) -> bool:
        return self.service.done and len(self._hold) == 0

    def state(self) -> dict[str, Any]:
        held = self._hold.state()
        return {
            "progress": self.service.progress(self.name),
            "buffered": held if isinstance(held, list) else [],
            "shuffle": held if isinstance(held, dict) else None,
            "watermark_ms": self.watermark_ms,
            "window": self.window,
        }

    def close(self) -> None:
        if hasattr(self, "service") and self._owns_service:
            self.service.close()
        if self.server is not None:
            self.server.stop()
        for e in self.executors:
            e.stop()


class StreamFeed:
    """A ``StreamSource`` as a feed. ``gate_ms`` (replay) holds back rows newer than the clock."""

    stream = True

    def __init__(self, name: str, source: StreamSource) -> None:
        self.name = name
        self.source = source
        self.gate_ms: int | None = None

    def released(self, rows: int) -> int:
        if self.gate_ms is None:
            return min(rows, self.source.buffered())
        times = self.source.peek_event_times(rows)
        late = np.flatnonzero(times > self.gate_ms)
        return int(late[0]) if len(late) else len(times)

    def available(self, want: int) -> int:
        self.source.fill(want)
        return self.released(max(want, self.source.buffered()))

    def lag_records(self) -> int:
        if self.gate_ms is None:
            return self.source.lag_records()
        self.source.fill(1)
        return self.released(self.source.buffered())

    def next_event_ms(self) -> int | None:
        times = self.source.peek_event_times(1)
        return int(times[0]) if len(times) else None

    def take(self, rows: int) -> list[TensorBatch]:
        return self.source.take(rows)

    def exhausted(self) -> bool:
        return self.source.exhausted()

    def state(self) -> dict[str, Any]:
        return self.source.checkpoint_state()

    def close(self) -> None:
        self.source.close()


class MemoryFeed:
    """Batches already in memory, as a feed: isolates the mixer's own cost in benchmarks."""

    def __init__(self, name: str, batches: Sequence[TensorBatch], *, stream: bool = False) -> None:
        self.name = name
        self.stream = stream
        self._hold = Fifo(batches)

    def available(self, want: int) -> int:
        return len(self._hold)

    def take(self, rows: int) -> list[TensorBatch]:
        return self._hold.take(rows)

    def exhausted(self) -> bool:
        return len(self._hold) == 0

    def state(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self._hold = Fifo()
