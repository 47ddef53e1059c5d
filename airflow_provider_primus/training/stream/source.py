"""The stream source: JSON events from Kafka turned into the same tensors the batch sources produce.

Three threads share the work (``state.py`` holds what they share): the fetch thread
(``fetch.py``: opening, the offset policy, broker outages) reads ahead of training, the decode thread
turns blocks into tensor batches (``decode.py``; malformed events go to ``deadletters.py``), and the
trainer is served from the buffer here.

Offsets: ``trained_offsets()`` is, per partition, the offset of the first record not yet trained on.
That is what a checkpoint stores and what is committed to the consumer group once the checkpoint is
durable (``commit``, ``commits.py``); Kafka's own auto-commit is off, since it would commit what was
merely read. Rows are served in poll order, which is deterministic for a single-partition topic.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.tensors import TensorBatch, take_rows
from airflow_provider_primus.training.stream.commits import OffsetCommitter
from airflow_provider_primus.training.stream.deadletters import DeadLetters, dead_letter_topic
from airflow_provider_primus.training.stream.decode import StreamDecoder
from airflow_provider_primus.training.stream.fetch import NOT_REACHED_S, EventSink, Fetcher
from airflow_provider_primus.training.stream.offsets import StreamOffsetLost, with_dropped
from airflow_provider_primus.training.stream.state import Seek, StreamState

__all__ = ["StreamOffsetLost", "StreamSource", "dead_letter_topic"]

OPEN_WAIT_S = 5.0  # how long fill() waits for a first connection before serving without the stream


def _partition_of(batch: TensorBatch) -> int:
    return int(str(batch.origin).rsplit("/", 1)[1])  # origin is "topic/partition"


class StreamSource:
    def __init__(
        self,
        source: KafkaSource,
        *,
        passthrough: Sequence[str] = (),
        start_offsets: Mapping[int, int] | None = None,
        bounded: bool = False,
        partitions: Sequence[int] | None = None,
        max_poll_records: int = 5000,
        max_buffered_rows: int = 20_000,
        dead_letters: bool = True,
        log_identity: Mapping[str, Any] | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        """``start_offsets`` (a checkpoint's) wins over the source's start policy. ``bounded`` stops
        at the end offsets seen at start (a replay); otherwise the stream is followed for ever.
        ``partitions`` restricts this trainer to its share of the topic. ``log_identity`` is the
        checkpoint's record of which log its offsets index (cluster and topic id): offsets of a
        recreated topic name other records. ``on_event`` receives the stream's job events.

        Nothing here talks to the broker: the consumer is opened on the fetch thread, retried for as
        long as the broker is away, so a trainer started during an outage trains its other sources."""
        self.source = source
        self._dead_letters = DeadLetters(source, enabled=dead_letters)
        self._decoder = StreamDecoder(source, passthrough, self._dead_letters)
        requested = {int(p): int(o) for p, o in start_offsets.items()} if start_offsets else None
        wanted = set(partitions) if partitions is not None else None
        self._state = StreamState(
            next_offset={p: o for p, o in (requested or {}).items() if wanted is None or p in wanted},
            log_identity=dict(log_identity or {}),
        )
        self._created = time.monotonic()
        self._committer = OffsetCommitter(source)
        # Fetching and decoding run on their own threads, ahead of training by at most
        # ``max_buffered_rows``: kafka-python parses in Python, pyarrow decodes without the GIL, and
        # torch trains without it, so the three overlap. The consumer is used on the fetch thread only.
        self.max_buffered_rows = max(max_buffered_rows, 2 * max_poll_records)
        self._fetcher = Fetcher(
            source,
            self._state,
            requested_start=requested,
            partitions=wanted,
            bounded=bounded,
            max_poll_records=max_poll_records,
            max_buffered_rows=self.max_buffered_rows,
            on_event=on_event,
        )
        self._threads = [
            threading.Thread(target=self._fetcher.run, name=f"primus-fetch-{source.name}", daemon=True),
            threading.Thread(target=self._decode_loop, name=f"primus-decode-{source.name}", daemon=True),
        ]
        # A broker never reached is an outage like one that stops answering mid-run, noticed as soon.
        self._not_reached = threading.Timer(NOT_REACHED_S, self._fetcher.not_reached)
        self._not_reached.daemon = True
        for thread in self._threads:
            thread.start()
        self._not_reached.start()

    # -- counters a checkpoint restores -------------------------------------------------------------

    @property
    def available(self) -> bool:
        """Whether the broker answers (a trainer defers nothing to a stream that cannot serve)."""
        return self._state.availability.available

    @property
    def dead_lettered(self) -> int:
        """Malformed messages at or behind the trained position."""
        return self._state.dead_lettered

    @property
    def skipped_records(self) -> int:
        """Records skipped by an offset_reset policy (never silently)."""
        return self._state.skipped_records

    @property
    def event_times_clamped(self) -> int:
        """Event times moved to a bound of the source's ``event_time_policy`` (``action: clamp``)."""
        return self._decoder.clamped

    def resume_counts(self, *, dead_lettered: int, skipped_records: int) -> None:
        """Add a checkpoint's counts. Added, not set: the fetch thread is already running and may
        have counted an offset reset of its own since it started."""
        with self._state.cond:
            self._state.dead_lettered += dead_lettered
            self._state.skipped_records += skipped_records

    # -- reading ------------------------------------------------------------------------------------

    def _position_lag(self) -> int:
        """Records on the broker past what was decoded, from the high watermarks of the last fetch;
        -1 until the consumer is open and every partition has answered once."""
        state = self._state
        if not state.opened:
            return -1
        lag = 0
        for p, high in state.high.items():
            if high is None:
                return -1
            end = high if state.end_offsets is None else min(high, state.end_offsets[p])
            lag += max(0, end - state.next_offset[p])
        return lag

    def _partition_lag(self) -> dict[str, int]:
        """Records on the broker not yet read, per partition (as of each partition's last fetch)."""
        state = self._state
        out = {}
        for p, high in sorted(state.high.items()):
            if high is not None and p in state.next_offset:
                out[str(p)] = max(0, high - state.next_offset[p])
        return out

    def _ended(self) -> bool:
        state = self._state
        return state.end_offsets is not None and all(
            state.next_offset[p] >= e for p, e in state.end_offsets.items()
        )

    def _serving(self) -> bool:
        """Whether waiting for the broker makes sense: it answers, or it may still answer soon."""
        if not self._state.availability.available:
            return False
        return self._state.opened or time.monotonic() - self._created < OPEN_WAIT_S

    def lag_records(self, timeout_s: float = 30.0) -> int:
        """Records on the broker not yet decoded plus decoded rows not yet trained. Waits for the
        first fetch to answer: guessing 0 before it would make the guard's first decision a race.
        While the broker is away it is what is buffered: nothing more can be served."""
        state = self._state
        with state.cond:
            state.cond.wait_for(
                lambda: self._position_lag() >= 0 or state.error is not None or not self._serving(),
                timeout=timeout_s,
            )
            return max(0, self._position_lag()) + state.pending_rows

    def caught_up(self) -> bool:
        """Nothing left to read right now (the stream is idle, or a bounded replay reached its end)."""
        with self._state.cond:
            return self._ended() or self._position_lag() == 0

    def exhausted(self) -> bool:
        """Only a bounded replay ends."""
        with self._state.cond:
            return self._ended() and self._state.pending_rows == 0

    def buffered(self) -> int:
        with self._state.cond:
            return self._state.pending_rows

    def health(self) -> dict[str, Any]:
        """The stream's side of the job status: is it being served, and what did outages cost."""
        state = self._state
        with state.cond:
            return {
                **state.availability.report(time.monotonic()),
                "lag": self._partition_lag(),
                "skipped_records": state.skipped_records,
                "commit_pending": self._committer.pending(),
            }

    def fill(self, rows: int, timeout_s: float = 30.0) -> int:
        """Wait until ``rows`` are buffered or the stream has nothing more now; returns what is buffered.

        "Nothing more" is judged by offsets (the high watermark), not by an empty poll, so the same
        topic contents always give the same batches. A broker that is away has nothing more: the
        rows buffered are served at once and the other sources train meanwhile.
        """
        state = self._state
        deadline = time.monotonic() + timeout_s
        with state.cond:
            while state.pending_rows < rows and not self._ended() and self._position_lag() != 0:
                self._raise_error()
                if not self._serving():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                state.cond.wait(min(left, 0.5))
            self._raise_error()
            return state.pending_rows

    def wait(self, timeout_s: float) -> None:
        """Wait for the next fetch round (a following trainer with nothing to do)."""
        state = self._state
        with state.cond:
            polls = state.polls
            state.cond.wait_for(lambda: state.polls != polls or state.error is not None, timeout=timeout_s)

    def _raise_error(self) -> None:
        error = self._state.error
        if error is None:
            return
        if isinstance(error, StreamOffsetLost):
            raise error
        raise RuntimeError(f"stream {self.source.name}: ingest failed: {error}") from error

    # -- the decode thread ----------------------------------------------------------------------------

    def _decode_loop(self) -> None:
        state = self._state
        try:
            while True:
                try:
                    item = state.raw.get(timeout=0.2)
                except queue.Empty:
                    if state.stopping.is_set():
                        return
                    continue
                if item is None:
                    return
                partition, batch = item
                if isinstance(batch, Seek):  # an offset reset: the partition goes on from there
                    self._apply_seek(partition, batch)
                    continue
                pending, malformed = self._decoder.decode_block(partition, batch)
                with state.cond:
                    state.pending.extend(pending)
                    added = sum(len(b) for b in pending)
                    state.pending_rows += added
                    state.inflight_rows -= len(batch)
                    state.malformed_ahead[partition].extend(malformed)
                    state.next_offset[partition] = batch[-1].offset + 1
                    state.cond.notify_all()
        except BaseException as exc:
            state.fail(exc)
        finally:
            with contextlib.suppress(Exception):
                self.flush()

    def _apply_seek(self, partition: int, seek: Seek) -> None:
        state = self._state
        dropped = 0
        with state.cond:
            if seek.replaced is not None:  # rows of a replaced log: their offsets mean nothing now
                kept = collections.deque(b for b in state.pending if _partition_of(b) != partition)
                dropped = state.pending_rows - sum(len(b) for b in kept)
                state.pending, state.pending_rows = kept, state.pending_rows - dropped
                state.malformed_ahead[partition].clear()
            state.next_offset[partition] = seek.offset
            state.cond.notify_all()
        if seek.replaced is not None:  # counted and reported once, with what was dropped
            self._fetcher.report_reset(with_dropped(seek.replaced, dropped))

    # -- serving ------------------------------------------------------------------------------------

    def peek_event_times(self, rows: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Event times (ms) of the next ``rows`` buffered rows, for the replay gate and the age check."""
        out: list[np.ndarray[Any, Any]] = []
        need = rows
        with self._state.cond:
            pendings = list(self._state.pending)
        for batch in pendings:
            if need <= 0:
                break
            times = batch.event_times()[:need].numpy()
            out.append(times)
            need -= len(times)
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)

    def take(self, rows: int) -> list[TensorBatch]:
        """The next ``rows`` buffered rows (fewer if fewer are buffered), marked as trained."""
        state = self._state
        with state.cond:
            out = take_rows(state.pending, rows)
            state.pending_rows -= sum(len(b) for b in out)
            self._settle_malformed()
            state.cond.notify_all()  # room in the buffer: the fetch thread may read on
        return out

    def _settle_malformed(self) -> None:
        state = self._state
        trained = self._trained_locked()
        for partition, ahead in state.malformed_ahead.items():
            while ahead and ahead[0] < trained[partition]:
                ahead.popleft()
                state.dead_lettered += 1

    def malformed_seen(self) -> int:
        state = self._state
        with state.cond:
            return state.dead_lettered + sum(len(a) for a in state.malformed_ahead.values())

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint stores: first untrained offsets, the malformed count behind them, the
        log the offsets index (so a recreated topic is noticed on resume) and the records skipped."""
        state = self._state
        with state.cond:
            self._settle_malformed()
            return {
                "offsets": self._trained_locked(),
                "dead_lettered": state.dead_lettered,
                "log": dict(state.log_identity),
                "skipped_records": state.skipped_records,
            }

    def trained_offsets(self) -> dict[int, int]:
        """Per partition, the first offset not yet trained on (what a checkpoint stores)."""
        with self._state.cond:
            return self._trained_locked()

    def _trained_locked(self) -> dict[int, int]:
        state = self._state
        first_pending: dict[int, int] = {}
        for batch in state.pending:  # positions are offsets
            partition = _partition_of(batch)
            if partition not in first_pending and batch.positions is not None:
                first_pending[partition] = int(batch.positions[0])
        return {p: first_pending.get(p, state.next_offset[p]) for p in state.next_offset}

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit a checkpoint's offsets to the consumer group (for lag monitoring and `committed`).

        Never blocks and never fails training: the checkpoint is the durable position; the group's
        offsets only mirror it, and are retried in the background while the broker is away."""
        self._committer.submit(offsets)

    def flush(self) -> None:
        self._dead_letters.flush()

    def close(self) -> None:
        state = self._state
        state.stopping.set()
        self._not_reached.cancel()
        with state.cond:
            state.cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self._dead_letters.close()
        self._committer.close()
        self._fetcher.close()
