"""A seeded, bounded shuffle of a files source's rows within each window.

History is served in time order, task after task; training on it in that order correlates every step
(one user's day, one file's hour), which is why practitioners shuffle the batch part. A full shuffle
would need the whole window in memory, so this is the streaming kind (a shuffle buffer, as in
``tf.data``): a pool of up to ``capacity`` rows; each row handed out is drawn uniformly from the pool
and its slot refilled with the next row served. The pool only ever holds one window's rows: at a
window's end it drains before the next window's rows come in, so shuffling never moves a row across
a window boundary (the time order between windows, which freshness and the watermark rely on, stays).

The pool's contents, in slot order, and the generator's state are the whole state: a checkpoint
holding them resumes the exact sequence an uninterrupted run would draw.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from airflow_provider_primus.data.bags import replace_rows
from airflow_provider_primus.data.tensors import TensorBatch, concat_batches, take_rows

__all__ = ["ShuffleBuffer"]


def _assign(pool: TensorBatch, slots: np.ndarray[Any, np.dtype[np.int64]], rows: TensorBatch) -> None:
    """Write ``rows`` into the pool's ``slots`` (in place: the pool's tensors are its own copies)."""
    index = torch.from_numpy(slots)
    pool.sparse.index_copy_(0, index, rows.sparse)
    pool.dense.index_copy_(0, index, rows.dense)
    pool.labels.index_copy_(0, index, rows.labels)
    if pool.event_time_ms is not None and rows.event_time_ms is not None:
        pool.event_time_ms.index_copy_(0, index, rows.event_time_ms)
    for name, values in pool.extra.items():
        values[slots] = rows.extra[name]
    if pool.positions is not None and rows.positions is not None:
        pool.positions[slots] = rows.positions
    if pool.origins is not None:
        pool.origins[slots] = rows.row_origins()
    if pool.bags:
        pool.bags = {k: replace_rows(b, index, rows.bags[k]) for k, b in pool.bags.items()}


def _own(batch: TensorBatch) -> TensorBatch:
    """A pool that may be written in place: its own arrays, and per-row origins."""
    return TensorBatch(
        sparse=batch.sparse.clone(),
        dense=batch.dense.clone(),
        labels=batch.labels.clone(),
        event_time_ms=None if batch.event_time_ms is None else batch.event_time_ms.clone(),
        extra={k: np.array(v, copy=True) for k, v in batch.extra.items()},
        origin=None,
        positions=None if batch.positions is None else np.array(batch.positions, copy=True),
        window=batch.window,
        origins=np.array(batch.row_origins(), copy=True),
        bags=dict(batch.bags),  # replaced, never written in place (_assign)
    )


class ShuffleBuffer:
    """The pool between the rows served (``put``) and the rows trained (``take``)."""

    def __init__(self, capacity: int, seed: int, state: Mapping[str, Any] | None = None) -> None:
        self.capacity = capacity
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._pending: collections.deque[TensorBatch] = collections.deque()
        self._pending_rows = 0
        self._pool: TensorBatch | None = None
        if state:
            self._rng.bit_generator.state = state["rng"]
            self._pool = state["pool"]
            for batch in state["pending"]:
                self.put(batch)

    @property
    def window(self) -> str | None:
        """The window the pool is drawing from now (None before the first rows)."""
        return self._pool.window if self._pool is not None and len(self._pool) else None

    def __len__(self) -> int:
        return (len(self._pool) if self._pool is not None else 0) + self._pending_rows

    def wants(self) -> int:
        """Rows to have on hand beyond a step's so the pool stays full while it is drawn from."""
        return self.capacity

    def put(self, batch: TensorBatch) -> None:
        if len(batch):
            self._pending.append(batch)
            self._pending_rows += len(batch)

    def take(self, rows: int) -> list[TensorBatch]:
        out: list[TensorBatch] = []
        while rows > 0:
            if self._pool is None or not len(self._pool):
                self._pool = self._new_pool()
                if self._pool is None:
                    break
            n = min(rows, len(self._pool))
            out.append(self._draw(n))
            rows -= n
        return out

    def _same_window(self) -> int:
        """Pending rows of the pool's window, in the order served (they come before any other)."""
        window = self._pool.window if self._pool is not None else None
        count = 0
        for batch in self._pending:
            if batch.window != window:
                break
            count += len(batch)
        return count

    def _new_pool(self) -> TensorBatch | None:
        if not self._pending:
            return None
        window = self._pending[0].window
        rows = 0
        for batch in self._pending:
            if batch.window != window or rows >= self.capacity:
                break
            rows += len(batch)
        parts = self._pop(min(rows, self.capacity))
        return _own(concat_batches(parts))

    def _pop(self, rows: int) -> list[TensorBatch]:
        parts = take_rows(self._pending, rows)
        self._pending_rows -= sum(len(b) for b in parts)
        return parts

    def _draw(self, n: int) -> TensorBatch:
        """``n`` rows drawn uniformly from the pool; their slots refilled from the same window's
        pending rows, or removed when the window has no more."""
        pool = self._pool
        assert pool is not None
        slots = np.sort(self._rng.choice(len(pool), size=n, replace=False)).astype(np.int64)
        out = pool.rows(slots)
        refill = min(n, self._same_window())
        if refill:
            _assign(pool, slots[:refill], concat_batches(self._pop(refill)))
        if refill < n:
            keep = np.ones(len(pool), dtype=bool)
            keep[slots[refill:]] = False
            self._pool = pool.rows(np.flatnonzero(keep).astype(np.int64))
        return out

    def state(self) -> dict[str, Any]:
        return {
            "rng": self._rng.bit_generator.state,
            "pool": self._pool,
            "pending": list(self._pending),
        }
