"""What the stream's threads share — the fetch thread, the decode thread and the trainer's — under
one lock.

One condition guards all of it, so every wait (the trainer's for rows, the fetch thread's for room in
the buffer, a lag query's for the first answer) is woken by whichever change can end it.
"""

from __future__ import annotations

import collections
import queue
import threading
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition

from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.stream.availability import Availability
from airflow_provider_primus.training.stream.offsets import OffsetReset

__all__ = ["RawItem", "Seek", "StreamState"]


@dataclass(frozen=True)
class Seek:
    """A partition's new position after an offset reset. ``replaced``: the reset of a replaced log,
    whose buffered rows are dropped where the seek takes effect; it is counted and reported there,
    with them, so that its event and ``skipped_records`` are one figure."""

    offset: int
    replaced: OffsetReset | None = None


# Fetched blocks (partition, records) in order; (partition, Seek) moves a partition's position after
# an offset reset, in order with the blocks around it; None: the fetch thread has finished.
RawItem = tuple[int, list[Any] | Seek] | None


class StreamState:
    def __init__(self, next_offset: dict[int, int], log_identity: dict[str, Any]) -> None:
        """``next_offset``: where decoding starts (a checkpoint's offsets, else set when opened);
        ``log_identity``: which log those offsets index (cluster and topic id)."""
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.error: BaseException | None = None  # a thread's failure, raised to the trainer
        self.raw: queue.Queue[RawItem] = queue.Queue(maxsize=4)
        # Set by the fetch thread once the consumer is open.
        self.opened = False
        self.tps: list[TopicPartition] = []
        self.log_identity = log_identity  # the checkpoint's at first, the broker's once opened
        self.next_offset = next_offset  # per partition, the first offset not yet decoded
        self.end_offsets: dict[int, int] | None = None  # a bounded replay's end
        self.high: dict[int, int | None] = {}  # high watermarks; None until a partition answers
        self.polls = 0
        self.availability = Availability()
        self.pending: collections.deque[TensorBatch] = collections.deque()  # decoded, not trained
        self.pending_rows = 0
        self.inflight_rows = 0  # fetched, not yet decoded
        # Malformed offsets still ahead of the trained position, per partition: they count as
        # dead-lettered in a checkpoint only once training has passed them.
        self.malformed_ahead: collections.defaultdict[int, collections.deque[int]] = collections.defaultdict(
            collections.deque
        )
        self.dead_lettered = 0  # at or behind the trained position
        # Skipped by an offset_reset policy (never silently): the sum of the resets' own counts, each
        # the figure its StreamOffsetReset event reports.
        self.skipped_records = 0

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error = exc
            self.cond.notify_all()
