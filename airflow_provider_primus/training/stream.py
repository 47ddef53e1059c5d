"""The stream source: JSON events from Kafka turned into the same tensors the batch sources produce.

One definition of features: events are decoded into Arrow record batches and passed through the
source's ``BatchTransformer``, the class the data executors use for files. Decoding takes a fast path
(the whole poll as newline-delimited JSON through pyarrow's multi-threaded C++ reader) and falls back
to one message at a time only when that block holds something malformed, so a bad event costs its
own block a slow pass but never the stream.

A malformed message (not JSON, not an object, a missing or null label, a missing ID or event time,
a value of the wrong type, a value the transforms cannot use; the rules are in ``screen.py``) is
counted and forwarded to the dead-letter topic with the reason in its headers; it is never trained
on and never stops training. The fast path cannot coerce a value past those rules: its block falls
back to the per-message path whenever a column's type is not one the rules allow. Dead-lettering
is at-least-once: after a crash the messages between the last checkpoint and the crash are re-read
and may be forwarded again (the headers carry topic/partition/offset to deduplicate on).

Offsets: ``trained_offsets()`` is, per partition, the offset of the first record not yet trained on.
That is what a checkpoint stores and what is committed to the consumer group once the checkpoint is
durable (``commit``); Kafka's own auto-commit is off, since it would commit what was merely read.
Partitions are assigned explicitly (no group rebalancing): the trainer, not the broker, owns the
position. Rows are served in poll order, which is deterministic for a single-partition topic.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError
from kafka.structs import OffsetAndMetadata

from airflow_provider_primus.data.sources.kafka import ensure_topic, resolve_offsets
from airflow_provider_primus.data.tensors import TensorBatch, take_rows, to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer, MissingLabelError, SchemaMismatchError
from airflow_provider_primus.spec.data import KafkaSource
from airflow_provider_primus.training.screen import EventRules

log = logging.getLogger(__name__)

__all__ = ["StreamOffsetLost", "StreamSource", "dead_letter_topic"]

# A stream event for the job (type, message, data): the trainer forwards them to its master.
EventSink = Callable[[str, str, dict[str, Any]], None]

PROBE_EVERY_S = 1.0  # how often the broker is asked for the partitions' end offsets (liveness)
PROBE_TIMEOUT_MS = 2000  # a broker that does not answer in this long is unavailable
OPEN_WAIT_S = 5.0  # how long fill() waits for a first connection before serving without the stream
REQUEST_TIMEOUT_MS = 10_000  # a hung request is dropped and its connection made again after this
RECONNECT_BACKOFF_MAX_MS = 1000  # a returning broker is found again within about a second


@dataclass(frozen=True)
class _Seek:
    """A partition's new position after an offset reset; ``drop``: buffered rows are of a replaced log."""

    offset: int
    drop: bool = False


def _partition_of(batch: TensorBatch) -> int:
    return int(str(batch.origin).rsplit("/", 1)[1])  # origin is "topic/partition"


class StreamOffsetLost(RuntimeError):
    """A position to resume from is not in the partition any more and the source's
    ``offset_reset`` policy is ``fail``."""


def _retriable(exc: BaseException) -> bool:
    """Connection loss, timeouts, leader moves: what a broker restart looks like from a client."""
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


class _Backoff:
    """Exponential waits between attempts against an unreachable broker, capped at a few seconds."""

    def __init__(self, first_s: float = 0.2, cap_s: float = 2.0) -> None:
        self.first_s, self.cap_s, self.next_s = first_s, cap_s, first_s

    def __call__(self) -> float:
        wait, self.next_s = self.next_s, min(self.cap_s, self.next_s * 2)
        return wait

    def reset(self) -> None:
        self.next_s = self.first_s


# What an event's values can raise on their way to tensors; anything else is a bug and propagates.
_UNUSABLE = (SchemaMismatchError, pa.ArrowException, ValueError, TypeError, KeyError)


def dead_letter_topic(source: KafkaSource) -> str:
    return source.dead_letter_topic or f"{source.topic}.dlq"


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
        self.transformer = BatchTransformer(source.schema_, passthrough=passthrough)
        self.sparse, self.dense = list(source.schema_.sparse), list(source.schema_.dense)
        self.passthrough = tuple(passthrough)
        self._input_columns = set(self.transformer.input_columns())
        self._json_schema: pa.Schema | None = None
        # What an event must hold to be trained (label, IDs, event time, value types).
        self._rules = EventRules(source.schema_)
        self.consumer: Any = None
        self._requested_start = {int(p): int(o) for p, o in start_offsets.items()} if start_offsets else None
        self._wanted = set(partitions) if partitions is not None else None
        self._bounded = bounded
        self._max_poll_records = max_poll_records
        self._on_event = on_event
        # Which log the offsets index: the checkpoint's at first, the broker's once opened.
        self.log_identity: dict[str, Any] = dict(log_identity or {})
        self.tps: list[TopicPartition] = []
        self.next_offset: dict[int, int] = {
            p: o
            for p, o in (self._requested_start or {}).items()
            if self._wanted is None or p in self._wanted
        }
        self.end_offsets: dict[int, int] | None = None
        self._opened = False
        self._created = time.monotonic()
        # Health, for the job's status: whether the broker answers, and the outages so far.
        self.available = True
        self._unavailable_since: float | None = None  # monotonic
        self.outages = 0
        self.unavailable_s = 0.0
        self.last_error: str | None = None
        self.skipped_records = 0  # skipped by an offset_reset policy (never silently)
        self._last_probe = 0.0
        self._pending: collections.deque[TensorBatch] = collections.deque()  # decoded, not trained
        self._pending_rows = 0
        # Malformed offsets still ahead of the trained position, per partition: they count as
        # dead-lettered in a checkpoint only once training has passed them.
        self._malformed_ahead: collections.defaultdict[int, collections.deque[int]] = collections.defaultdict(
            collections.deque
        )
        self.dead_lettered = 0  # at or behind the trained position
        self._dlq_topic = dead_letter_topic(source)
        self._producer: Any = None
        self._dead_letters = dead_letters
        # Fetching and decoding run on their own thread, ahead of training by at most
        # ``max_buffered_rows``: kafka-python parses in Python, pyarrow decodes without the GIL, and
        # torch trains without it, so the three overlap. The consumer is used on that thread only.
        self.max_buffered_rows = max(max_buffered_rows, 2 * max_poll_records)
        self._high: dict[int, int | None] = {}
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._polls = 0
        self._inflight_rows = 0  # fetched, not yet decoded
        # Fetched blocks (partition, records) in order; (partition, _Seek) moves a partition's
        # position after an offset reset, in order with the blocks around it.
        self._raw: queue.Queue[tuple[int, list[Any] | _Seek] | None] = queue.Queue(maxsize=4)
        self._committer = _OffsetCommitter(source)
        self._threads = [
            threading.Thread(target=self._ingest_loop, name=f"primus-fetch-{source.name}", daemon=True),
            threading.Thread(target=self._decode_loop, name=f"primus-decode-{source.name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # -- reading ------------------------------------------------------------------------------------

    def _position_lag(self) -> int:
        """Records on the broker past what was decoded, from the high watermarks of the last fetch;
        -1 until the consumer is open and every partition has answered once."""
        if not self._opened:
            return -1
        lag = 0
        for p, high in self._high.items():
            if high is None:
                return -1
            end = high if self.end_offsets is None else min(high, self.end_offsets[p])
            lag += max(0, end - self.next_offset[p])
        return lag

    def _ended(self) -> bool:
        return self.end_offsets is not None and all(
            self.next_offset[p] >= e for p, e in self.end_offsets.items()
        )

    def _serving(self) -> bool:
        """Whether waiting for the broker makes sense: it answers, or it may still answer soon."""
        if not self.available:
            return False
        return self._opened or time.monotonic() - self._created < OPEN_WAIT_S

    def lag_records(self, timeout_s: float = 30.0) -> int:
        """Records on the broker not yet decoded plus decoded rows not yet trained. Waits for the
        first fetch to answer: guessing 0 before it would make the guard's first decision a race.
        While the broker is away it is what is buffered: nothing more can be served."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._position_lag() >= 0 or self._error is not None or not self._serving(),
                timeout=timeout_s,
            )
            return max(0, self._position_lag()) + self._pending_rows

    def caught_up(self) -> bool:
        """Nothing left to read right now (the stream is idle, or a bounded replay reached its end)."""
        with self._cond:
            return self._ended() or self._position_lag() == 0

    def exhausted(self) -> bool:
        """Only a bounded replay ends."""
        with self._cond:
            return self._ended() and self._pending_rows == 0

    def buffered(self) -> int:
        with self._cond:
            return self._pending_rows

    def health(self) -> dict[str, Any]:
        """The stream's side of the job status: is it being served, and what did outages cost."""
        with self._cond:
            down_now = (
                time.monotonic() - self._unavailable_since if self._unavailable_since is not None else 0.0
            )
            return {
                "available": self.available,
                "outages": self.outages,
                "unavailable_s": round(self.unavailable_s + down_now, 3),
                "last_error": self.last_error,
                "skipped_records": self.skipped_records,
                "commit_pending": self._committer.pending(),
            }

    def _event(self, type_: str, message: str, **data: Any) -> None:
        log.warning("stream %s: %s", self.source.name, message)
        if self._on_event is not None:
            self._on_event(type_, message, {"source": self.source.name, **data})

    def _set_available(self, available: bool, error: BaseException | None = None) -> None:
        with self._cond:
            if available == self.available:
                if error is not None:
                    self.last_error = f"{type(error).__name__}: {error}"
                return
            now = time.monotonic()
            self.available = available
            if not available:
                self.outages += 1
                self._unavailable_since = now
                self.last_error = f"{type(error).__name__}: {error}" if error is not None else None
                self._cond.notify_all()  # a fill() waiting for rows serves without them
                down = None
            else:
                down = now - (self._unavailable_since or now)
                self.unavailable_s += down
                self._unavailable_since = None
        if not available:
            self._event(
                "StreamUnavailable",
                f"broker unavailable ({self.last_error}); other sources train on, reconnecting",
                error=self.last_error,
            )
        else:
            self._event(
                "StreamRecovered",
                f"broker available again after {down:.1f}s; the stream trains again",
                outage_s=round(down or 0.0, 3),
            )

    def _ingest_loop(self) -> None:
        """Fetch: kafka-python parses records in Python, holding the GIL; decoding happens on the
        decoder thread meanwhile (pyarrow releases the GIL), so the two overlap.

        A broker that goes away is waited for, with backoff, for as long as it takes: connection
        errors and timeouts mark the stream unavailable (other sources train on) and the fetch
        position is kept, so nothing is skipped or read twice when it returns."""
        backoff = _Backoff()
        polled: dict[int, int] = {}
        try:
            while not self._stopping.is_set():
                try:
                    if not self._opened:
                        self._open()
                        polled = dict(self.next_offset)
                        self._set_available(True)
                        backoff.reset()
                    self._fetch_once(polled)
                    if self.end_offsets is not None and all(
                        polled[p] >= e for p, e in self.end_offsets.items()
                    ):
                        break
                except OffsetOutOfRangeError as exc:
                    self._out_of_range(exc, polled)
                except Exception as exc:
                    if not _retriable(exc):
                        raise
                    self._set_available(False, exc)
                    self._stopping.wait(backoff())
        except BaseException as exc:  # surfaced to the trainer by fill(); the thread must not die silently
            self._fail(exc)
        finally:
            self._put_raw(None)

    def _fetch_once(self, polled: dict[int, int]) -> None:
        with self._cond:
            while (
                self._pending_rows + self._inflight_rows >= self.max_buffered_rows
                and not self._stopping.is_set()
            ):
                self._cond.wait(0.5)
        if self.end_offsets is not None and all(polled[p] >= e for p, e in self.end_offsets.items()):
            return
        records = self.consumer.poll(timeout_ms=200)
        if self._log_replaced(polled):
            return  # this poll may hold the new log's records at the old positions: not served
        for tp, fetched in records.items():
            end = None if self.end_offsets is None else self.end_offsets[tp.partition]
            batch = fetched if end is None else [r for r in fetched if r.offset < end]
            if not batch:
                continue
            polled[tp.partition] = batch[-1].offset + 1
            if end is not None and polled[tp.partition] >= end:
                self.consumer.pause(tp)
            with self._cond:
                self._inflight_rows += len(batch)
            self._put_raw((tp.partition, batch))
        if records:
            self._set_available(True)
        self._note_high_watermarks()
        if time.monotonic() - self._last_probe >= PROBE_EVERY_S:
            self._probe()

    def _probe(self) -> None:
        """Ask for the end offsets: an answer proves the broker serves (an idle stream's empty
        polls prove nothing), and it is the freshest high watermark for the lag."""
        self._last_probe = time.monotonic()
        ends = self.consumer.end_offsets(self.tps, timeout_ms=PROBE_TIMEOUT_MS)
        with self._cond:
            for tp, end in ends.items():
                known = self._high.get(tp.partition)
                self._high[tp.partition] = max(int(end), known or 0)
            self._cond.notify_all()
        self._set_available(True)

    # -- opening and offset policy ----------------------------------------------------------------

    def _new_consumer(self) -> Any:
        return KafkaConsumer(
            bootstrap_servers=self.source.servers(),
            group_id=self.source.group_id,
            enable_auto_commit=False,
            # Never jump silently: an offset that no longer exists is handled by offset_reset.
            auto_offset_reset="none",
            max_poll_records=self._max_poll_records,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
            client_id=f"primus-stream-{self.source.name}",
        )

    def _identity(self) -> dict[str, Any]:
        cluster = self.consumer._client.cluster
        topic_id = cluster.topic_id(self.source.topic)
        return {"cluster_id": cluster.cluster_id, "topic_id": str(topic_id) if topic_id else None}

    def _open(self) -> None:
        """Connect, find the partitions and where to start, and check that a checkpoint's offsets
        still index the log they were read from. Retriable failures propagate to the caller, which
        waits and tries again; everything made here is dropped first."""
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = None
        consumer = self._new_consumer()
        self.consumer = consumer
        start = self._requested_start
        if start is None:
            planned = resolve_offsets(
                bootstrap_servers=self.source.bootstrap_servers,
                topic=self.source.topic,
                start_policy=self.source.start.policy,
                start_timestamp=self.source.start.timestamp,
                group_id=self.source.group_id,
                window_start=None,
                window_end=None,
            )
            start = {p: s for p, s, _ in planned}
        else:
            consumer.partitions_for_topic(self.source.topic)  # the topic's metadata: its id
        tps = [
            TopicPartition(self.source.topic, p)
            for p in sorted(start)
            if self._wanted is None or p in self._wanted
        ]
        first = consumer.beginning_offsets(tps)
        last = consumer.end_offsets(tps)
        identity = self._identity()
        replaced = self._replacement(self.log_identity, identity)
        positions: dict[int, int] = {}
        for tp in tps:
            want, lo, hi = int(start[tp.partition]), int(first[tp]), int(last[tp])
            if replaced is not None:
                positions[tp.partition] = self._reset(tp.partition, want, lo, hi, replaced, same_log=False)
            elif not lo <= want <= hi:
                why = "records before it were deleted" if want < lo else "the log is shorter than that"
                positions[tp.partition] = self._reset(tp.partition, want, lo, hi, why, same_log=True)
            else:
                positions[tp.partition] = want
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, positions[tp.partition])
        with self._cond:
            self.tps = tps
            self.log_identity = identity
            self.next_offset = dict(positions)
            self._high = {tp.partition: None for tp in tps}
            if self._bounded:
                self.end_offsets = {tp.partition: int(last[tp]) for tp in tps}
                self._high.update(self.end_offsets)  # a replay's end is its high watermark for the lag
            self._opened = True
            self._cond.notify_all()
        self._last_probe = time.monotonic()

    @staticmethod
    def _replacement(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
        """Why the log now behind the topic name is not the one ``before`` described, or None."""
        for key, what in (("cluster_id", "cluster"), ("topic_id", "topic")):
            if before.get(key) and now.get(key) and before[key] != now[key]:
                return f"the {what} was recreated ({key} {before[key]} -> {now[key]})"
        return None

    def _reset(self, partition: int, position: int, lo: int, hi: int, why: str, *, same_log: bool) -> int:
        """Where to go on when ``position`` cannot be resumed, per the source's ``offset_reset``;
        raises ``StreamOffsetLost`` under ``fail``. What it skips is counted and reported."""
        where = f"{self.source.topic}/{partition}"
        policy = self.source.offset_reset
        if policy == "fail":
            raise StreamOffsetLost(
                f"stream {self.source.name}: cannot resume {where} at offset {position}: {why} "
                f"(the partition now holds offsets {lo}..{hi}). Nothing was skipped. To go on, set "
                f"offset_reset: earliest or latest on source {self.source.name!r}; the records "
                "skipped are then counted in the job's events and status"
            )
        target = lo if policy == "earliest" else hi
        # Same log: records deleted before ``lo`` were never trained, nor are those jumped over. A new
        # log: its records before the target are skipped (the old log's rest is gone with it).
        skipped = max(0, lo - position) + max(0, target - max(position, lo)) if same_log else target - lo
        with self._cond:
            self.skipped_records += skipped
        self._event(
            "StreamOffsetReset",
            f"{where}: offset {position} cannot be resumed ({why}; the partition holds {lo}..{hi}); "
            f"offset_reset={policy}: resumed at {target}, {skipped} record(s) skipped",
            partition=partition,
            offset=position,
            resumed_at=target,
            skipped=skipped,
            reason=why,
            log_replaced=not same_log,
        )
        return target

    def _out_of_range(self, exc: OffsetOutOfRangeError, polled: dict[int, int]) -> None:
        """The broker says a fetch position is gone (retention, truncation): apply the policy."""
        lost = exc.args[0] if exc.args and isinstance(exc.args[0], Mapping) else {}
        tps = [tp for tp in self.tps if tp in lost] or list(self.tps)
        first = self.consumer.beginning_offsets(tps)
        last = self.consumer.end_offsets(tps)
        for tp in tps:
            position = int(lost.get(tp, polled.get(tp.partition, 0)))
            lo, hi = int(first[tp]), int(last[tp])
            why = "records before it were deleted" if position < lo else "the log is shorter than that"
            self._seek(tp, self._reset(tp.partition, position, lo, hi, why, same_log=True), polled)

    def _log_replaced(self, polled: dict[int, int]) -> bool:
        """After a poll: is the topic behind the name another log now (a broker whose data was wiped,
        a topic deleted and created again)? Then its offsets name other records: the policy decides,
        and rows buffered from the old log are dropped (counted as skipped)."""
        identity = self._identity()
        why = self._replacement(self.log_identity, identity)
        if why is None:
            if identity.get("topic_id") and not self.log_identity.get("topic_id"):
                self.log_identity = identity
            return False
        first = self.consumer.beginning_offsets(self.tps)
        last = self.consumer.end_offsets(self.tps)
        for tp in self.tps:
            lo, hi = int(first[tp]), int(last[tp])
            target = self._reset(tp.partition, polled[tp.partition], lo, hi, why, same_log=False)
            self._seek(tp, target, polled, drop=True)
        self.log_identity = identity
        return True

    def _seek(self, tp: TopicPartition, offset: int, polled: dict[int, int], *, drop: bool = False) -> None:
        self.consumer.seek(tp, offset)
        polled[tp.partition] = offset
        self._put_raw((tp.partition, _Seek(offset, drop)))

    def _put_raw(self, item: tuple[int, list[Any] | _Seek] | None) -> None:
        while not self._stopping.is_set() or item is None:
            try:
                self._raw.put(item, timeout=0.2)
                return
            except queue.Full:
                if item is None and self._stopping.is_set():
                    return

    def _note_high_watermarks(self) -> None:
        with self._cond:
            for tp in self.tps:
                high = self.consumer.highwater(tp)
                if high is not None:
                    self._high[tp.partition] = max(int(high), self._high.get(tp.partition) or 0)
                elif self._high[tp.partition] is None and self._polls >= 1:
                    self._high[tp.partition] = int(self.consumer.end_offsets([tp])[tp])
            self._polls += 1
            self._cond.notify_all()

    def _decode_loop(self) -> None:
        try:
            while True:
                try:
                    item = self._raw.get(timeout=0.2)
                except queue.Empty:
                    if self._stopping.is_set():
                        return
                    continue
                if item is None:
                    return
                partition, batch = item
                if isinstance(batch, _Seek):  # an offset reset: the partition goes on from there
                    self._apply_seek(partition, batch)
                    continue
                pending, malformed = self._decode_block(partition, batch)
                with self._cond:
                    self._pending.extend(pending)
                    added = sum(len(b) for b in pending)
                    self._pending_rows += added
                    self._inflight_rows -= len(batch)
                    self._malformed_ahead[partition].extend(malformed)
                    self.next_offset[partition] = batch[-1].offset + 1
                    self._cond.notify_all()
        except BaseException as exc:
            self._fail(exc)
        finally:
            with contextlib.suppress(Exception):
                self.flush()

    def _apply_seek(self, partition: int, seek: _Seek) -> None:
        with self._cond:
            if seek.drop:  # rows of a replaced log: their offsets mean nothing in the new one
                kept = collections.deque(b for b in self._pending if _partition_of(b) != partition)
                dropped = self._pending_rows - sum(len(b) for b in kept)
                self._pending, self._pending_rows = kept, self._pending_rows - dropped
                self.skipped_records += dropped
                self._malformed_ahead[partition].clear()
            self.next_offset[partition] = seek.offset
            self._cond.notify_all()

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def _raise_error(self) -> None:
        if self._error is None:
            return
        if isinstance(self._error, StreamOffsetLost):
            raise self._error
        raise RuntimeError(f"stream {self.source.name}: ingest failed: {self._error}") from self._error

    def fill(self, rows: int, timeout_s: float = 30.0) -> int:
        """Wait until ``rows`` are buffered or the stream has nothing more now; returns what is buffered.

        "Nothing more" is judged by offsets (the high watermark), not by an empty poll, so the same
        topic contents always give the same batches. A broker that is away has nothing more: the
        rows buffered are served at once and the other sources train meanwhile.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending_rows < rows and not self._ended() and self._position_lag() != 0:
                self._raise_error()
                if not self._serving():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            self._raise_error()
            return self._pending_rows

    def wait(self, timeout_s: float) -> None:
        """Wait for the next fetch round (a following trainer with nothing to do)."""
        with self._cond:
            polls = self._polls
            self._cond.wait_for(lambda: self._polls != polls or self._error is not None, timeout=timeout_s)

    # -- decoding -----------------------------------------------------------------------------------

    def _decode_block(self, partition: int, records: Sequence[Any]) -> tuple[list[TensorBatch], list[int]]:
        """Decode one partition's fetched records (on the ingest thread, without the lock)."""
        self._block_pending: list[TensorBatch] = []
        self._block_malformed: list[int] = []
        self._decode(partition, records)
        return self._block_pending, self._block_malformed

    def _decode(self, partition: int, records: Sequence[Any]) -> int:
        values = [r.value if r.value is not None else b"" for r in records]
        table = self._fast_table(values)
        if table is not None:
            try:
                offsets = np.fromiter((r.offset for r in records), dtype=np.int64, count=len(records))
                return self._append(partition, self._transform(table), offsets)
            except _UNUSABLE:
                pass  # some event's values do not fit the schema: find it below
        parsed = [(r, e) for r in records if (e := self._parse(partition, r)) is not None]
        self._rules.learn_from_events(e for _, e in parsed)
        survivors = [(r, e) for r, e in parsed if self._screen(partition, r, e)]
        if not survivors:
            return 0
        try:
            table = pa.Table.from_pylist([e for _, e in survivors])
            offsets = np.asarray([r.offset for r, _ in survivors], dtype=np.int64)
            return self._append(partition, self._transform(table), offsets)
        except _UNUSABLE:
            return sum(self._decode_one(partition, r, e) for r, e in survivors)

    def _decode_one(self, partition: int, record: Any, event: dict[str, Any]) -> int:
        try:
            transformed = self._transform(pa.Table.from_pylist([event]))
        except _UNUSABLE as exc:
            self._dead_letter(partition, record, f"values do not fit the schema: {exc}")
            return 0
        return self._append(partition, transformed, np.asarray([record.offset], dtype=np.int64))

    def _parse(self, partition: int, record: Any) -> dict[str, Any] | None:
        """The event as a dict, or None after dead-lettering it with the reason."""
        try:
            event = json.loads(record.value)
        except (TypeError, ValueError) as exc:
            self._dead_letter(partition, record, f"not valid JSON: {exc}")
            return None
        if not isinstance(event, dict):
            self._dead_letter(partition, record, f"expected a JSON object, got {type(event).__name__}")
            return None
        return event

    def _screen(self, partition: int, record: Any, event: dict[str, Any]) -> bool:
        """Whether the event may be trained; if not, it is dead-lettered with every reason found
        (a missing or null label, a missing ID or event time, a value of the wrong type)."""
        problems = self._rules.problems(event)
        if problems:
            self._dead_letter(partition, record, "; ".join(problems))
        return not problems

    def _append(self, partition: int, transformed: pa.RecordBatch, offsets: np.ndarray[Any, Any]) -> int:
        batch = to_tensors(transformed, sparse=self.sparse, dense=self.dense, extra=self.passthrough)
        batch.origin = f"{self.source.topic}/{partition}"
        batch.positions = offsets
        self._block_pending.append(batch)
        return len(batch)

    def _fast_table(self, values: list[bytes]) -> pa.Table | None:
        """The block as one newline-delimited JSON document, or None when it needs a closer look.

        Checked in C, not per message in Python: exactly one newline between messages means none
        holds a newline of its own, and an empty or blank message yields no row, so the row count
        gives it away."""
        if not values:
            return None
        joined = b"\n".join(values)
        if joined.count(b"\n") != len(values) - 1:
            return None
        read_options = pajson.ReadOptions(use_threads=False, block_size=max(1 << 20, 2 * len(joined)))
        table = None
        if self._json_schema is not None:
            # The types learned from an earlier block: no inference, and fields the schema does not
            # use are skipped instead of converted. A block that does not fit is inferred below.
            with contextlib.suppress(pa.ArrowException):
                table = pajson.read_json(
                    pa.py_buffer(joined),
                    read_options=read_options,
                    parse_options=pajson.ParseOptions(
                        explicit_schema=self._json_schema, unexpected_field_behavior="ignore"
                    ),
                )
        if table is None:
            try:
                table = pajson.read_json(pa.py_buffer(joined), read_options=read_options)
            except pa.ArrowException:
                return None
        if table.num_rows != len(values):
            return None
        for column in self._rules.required:
            if column not in table.column_names or table.column(column).null_count:
                return None
        # The reader gives each column one type or fails, so the types speak for every value: a
        # type the schema does not allow (a string label, string IDs where this stream's are
        # numbers) sends the block to the per-message path, where each such event is dead-lettered.
        if not self._rules.table_fits(table):
            return None
        self._rules.learn_from_table(table)
        if self._json_schema is None:
            wanted = [f for f in table.schema if f.name in self._input_columns]
            if len(wanted) == len(self._input_columns) and not any(pa.types.is_null(f.type) for f in wanted):
                self._json_schema = pa.schema(wanted)
        return table

    def _transform(self, table: pa.Table) -> pa.RecordBatch:
        columns = self.transformer.input_columns()
        missing = [c for c in columns if c not in table.column_names]
        if missing:  # optional (dense, label) fields absent from every event of this block
            for c in missing:
                table = table.append_column(c, pa.nulls(table.num_rows))
        batch = table.select(columns).combine_chunks().to_batches()
        record_batch = batch[0] if batch else pa.RecordBatch.from_pylist([])
        self.transformer.check_schema(record_batch.schema, "<stream>")
        out = self.transformer.transform(record_batch, "<stream>")
        if len(out.unlabelled):  # e.g. a NaN label the fast path read: screened one by one instead
            raise MissingLabelError("<stream>", self._rules.label, "an event has no label")
        return out.batch

    def _dead_letter(self, partition: int, record: Any, reason: str) -> None:
        self._block_malformed.append(record.offset)
        log.warning(
            "stream %s: message %s/%d@%d dead-lettered: %s",
            self.source.name,
            self.source.topic,
            partition,
            record.offset,
            reason,
        )
        if not self._dead_letters:
            return
        if self._producer is None:
            ensure_topic(self.source.servers(), self._dlq_topic)
            self._producer = KafkaProducer(
                bootstrap_servers=self.source.servers(), client_id=f"primus-dlq-{self.source.name}"
            )
        headers = [
            ("primus.error", reason.encode()[:1000]),
            ("primus.source", self.source.name.encode()),
            ("primus.topic", self.source.topic.encode()),
            ("primus.partition", str(partition).encode()),
            ("primus.offset", str(record.offset).encode()),
        ]
        self._producer.send(self._dlq_topic, key=record.key, value=record.value, headers=headers)

    # -- serving ------------------------------------------------------------------------------------

    def peek_event_times(self, rows: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Event times (ms) of the next ``rows`` buffered rows, for the replay gate and the age check."""
        out: list[np.ndarray[Any, Any]] = []
        need = rows
        with self._cond:
            pendings = list(self._pending)
        for batch in pendings:
            if need <= 0:
                break
            times = batch.event_times()[:need].numpy()
            out.append(times)
            need -= len(times)
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)

    def take(self, rows: int) -> list[TensorBatch]:
        """The next ``rows`` buffered rows (fewer if fewer are buffered), marked as trained."""
        with self._cond:
            out = take_rows(self._pending, rows)
            self._pending_rows -= sum(len(b) for b in out)
            self._settle_malformed()
            self._cond.notify_all()  # room in the buffer: the ingest thread may read on
        return out

    def _settle_malformed(self) -> None:
        trained = self._trained_locked()
        for partition, ahead in self._malformed_ahead.items():
            while ahead and ahead[0] < trained[partition]:
                ahead.popleft()
                self.dead_lettered += 1

    def malformed_seen(self) -> int:
        with self._cond:
            return self.dead_lettered + sum(len(a) for a in self._malformed_ahead.values())

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint stores: first untrained offsets, the malformed count behind them, the
        log the offsets index (so a recreated topic is noticed on resume) and the records skipped."""
        with self._cond:
            self._settle_malformed()
            return {
                "offsets": self._trained_locked(),
                "dead_lettered": self.dead_lettered,
                "log": dict(self.log_identity),
                "skipped_records": self.skipped_records,
            }

    def trained_offsets(self) -> dict[int, int]:
        """Per partition, the first offset not yet trained on (what a checkpoint stores)."""
        with self._cond:
            return self._trained_locked()

    def _trained_locked(self) -> dict[int, int]:
        first_pending: dict[int, int] = {}
        for batch in self._pending:  # positions are offsets
            partition = _partition_of(batch)
            if partition not in first_pending and batch.positions is not None:
                first_pending[partition] = int(batch.positions[0])
        return {p: first_pending.get(p, self.next_offset[p]) for p in self.next_offset}

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit a checkpoint's offsets to the consumer group (for lag monitoring and `committed`).

        Never blocks and never fails training: the checkpoint is the durable position; the group's
        offsets only mirror it, and are retried in the background while the broker is away."""
        self._committer.submit(offsets)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush()

    def close(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        if self._producer is not None:
            self._producer.close(timeout=5)
        self._committer.close()
        if self.consumer is not None:
            self.consumer.close()


class _OffsetCommitter:
    """Commits the newest checkpointed offsets to the consumer group on its own thread.

    The offsets are a mirror for lag monitoring and ``committed``-policy starts; a failed commit is
    retried with backoff (always with the newest offsets) and never reaches the training loop."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        self._cond = threading.Condition()
        self._want: dict[int, int] | None = None
        self._stopping = False
        self._consumer: Any = None
        self._thread: threading.Thread | None = None

    def submit(self, offsets: Mapping[int, int]) -> None:
        if self.source.group_id is None or not offsets:
            return
        with self._cond:
            self._want = {int(p): int(o) for p, o in offsets.items()}
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"primus-commit-{self.source.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> bool:
        with self._cond:
            return self._want is not None

    def _loop(self) -> None:
        backoff = _Backoff(cap_s=5.0)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._want is not None or self._stopping)
                if self._want is None:
                    return
                want = self._want
            if self._commit(want, timeout_ms=REQUEST_TIMEOUT_MS):
                backoff.reset()
                with self._cond:
                    if self._want == want:
                        self._want = None
                continue
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait(backoff())

    def _commit(self, offsets: Mapping[int, int], timeout_ms: int) -> bool:
        try:
            if self._consumer is None:
                self._consumer = KafkaConsumer(
                    bootstrap_servers=self.source.servers(),
                    group_id=self.source.group_id,
                    enable_auto_commit=False,
                    request_timeout_ms=REQUEST_TIMEOUT_MS,
                    reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                    client_id=f"primus-commit-{self.source.name}",
                )
            self._consumer.commit(
                {
                    TopicPartition(self.source.topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in offsets.items()
                },
                timeout_ms=timeout_ms,
            )
            return True
        except Exception as exc:
            if not _retriable(exc):
                log.exception("stream %s: committing offsets failed", self.source.name)
                return False
            log.info("stream %s: offset commit deferred (%s); retrying", self.source.name, exc)
            return False

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop; a last commit of the newest offsets is tried once, briefly (the checkpoint holds them)."""
        with self._cond:
            self._stopping = True
            want = self._want
            self._want = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s + REQUEST_TIMEOUT_MS / 1000)
        if want is not None:
            self._commit(want, timeout_ms=int(timeout_s * 1000))
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
