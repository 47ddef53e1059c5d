"""Multi-hot columns of a batch as ``ids`` and ``offsets``, and the row operations on them.

A batch's list column is jagged: slicing, gathering or joining rows must move each row's IDs with it.
These are whole-array operations (offset arithmetic, ``repeat_interleave``) so that the mixer and the
shuffle buffer cost the same per step whether a row holds one ID or twenty. ``Bag`` is the model
protocol's record (training/protocol.py re-exports it): defined here, below the trainer, because
the data layer builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["Bag", "concat_bags", "gather_bag", "replace_rows", "slice_bag"]


@dataclass(frozen=True)
class Bag:
    """One multi-hot column of a batch: every row's IDs one after another (``ids``, int64) and where
    each row's start (``offsets``, int64, one per row, the first 0): ``nn.EmbeddingBag(ids, offsets)``
    pools it. An empty list is a row whose offset equals the next one's."""

    ids: torch.Tensor
    offsets: torch.Tensor

    def lengths(self) -> torch.Tensor:
        """Each row's number of IDs."""
        ends = torch.cat([self.offsets[1:], self.offsets.new_full((1,), self.ids.shape[0])])
        return ends[: self.offsets.shape[0]] - self.offsets

    def to(self, device: torch.device, non_blocking: bool = False) -> Bag:
        return Bag(
            self.ids.to(device, non_blocking=non_blocking),
            self.offsets.to(device, non_blocking=non_blocking),
        )


def slice_bag(bag: Bag, start: int, stop: int) -> Bag:
    """Rows [start, stop) (as a slice of the rows takes them): views of its IDs, offsets rebased."""
    rows = int(bag.offsets.shape[0])
    start, stop = min(start, rows), max(min(stop, rows), min(start, rows))
    first = int(bag.offsets[start]) if start < rows else int(bag.ids.shape[0])
    last = int(bag.offsets[stop]) if stop < rows else int(bag.ids.shape[0])
    return Bag(ids=bag.ids[first:last], offsets=bag.offsets[start:stop] - first)


def gather_bag(bag: Bag, index: torch.Tensor) -> Bag:
    """The rows at ``index`` (a jagged gather: a copy), in that order."""
    starts = bag.offsets.index_select(0, index)
    lengths = bag.lengths().index_select(0, index)
    offsets = torch.cumsum(lengths, 0) - lengths
    total = int(lengths.sum()) if lengths.numel() else 0
    # Each kept ID's source position: its row's start plus its place within the row.
    within = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(offsets, lengths)
    source = torch.repeat_interleave(starts, lengths) + within
    return Bag(ids=bag.ids.index_select(0, source), offsets=offsets)


def concat_bags(bags: Sequence[Bag]) -> Bag:
    """Bags of consecutive batches as one: IDs joined, each batch's offsets shifted past the last's."""
    shift, offsets = 0, []
    for bag in bags:
        offsets.append(bag.offsets + shift)
        shift += int(bag.ids.shape[0])
    return Bag(ids=torch.cat([b.ids for b in bags]), offsets=torch.cat(offsets))


def replace_rows(bag: Bag, slots: torch.Tensor, rows: Bag) -> Bag:
    """``bag`` with its rows at ``slots`` replaced by ``rows``' (in order): a jagged row can change
    length, so this builds a new bag (one gather over both) where fixed-width columns write in place."""
    rows_of = torch.arange(bag.offsets.shape[0], dtype=torch.int64)
    rows_of[slots] = bag.offsets.shape[0] + torch.arange(slots.shape[0], dtype=torch.int64)
    return gather_bag(concat_bags([bag, rows]), rows_of)
