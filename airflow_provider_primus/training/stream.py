"""The stream source: JSON events from Kafka turned into the same tensors the batch sources produce.

One definition of features: events are decoded into Arrow record batches and passed through the
source's ``BatchTransformer``, the class the data executors use for files. Decoding takes a fast path
(the whole poll as newline-delimited JSON through pyarrow's multi-threaded C++ reader) and falls back
to one message at a time only when that block holds something malformed, so a bad event costs its
own block a slow pass but never the stream.

A malformed message (not JSON, not an object, a missing ID or event time, a value the transforms
cannot use) is counted and forwarded to the dead-letter topic with the reason in its headers; it is
never trained on and never stops training. Dead-lettering is at-least-once: after a crash the
messages between the last checkpoint and the crash are re-read and may be forwarded again (the
headers carry topic/partition/offset to deduplicate on).

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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_provider_primus.data.sources.kafka import ensure_topic, resolve_offsets
from airflow_provider_primus.data.tensors import TensorBatch, take_rows, to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer, SchemaMismatchError
from airflow_provider_primus.spec.data import KafkaSource

log = logging.getLogger(__name__)

__all__ = ["StreamSource", "dead_letter_topic"]

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
    ) -> None:
        """``start_offsets`` (a checkpoint's) wins over the source's start policy. ``bounded`` stops
        at the end offsets seen at start (a replay); otherwise the stream is followed for ever.
        ``partitions`` restricts this trainer to its share of the topic."""
        self.source = source
        self.transformer = BatchTransformer(source.schema_, passthrough=passthrough)
        self.sparse, self.dense = list(source.schema_.sparse), list(source.schema_.dense)
        self.passthrough = tuple(passthrough)
        event_time = source.schema_.event_time
        self._input_columns = set(self.transformer.input_columns())
        self._json_schema: pa.Schema | None = None
        self._required = [*source.schema_.sparse, *([event_time] if event_time else [])]
        self.consumer: Any = KafkaConsumer(
            bootstrap_servers=source.servers(),
            group_id=source.group_id,
            enable_auto_commit=False,
            # Never jump silently: an offset that no longer exists (retention deleted it) is an error.
            auto_offset_reset="none",
            max_poll_records=max_poll_records,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
            client_id=f"primus-stream-{source.name}",
        )
        if start_offsets is None:
            planned = resolve_offsets(
                bootstrap_servers=source.bootstrap_servers,
                topic=source.topic,
                start_policy=source.start.policy,
                start_timestamp=source.start.timestamp,
                group_id=source.group_id,
                window_start=None,
                window_end=None,
            )
            start_offsets = {p: start for p, start, _ in planned}
        wanted = set(partitions) if partitions is not None else None
        self.tps = [
            TopicPartition(source.topic, p) for p in sorted(start_offsets) if wanted is None or p in wanted
        ]
        self.consumer.assign(self.tps)
        self.next_offset: dict[int, int] = {}
        for tp in self.tps:
            self.consumer.seek(tp, int(start_offsets[tp.partition]))
            self.next_offset[tp.partition] = int(start_offsets[tp.partition])
        self.end_offsets: dict[int, int] | None = None
        if bounded:
            ends = self.consumer.end_offsets(self.tps)
            self.end_offsets = {tp.partition: int(ends[tp]) for tp in self.tps}
        self._pending: collections.deque[TensorBatch] = collections.deque()  # decoded, not trained
        self._pending_rows = 0
        # Malformed offsets still ahead of the trained position, per partition: they count as
        # dead-lettered in a checkpoint only once training has passed them.
        self._malformed_ahead: dict[int, collections.deque[int]] = {
            tp.partition: collections.deque() for tp in self.tps
        }
        self.dead_lettered = 0  # at or behind the trained position
        self._dlq_topic = dead_letter_topic(source)
        self._producer: Any = None
        self._committer: Any = None
        self._dead_letters = dead_letters
        # Fetching and decoding run on their own thread, ahead of training by at most
        # ``max_buffered_rows``: kafka-python parses in Python, pyarrow decodes without the GIL, and
        # torch trains without it, so the three overlap. The consumer is used on that thread only.
        self.max_buffered_rows = max(max_buffered_rows, 2 * max_poll_records)
        self._high: dict[int, int | None] = {tp.partition: None for tp in self.tps}
        if self.end_offsets is not None:  # a replay's end is its high watermark as far as lag goes
            self._high.update(self.end_offsets)
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._polls = 0
        self._inflight_rows = 0  # fetched, not yet decoded
        self._raw: queue.Queue[tuple[int, list[Any]] | None] = queue.Queue(maxsize=4)
        self._threads = [
            threading.Thread(target=self._ingest_loop, name=f"primus-fetch-{source.name}", daemon=True),
            threading.Thread(target=self._decode_loop, name=f"primus-decode-{source.name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # -- reading ------------------------------------------------------------------------------------

    def _position_lag(self) -> int:
        """Records on the broker past what was decoded, from the high watermarks of the last fetch;
        -1 until every partition has answered once."""
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

    def lag_records(self, timeout_s: float = 30.0) -> int:
        """Records on the broker not yet decoded plus decoded rows not yet trained. Waits for the
        first fetch to answer: guessing 0 before it would make the guard's first decision a race."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._position_lag() >= 0 or self._error is not None, timeout=timeout_s
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

    def _ingest_loop(self) -> None:
        """Fetch: kafka-python parses records in Python, holding the GIL; decoding happens on the
        decoder thread meanwhile (pyarrow releases the GIL), so the two overlap."""
        polled = dict(self.next_offset)
        try:
            while not self._stopping.is_set():
                with self._cond:
                    while (
                        self._pending_rows + self._inflight_rows >= self.max_buffered_rows
                        and not self._stopping.is_set()
                    ):
                        self._cond.wait(0.5)
                if self.end_offsets is not None and all(polled[p] >= e for p, e in self.end_offsets.items()):
                    break
                records = self.consumer.poll(timeout_ms=200)
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
                self._note_high_watermarks()
        except BaseException as exc:  # surfaced to the trainer by fill(); the thread must not die silently
            self._fail(exc)
        finally:
            self._put_raw(None)

    def _put_raw(self, item: tuple[int, list[Any]] | None) -> None:
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
                    self._high[tp.partition] = int(high)
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

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def fill(self, rows: int, timeout_s: float = 30.0) -> int:
        """Wait until ``rows`` are buffered or the stream has nothing more now; returns what is buffered.

        "Nothing more" is judged by offsets (the high watermark), not by an empty poll, so the same
        topic contents always give the same batches.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending_rows < rows and not self._ended() and self._position_lag() != 0:
                if self._error is not None:
                    raise RuntimeError(
                        f"stream {self.source.name}: ingest failed: {self._error}"
                    ) from self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            if self._error is not None:
                raise RuntimeError(
                    f"stream {self.source.name}: ingest failed: {self._error}"
                ) from self._error
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
        survivors = [(r, e) for r in records if (e := self._screen(partition, r)) is not None]
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

    def _screen(self, partition: int, record: Any) -> dict[str, Any] | None:
        """The event as a dict, or None after dead-lettering it with the reason."""
        try:
            event = json.loads(record.value)
        except (TypeError, ValueError) as exc:
            self._dead_letter(partition, record, f"not valid JSON: {exc}")
            return None
        if not isinstance(event, dict):
            self._dead_letter(partition, record, f"expected a JSON object, got {type(event).__name__}")
            return None
        missing = [c for c in self._required if event.get(c) is None]
        if missing:
            self._dead_letter(partition, record, f"missing required field(s): {', '.join(missing)}")
            return None
        return event

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
            wanted = [f for f in table.schema if f.name in self._input_columns]
            if len(wanted) == len(self._input_columns) and not any(pa.types.is_null(f.type) for f in wanted):
                self._json_schema = pa.schema(wanted)
        if table.num_rows != len(values):
            return None
        for column in self._required:
            if column not in table.column_names or table.column(column).null_count:
                return None
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
        return self.transformer(record_batch, "<stream>")

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
        """What a checkpoint stores: first untrained offsets, and the malformed count behind them."""
        with self._cond:
            self._settle_malformed()
            return {"offsets": self._trained_locked(), "dead_lettered": self.dead_lettered}

    def trained_offsets(self) -> dict[int, int]:
        """Per partition, the first offset not yet trained on (what a checkpoint stores)."""
        with self._cond:
            return self._trained_locked()

    def _trained_locked(self) -> dict[int, int]:
        first_pending: dict[int, int] = {}
        for batch in self._pending:  # origin is "topic/partition", positions are offsets
            partition = int(str(batch.origin).rsplit("/", 1)[1])
            if partition not in first_pending and batch.positions is not None:
                first_pending[partition] = int(batch.positions[0])
        return {p: first_pending.get(p, self.next_offset[p]) for p in self.next_offset}

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit a checkpoint's offsets to the consumer group (for lag monitoring and `committed`)."""
        if self.source.group_id is None:
            return
        if self._committer is None:  # the fetching consumer belongs to the ingest thread
            self._committer = KafkaConsumer(
                bootstrap_servers=self.source.servers(),
                group_id=self.source.group_id,
                enable_auto_commit=False,
                client_id=f"primus-commit-{self.source.name}",
            )
        self._committer.commit(
            {TopicPartition(self.source.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )

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
            self._producer.close()
        if self._committer is not None:
            self._committer.close()
        self.consumer.close()
