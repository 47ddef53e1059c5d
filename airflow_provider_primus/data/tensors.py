"""Transformed Arrow batches (``BatchTransformer`` output) as the tensors a DLRM-style model takes.

Conversion is whole-column: Arrow buffers become numpy arrays without copying where Arrow allows it
(no nulls, fixed width), and one stack per feature group builds the row-major matrices the embedding
and MLP layers read. Per-row Python here would dominate the trainer's input time.

Multi-hot columns (the transformer's list columns) become :class:`Bag` s: the IDs flat and one start
offset per row, ``nn.EmbeddingBag``'s input. Slicing, gathering and concatenating batches keep them
aligned with the rows by offset arithmetic over whole arrays, never a loop over rows.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from airflow_provider_primus.data.bags import Bag, concat_bags, gather_bag, slice_bag
from airflow_provider_primus.data.transforms import EVENT_TIME, LABEL

__all__ = ["Bag", "TensorBatch", "concat_batches", "take_rows", "to_tensors"]


@dataclass
class TensorBatch:
    """One training batch. ``extra`` carries passthrough columns (row ids, keys) as numpy arrays."""

    sparse: torch.Tensor  # int64 [n, n_sparse]
    dense: torch.Tensor  # float32 [n, n_dense]
    labels: torch.Tensor  # float32 [n]
    event_time_ms: torch.Tensor | None = None  # int64 [n]; None when the source has no event time
    extra: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    # Where the rows came from, so progress and sample identity survive slicing: the task id and row
    # numbers within it (batch sources) or "topic/partition" and offsets (a stream).
    origin: str | None = None
    positions: np.ndarray[Any, np.dtype[np.int64]] | None = None
    # The time window (the planner's task group) the rows belong to, for shuffling within a window.
    window: str | None = None
    # Per-row origins once rows of several tasks are mixed (a shuffle); ``origin`` is then None.
    origins: np.ndarray[Any, np.dtype[np.object_]] | None = None
    # The multi-hot columns by name (empty when the schema declares none).
    bags: dict[str, Bag] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def slice(self, start: int, stop: int) -> TensorBatch:
        """Rows [start, stop) as views: the mixer cuts steps out of batches without copying."""
        return TensorBatch(
            sparse=self.sparse[start:stop],
            dense=self.dense[start:stop],
            labels=self.labels[start:stop],
            event_time_ms=None if self.event_time_ms is None else self.event_time_ms[start:stop],
            extra={k: v[start:stop] for k, v in self.extra.items()},
            origin=self.origin,
            positions=None if self.positions is None else self.positions[start:stop],
            window=self.window,
            origins=None if self.origins is None else self.origins[start:stop],
            bags={k: slice_bag(b, start, stop) for k, b in self.bags.items()},
        )

    def rows(self, index: np.ndarray[Any, np.dtype[np.int64]]) -> TensorBatch:
        """The rows at ``index`` (a gather, so a copy), with their origins and positions."""
        picked = torch.from_numpy(index)
        return TensorBatch(
            sparse=torch.index_select(self.sparse, 0, picked),
            dense=torch.index_select(self.dense, 0, picked),
            labels=torch.index_select(self.labels, 0, picked),
            event_time_ms=None
            if self.event_time_ms is None
            else torch.index_select(self.event_time_ms, 0, picked),
            extra={k: v[index] for k, v in self.extra.items()},
            origin=self.origin,
            positions=None if self.positions is None else self.positions[index],
            window=self.window,
            origins=None if self.origins is None else self.origins[index],
            bags={k: gather_bag(b, picked) for k, b in self.bags.items()},
        )

    def row_origins(self) -> np.ndarray[Any, np.dtype[np.object_]]:
        """Every row's origin, whether the batch holds one task's rows or a shuffle of several."""
        if self.origins is not None:
            return self.origins
        out = np.empty(len(self), dtype=object)
        out[:] = self.origin
        return out

    def event_times(self) -> torch.Tensor:
        """Event times in ms; 0 (the epoch, "unknown") when the source declares none."""
        if self.event_time_ms is None:
            return torch.zeros(len(self), dtype=torch.int64)
        return self.event_time_ms


def _bag(values: pa.Array) -> Bag:
    """A transformed list column as ids (int64) and per-row start offsets (int64, the first 0)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    bounds = values.offsets.to_numpy().astype(np.int64)
    ids = values.values.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
    return Bag(
        ids=torch.from_numpy(np.array(ids.to_numpy(zero_copy_only=False), dtype=np.int64)),
        offsets=torch.from_numpy(bounds[:-1] - bounds[0]),
    )


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise KeyError(f"column {name!r} is not in the batch (found: {', '.join(batch.schema.names)})")
    return batch.column(index)


def _matrix(batch: pa.RecordBatch, names: Sequence[str], dtype: type[np.generic]) -> np.ndarray[Any, Any]:
    n = batch.num_rows
    if not names:
        return np.empty((n, 0), dtype=dtype)
    out = np.empty((n, len(names)), dtype=dtype)
    for j, name in enumerate(names):
        values = _column(batch, name)
        if values.null_count and np.issubdtype(dtype, np.integer):
            # The transformer never emits null IDs; a null here means an untransformed batch.
            raise ValueError(
                f"sparse column {name!r} has {values.null_count} nulls; transform the batch first"
            )
        # Dense nulls become NaN (Arrow's to_numpy for floats); a fill transform chooses otherwise.
        out[:, j] = values.to_numpy(zero_copy_only=False)
    return out


def to_tensors(
    batch: pa.RecordBatch,
    *,
    sparse: Sequence[str],
    dense: Sequence[str],
    extra: Sequence[str] = (),
) -> TensorBatch:
    """Tensors from a transformed batch: sparse IDs, dense features, ``label``, ``event_time`` and
    a :class:`Bag` for every list column that is not in ``extra``: the transformer emits exactly the
    schema's multi-hot columns as lists (and nothing else), so every reader that already names the
    sparse and dense columns gets the bags without naming them.

    Null event times become 0 ms (the epoch) so a batch never fails on one incomplete stream event;
    a watermark taken as the maximum is unaffected.
    """
    sparse_np = _matrix(batch, sparse, np.int64)
    dense_np = _matrix(batch, dense, np.float32)
    # A writable copy: torch warns on (and must not write through) Arrow's read-only buffers.
    labels = np.array(_column(batch, LABEL).to_numpy(zero_copy_only=False), dtype=np.float32)
    event_time: torch.Tensor | None = None
    index = batch.schema.get_field_index(EVENT_TIME)
    if index >= 0:
        values = batch.column(index)
        if pa.types.is_timestamp(values.type):
            values = pc.cast(values, pa.timestamp("ms", tz=values.type.tz), safe=False)
        millis = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy()
        event_time = torch.from_numpy(np.array(millis, dtype=np.int64))
    return TensorBatch(
        sparse=torch.from_numpy(sparse_np),
        dense=torch.from_numpy(dense_np),
        labels=torch.from_numpy(labels),
        event_time_ms=event_time,
        extra={name: _column(batch, name).to_numpy(zero_copy_only=False) for name in extra},
        bags={
            f.name: _bag(batch.column(i))
            for i, f in enumerate(batch.schema)
            if (pa.types.is_list(f.type) or pa.types.is_large_list(f.type)) and f.name not in extra
        },
    )


def concat_batches(batches: Sequence[TensorBatch]) -> TensorBatch:
    """One batch of several (of one source and window): a shuffle buffer's pool. Origins become
    per-row when the batches come from different tasks, so the trace still names every row."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    origins = {b.origin for b in batches if b.origins is None}
    mixed = len(origins) > 1 or any(b.origins is not None for b in batches)
    times = [b.event_time_ms for b in batches]
    positions = [b.positions for b in batches]
    return TensorBatch(
        sparse=torch.cat([b.sparse for b in batches]),
        dense=torch.cat([b.dense for b in batches]),
        labels=torch.cat([b.labels for b in batches]),
        event_time_ms=None
        if any(t is None for t in times)
        else torch.cat([t for t in times if t is not None]),
        extra={k: np.concatenate([b.extra[k] for b in batches]) for k in first.extra},
        origin=None if mixed else first.origin,
        positions=None
        if any(p is None for p in positions)
        else np.concatenate([p for p in positions if p is not None]),
        window=first.window,
        origins=np.concatenate([b.row_origins() for b in batches]) if mixed else None,
        bags={k: concat_bags([b.bags[k] for b in batches]) for k in first.bags},
    )


def take_rows(buffer: collections.deque[TensorBatch], rows: int) -> list[TensorBatch]:
    """Pop the first ``rows`` rows off a deque of batches, slicing the last one if needed."""
    out: list[TensorBatch] = []
    while rows > 0 and buffer:
        head = buffer[0]
        if len(head) <= rows:
            out.append(buffer.popleft())
            rows -= len(head)
        else:
            out.append(head.slice(0, rows))
            buffer[0] = head.slice(rows, len(head))
            rows = 0
    return out
