"""The stream's fetch thread: opens the consumer, fetches ahead of training, watches the broker.

kafka-python parses records in Python, holding the GIL; decoding happens on the decode thread
meanwhile (pyarrow releases the GIL), so the two overlap. Partitions are assigned explicitly (no group
rebalancing): the trainer, not the broker, owns the position.

A broker that goes away is waited for, with backoff, for as long as it takes: connection errors and
timeouts mark the stream unavailable (other sources train on) and the fetch position is kept, so
nothing is skipped or read twice when it returns; a broker never reached counts as away after as
long as one that stops answering takes to notice (``NOT_REACHED_S``). A position that is gone (the
broker says out of range, or that its log was truncated below it), or a log replaced under the
topic's name, goes to the source's ``offset_reset`` policy (``offsets.py``) here, in the fetch thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import TopicPartition
from kafka.errors import LogTruncationError, OffsetOutOfRangeError

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka_client import permanent_failure
from airflow_provider_primus.training.stream.offsets import (
    OffsetReset,
    lost_reason,
    new_consumer,
    offset_reset,
    planned_start,
    replacement,
    topic_log_identity,
)
from airflow_provider_primus.training.stream.reconnect import Backoff, retriable
from airflow_provider_primus.training.stream.state import RawItem, Seek, StreamState

log = logging.getLogger(__name__)

__all__ = ["EventSink", "Fetcher"]

# A stream event for the job (type, message, data): the trainer forwards them to its master.
EventSink = Callable[[str, str, dict[str, Any]], None]

PROBE_EVERY_S = 1.0  # how often the broker is asked for the partitions' end offsets (liveness)
PROBE_TIMEOUT_MS = 2000  # a broker that does not answer in this long is unavailable
# The longest a broker that stops answering mid-run goes unnoticed (the next probe is at most
# PROBE_EVERY_S away and waits PROBE_TIMEOUT_MS): a broker not reached this long after the stream
# started is unavailable too, although the consumer's first connection may go on trying for longer.
NOT_REACHED_S = PROBE_EVERY_S + PROBE_TIMEOUT_MS / 1000


class Fetcher:
    def __init__(
        self,
        source: KafkaSource,
        state: StreamState,
        *,
        requested_start: Mapping[int, int] | None,
        partitions: set[int] | None,
        bounded: bool,
        max_poll_records: int,
        max_buffered_rows: int,
        on_event: EventSink | None,
    ) -> None:
        """``requested_start``: a checkpoint's offsets, else the source's start policy applies;
        ``partitions``: this trainer's share (None: all); ``bounded``: stop at the end offsets seen
        when opened; ``max_buffered_rows``: how far fetching may run ahead of training."""
        self.source = source
        self._state = state
        self._requested_start = requested_start
        self._wanted = partitions
        self._bounded = bounded
        self._max_poll_records = max_poll_records
        self._max_buffered_rows = max_buffered_rows
        self._on_event = on_event
        self.consumer: Any = None  # used on the fetch thread only, until close()
        self._last_probe = 0.0
        self._reached = False  # the broker answered once (the consumer bootstrapped)
        # Partitions whose consumer-side high watermark predates a reset or an end that moved
        # backwards: it is ignored until their next records arrive (the probe's answers count).
        self._stale_highwater: set[int] = set()
        # One availability change at a time, its event included: the fetch thread and the
        # not-reached timer both report, and their events must come in the order of the changes.
        self._availability_lock = threading.Lock()

    def run(self) -> None:
        """The fetch thread's body: fetch until stopped (or, bounded, until the end offsets), then
        tell the decode thread there is no more."""
        state = self._state
        backoff = Backoff()
        polled: dict[int, int] = {}
        try:
            while not state.stopping.is_set():
                try:
                    if not state.opened:
                        self._open()
                        polled = dict(state.next_offset)
                        self._set_available(True)
                        backoff.reset()
                    self._fetch_once(polled)
                    if state.end_offsets is not None and all(
                        polled[p] >= e for p, e in state.end_offsets.items()
                    ):
                        break
                except OffsetOutOfRangeError as exc:
                    self._out_of_range(exc, polled)
                except LogTruncationError as exc:
                    self._truncated(exc, polled)
                except Exception as exc:
                    refused = permanent_failure(self.source, exc)
                    if refused is not None:  # a wrong password is not an outage to wait out
                        raise refused from None
                    if not retriable(exc):
                        raise
                    self._set_available(False, exc)
                    state.stopping.wait(backoff())
        except BaseException as exc:  # surfaced to the trainer by fill(); the thread must not die silently
            state.fail(exc)
        finally:
            self._put_raw(None)

    def close(self) -> None:
        """After the fetch thread has ended."""
        if self.consumer is not None:
            self.consumer.close()

    def _fetch_once(self, polled: dict[int, int]) -> None:
        state = self._state
        with state.cond:
            while (
                state.pending_rows + state.inflight_rows >= self._max_buffered_rows
                and not state.stopping.is_set()
            ):
                state.cond.wait(0.5)
        if state.end_offsets is not None and all(polled[p] >= e for p, e in state.end_offsets.items()):
            return
        records = self.consumer.poll(timeout_ms=200)
        if self._log_replaced(polled):
            return  # this poll may hold the new log's records at the old positions: not served
        for tp, fetched in records.items():
            end = None if state.end_offsets is None else state.end_offsets[tp.partition]
            batch = fetched if end is None else [r for r in fetched if r.offset < end]
            if not batch:
                continue
            polled[tp.partition] = batch[-1].offset + 1
            self._stale_highwater.discard(tp.partition)  # this fetch set the consumer's highwater
            if end is not None and polled[tp.partition] >= end:
                self.consumer.pause(tp)
            with state.cond:
                state.inflight_rows += len(batch)
            self._put_raw((tp.partition, batch))
        if records:
            self._set_available(True)
        self._note_high_watermarks()
        if time.monotonic() - self._last_probe >= PROBE_EVERY_S:
            self._probe()

    def _probe(self) -> None:
        """Ask for the end offsets: an answer proves the broker serves (an idle stream's empty
        polls prove nothing), and it is the freshest high watermark for the lag."""
        state = self._state
        self._last_probe = time.monotonic()
        ends = self.consumer.end_offsets(state.tps, timeout_ms=PROBE_TIMEOUT_MS)
        with state.cond:
            for tp, end in ends.items():
                known = state.high.get(tp.partition)
                if known is not None and int(end) < known:
                    # The end moved backwards (the log cut back or replaced): the lag counts from
                    # where the partition ends now, not from a high watermark that is gone.
                    self._stale_highwater.add(tp.partition)
                    state.high[tp.partition] = int(end)
                else:
                    state.high[tp.partition] = max(int(end), known or 0)
            state.cond.notify_all()
        self._set_available(True)

    def _note_high_watermarks(self) -> None:
        state = self._state
        with state.cond:
            for tp in state.tps:
                high = None if tp.partition in self._stale_highwater else self.consumer.highwater(tp)
                if high is not None:
                    state.high[tp.partition] = max(int(high), state.high.get(tp.partition) or 0)
                elif state.high[tp.partition] is None and state.polls >= 1:
                    state.high[tp.partition] = int(self.consumer.end_offsets([tp])[tp])
            state.polls += 1
            state.cond.notify_all()

    def _put_raw(self, item: RawItem) -> None:
        state = self._state
        while not state.stopping.is_set() or item is None:
            try:
                state.raw.put(item, timeout=0.2)
                return
            except queue.Full:
                if item is None and state.stopping.is_set():
                    return

    # -- availability ------------------------------------------------------------------------------

    def _event(self, type_: str, message: str, **data: Any) -> None:
        log.warning("stream %s: %s", self.source.name, message)
        if self._on_event is not None:
            self._on_event(type_, message, {"source": self.source.name, **data})

    def not_reached(self) -> None:
        """``NOT_REACHED_S`` after the stream started (the not-reached timer): a broker never reached
        by then is unavailable, as one that stops answering mid-run is by then."""
        if self._reached or self._state.stopping.is_set():
            return
        self._set_available(
            False,
            TimeoutError(f"the broker was not reached within {NOT_REACHED_S:.0f}s of the stream's start"),
        )

    def _set_available(self, available: bool, error: BaseException | None = None) -> None:
        state = self._state
        with self._availability_lock:
            with state.cond:
                if not state.availability.update(available, error, time.monotonic()):
                    return
                if not available:
                    state.cond.notify_all()  # a fill() waiting for rows serves without them
                last_error, down = state.availability.last_error, state.availability.last_outage_s
            if not available:
                self._event(
                    "StreamUnavailable",
                    f"broker unavailable ({last_error}); other sources train on, reconnecting",
                    error=last_error,
                )
            else:
                self._event(
                    "StreamRecovered",
                    f"broker available again after {down:.1f}s; the stream trains again",
                    outage_s=round(down or 0.0, 3),
                )

    # -- opening and offset policy -------------------------------------------------------------------

    def _open(self) -> None:
        """Connect, find the partitions and where to start, and check that a checkpoint's offsets
        still index the log they were read from. Retriable failures propagate to the caller, which
        waits and tries again; everything made here is dropped first."""
        state = self._state
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = None
        consumer = new_consumer(self.source, self._max_poll_records)
        self.consumer = consumer
        self._reached = True
        start = self._requested_start
        if start is None:
            start = planned_start(self.source)
        else:
            consumer.partitions_for_topic(self.source.topic)  # the topic's metadata: its id
        tps = [
            TopicPartition(self.source.topic, p)
            for p in sorted(start)
            if self._wanted is None or p in self._wanted
        ]
        first = consumer.beginning_offsets(tps)
        last = consumer.end_offsets(tps)
        identity = topic_log_identity(consumer, self.source.topic)
        replaced = replacement(state.log_identity, identity)
        positions: dict[int, int] = {}
        for tp in tps:
            want, lo, hi = int(start[tp.partition]), int(first[tp]), int(last[tp])
            if replaced is not None:  # nothing is buffered yet: nothing of the old log to drop
                reset = self._policy(tp.partition, want, lo, hi, replaced, same_log=False)
                positions[tp.partition] = self.report_reset(reset)
            elif not lo <= want <= hi:
                why = lost_reason(want, lo)
                reset = self._policy(tp.partition, want, lo, hi, why, same_log=True)
                positions[tp.partition] = self.report_reset(reset)
            else:
                positions[tp.partition] = want
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, positions[tp.partition])
        self._stale_highwater.clear()  # a new consumer's high watermarks are all of the log it reads
        with state.cond:
            state.tps = tps
            state.log_identity = identity
            state.next_offset = dict(positions)
            state.high = {tp.partition: None for tp in tps}
            if self._bounded:
                state.end_offsets = {tp.partition: int(last[tp]) for tp in tps}
                state.high.update(state.end_offsets)  # a replay's end is its high watermark for the lag
            state.opened = True
            state.cond.notify_all()
        self._last_probe = time.monotonic()

    def _policy(
        self, partition: int, position: int, lo: int, hi: int, why: str, *, same_log: bool
    ) -> OffsetReset:
        """Where to go on when ``position`` cannot be resumed, per the source's ``offset_reset``;
        raises ``StreamOffsetLost`` under ``fail``. The partition's end is ``hi`` from now on: the
        lag must not go on counting from a high watermark of records that are gone (a bounded
        replay keeps its end: that is its high watermark for the lag)."""
        reset = offset_reset(self.source, partition, position, lo=lo, hi=hi, why=why, same_log=same_log)
        state = self._state
        with state.cond:
            self._stale_highwater.add(partition)
            if partition in state.high and state.end_offsets is None:
                state.high[partition] = hi
            state.cond.notify_all()
        return reset

    def report_reset(self, reset: OffsetReset) -> int:
        """Count a reset's skipped records and send its event, the one figure for both (and so for
        the status and the checkpoint); returns where the partition goes on."""
        with self._state.cond:
            self._state.skipped_records += reset.skipped
        self._event("StreamOffsetReset", reset.message, **reset.data)
        return reset.target

    def _out_of_range(self, exc: OffsetOutOfRangeError, polled: dict[int, int]) -> None:
        """The broker says a fetch position is gone (retention, truncation): apply the policy."""
        state = self._state
        lost = exc.args[0] if exc.args and isinstance(exc.args[0], Mapping) else {}
        tps = [tp for tp in state.tps if tp in lost] or list(state.tps)
        first = self.consumer.beginning_offsets(tps)
        last = self.consumer.end_offsets(tps)
        for tp in tps:
            position = int(lost.get(tp, polled.get(tp.partition, 0)))
            lo, hi = int(first[tp]), int(last[tp])
            why = lost_reason(position, lo)
            reset = self._policy(tp.partition, position, lo, hi, why, same_log=True)
            self._seek(tp, self.report_reset(reset), polled)

    def _truncated(self, exc: LogTruncationError, polled: dict[int, int]) -> None:
        """The broker says its log was cut back below a fetch position (its data wiped, the topic
        deleted and created again, an unclean leader election): the records there are gone, or are
        other ones. A log replaced under the name goes by its new identity; otherwise it is a
        position that is gone, and the policy applies here, in the fetch thread."""
        if self._log_replaced(polled):
            return
        state = self._state
        divergent: Mapping[Any, Any] = getattr(exc, "divergent_offsets", None) or {}
        tps = [tp for tp in state.tps if tp in divergent] or list(state.tps)
        first = self.consumer.beginning_offsets(tps)
        last = self.consumer.end_offsets(tps)
        for tp in tps:
            position, lo, hi = int(polled.get(tp.partition, 0)), int(first[tp]), int(last[tp])
            at = divergent.get(tp)
            if at is not None and position <= int(at.offset):
                # Reported for a position already left (a validation still in flight when the policy
                # moved it): nothing before it is gone. The seek clears the consumer's validation.
                self.consumer.seek(tp, position)
                continue
            why = "the log was truncated below it" + (f" (at offset {at.offset})" if at is not None else "")
            reset = self._policy(tp.partition, position, lo, hi, why, same_log=True)
            self._seek(tp, self.report_reset(reset), polled)

    def _log_replaced(self, polled: dict[int, int]) -> bool:
        """After a poll: is the topic behind the name another log now (a broker whose data was wiped,
        a topic deleted and created again)? Then its offsets name other records: the policy decides,
        and rows buffered from the old log are dropped where the seek takes effect (the decode
        thread), which counts and reports the reset with them."""
        state = self._state
        identity = topic_log_identity(self.consumer, self.source.topic)
        why = replacement(state.log_identity, identity)
        if why is None:
            if identity.get("topic_id") and not state.log_identity.get("topic_id"):
                state.log_identity = identity
            return False
        first = self.consumer.beginning_offsets(state.tps)
        last = self.consumer.end_offsets(state.tps)
        for tp in state.tps:
            lo, hi = int(first[tp]), int(last[tp])
            reset = self._policy(tp.partition, polled[tp.partition], lo, hi, why, same_log=False)
            self._seek(tp, reset.target, polled, replaced=reset)
        state.log_identity = identity
        return True

    def _seek(
        self, tp: TopicPartition, offset: int, polled: dict[int, int], *, replaced: OffsetReset | None = None
    ) -> None:
        self.consumer.seek(tp, offset)
        polled[tp.partition] = offset
        self._put_raw((tp.partition, Seek(offset, replaced)))
