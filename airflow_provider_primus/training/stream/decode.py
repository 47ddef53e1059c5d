"""Stream events decoded into the same tensors the batch sources produce.

One definition of features: events are decoded into Arrow record batches and passed through the
source's ``BatchTransformer``, the class the data executors use for files. Decoding takes a fast path
(the whole poll as newline-delimited JSON through pyarrow's multi-threaded C++ reader) and falls back
to one message at a time only when that block holds something malformed, so a bad event costs its
own block a slow pass but never the stream.

Avro and Protobuf values (``data/formats/``) are decoded one by one by compiled readers into the
dicts a JSON event gives, read into one table per block and checked and transformed the same way;
a value that does not decode (a bad magic byte, an unknown schema id, truncated Avro, bad protobuf)
is dead-lettered with the reason, so both formats meet exactly the rules and transforms JSON does.

A malformed message (not JSON, not an object, a missing or null label, a missing ID or event time,
a value of the wrong type, a value the transforms cannot use; the rules are in ``screen.py``) is
counted and forwarded to the dead-letter topic (``deadletters.py``) with the reason in its headers.
So is an event whose time the source's ``event_time_policy`` does not believe (``event_policy.py``:
too far ahead of now, before the floor), unless the policy clamps it instead.
The fast path cannot coerce a value past those rules: its block falls back to the per-message path
whenever a column's type is not one the rules allow.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import torch

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.event_time import iso, unit_hint
from airflow_provider_primus.data.formats import UndecodableValue, value_decoder
from airflow_provider_primus.data.tensors import TensorBatch, to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer, MissingLabelError, SchemaMismatchError
from airflow_provider_primus.data.user_transforms import UserTransformError
from airflow_provider_primus.training.stream.deadletters import DeadLetters
from airflow_provider_primus.training.stream.event_policy import EventTimeScreen
from airflow_provider_primus.training.stream.isolate import bisect_block
from airflow_provider_primus.training.stream.screen import EventRules

log = logging.getLogger(__name__)

__all__ = ["StreamDecoder"]

# What an event's values can raise on their way to tensors; anything else is a bug and propagates.
# A python transform raising counts (a block it raises on is split until the messages it raises on
# are found and dead-lettered, isolate.py); its output breaking the schema does not: that is the code.
_UNUSABLE = (SchemaMismatchError, UserTransformError, pa.ArrowException, ValueError, TypeError, KeyError)


class StreamDecoder:
    """Used by the stream's decode thread only: it learns the stream's JSON types as it goes."""

    def __init__(self, source: KafkaSource, passthrough: Sequence[str], dead_letters: DeadLetters) -> None:
        self.source = source
        self.transformer = BatchTransformer(source.schema_, passthrough=passthrough)
        self.sparse, self.dense = list(source.schema_.sparse), list(source.schema_.dense)
        self.passthrough = tuple(passthrough)
        self._input_columns = set(self.transformer.input_columns())
        self._json_schema: pa.Schema | None = None
        # What an event must hold to be trained (label, IDs, event time, value types).
        self._rules = EventRules(source.schema_)
        self._dead_letters = dead_letters
        # Event times not believed (too far ahead of now, before the floor): dead-lettered or clamped.
        self._times = EventTimeScreen(source.event_time_policy)
        self.clamped = 0  # event times moved to a bound under ``action: clamp``
        self._block_pending: list[TensorBatch] = []
        self._block_malformed: list[int] = []
        self._block_records: Sequence[Any] = ()
        self._by_offset: dict[int, Any] | None = None
        # Avro or Protobuf values: decoded one by one in compiled code into the dicts a JSON event
        # gives, then screened and transformed exactly as JSON events are. None for JSON.
        self._values = value_decoder(source)
        self.undecodable = 0  # values that did not decode (dead-lettered with the reason)
        self._decoded_columns: list[str] = list(
            dict.fromkeys([*self.transformer.input_columns(), *self._rules.allowed, *self._rules.required])
        )

    def decode_block(self, partition: int, records: Sequence[Any]) -> tuple[list[TensorBatch], list[int]]:
        """Decode one partition's fetched records (on the decode thread, without the lock): the
        batches to train and the offsets dead-lettered."""
        self._block_pending = []
        self._block_malformed = []
        self._block_records, self._by_offset = records, None
        self._decode(partition, records)
        # In offset order whichever check found them: training passes them in that order.
        return self._block_pending, sorted(self._block_malformed)

    def _decode(self, partition: int, records: Sequence[Any]) -> int:
        values = [r.value if r.value is not None else b"" for r in records]
        if self._values is not None:
            return self._decode_binary(partition, records, values)
        table = self._fast_table(values)
        if table is not None:
            try:
                offsets = np.fromiter((r.offset for r in records), dtype=np.int64, count=len(records))
                return self._append(partition, self._transform(table), offsets)
            except _UNUSABLE:
                pass  # some event's values do not fit the schema: find it below
        parsed = [(r, e) for r in records if (e := self._parse(partition, r)) is not None]
        return self._decode_events(partition, parsed)

    def _decode_binary(self, partition: int, records: Sequence[Any], values: list[bytes]) -> int:
        """Avro or Protobuf: every value decoded to a dict; when the block's table meets the rules
        as a whole (the common case) it is transformed at once, else event by event like JSON."""
        assert self._values is not None
        decode = self._values.decode
        parsed: list[tuple[Any, dict[str, Any]]] = []
        for record, value in zip(records, values, strict=True):
            try:
                parsed.append((record, decode(value)))
            except UndecodableValue as exc:
                self.undecodable += 1
                self._dead_letter(partition, record, str(exc))
        if not parsed:
            return 0
        try:
            table = self._table([e for _, e in parsed])
        except _UNUSABLE:
            table = None
        if table is not None and self._fits(table):
            try:
                offsets = np.asarray([r.offset for r, _ in parsed], dtype=np.int64)
                return self._append(partition, self._transform(table), offsets)
            except _UNUSABLE:
                pass  # some event's values do not fit the schema: find it below
        return self._decode_events(partition, parsed)

    def _decode_events(self, partition: int, parsed: list[tuple[Any, dict[str, Any]]]) -> int:
        """Events one by one: each screened by the rules, the survivors transformed together."""
        self._rules.learn_from_events(e for _, e in parsed)
        survivors = [(r, e) for r, e in parsed if self._screen(partition, r, e)]
        if not survivors:
            return 0
        return bisect_block(
            survivors,
            lambda part: self._decode_many(partition, part),
            lambda item: self._decode_one(partition, *item),
            _UNUSABLE,
        )

    def _decode_many(self, partition: int, parsed: Sequence[tuple[Any, dict[str, Any]]]) -> int:
        """Screened events transformed together; raises when any of them cannot be (isolate.py)."""
        table = self._table([e for _, e in parsed])
        offsets = np.asarray([r.offset for r, _ in parsed], dtype=np.int64)
        return self._append(partition, self._transform(table), offsets)

    def _decode_one(self, partition: int, record: Any, event: dict[str, Any]) -> int:
        try:
            transformed = self._transform(pa.Table.from_pylist([event]))
        except _UNUSABLE as exc:
            reason = (
                str(exc) if isinstance(exc, UserTransformError) else f"values do not fit the schema: {exc}"
            )
            self._dead_letter(partition, record, reason)
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
        batch = self._police_event_times(partition, batch)
        if len(batch):
            self._block_pending.append(batch)
        return len(batch)

    def _police_event_times(self, partition: int, batch: TensorBatch) -> TensorBatch:
        """The batch with its out-of-policy event times dead-lettered (their rows removed) or clamped."""
        if batch.event_time_ms is None or not len(batch) or batch.positions is None:
            return batch
        times = batch.event_time_ms.numpy()
        judged = self._times.judge(times)
        if not judged.count:
            return batch
        if self._times.clamps:
            batch.event_time_ms = torch.from_numpy(self._times.clamp(times, judged))
            self.clamped += judged.count
            log.warning(
                "stream %s: %d event time(s) of %s/%d out of event_time_policy clamped to %s .. %s",
                self.source.name,
                judged.count,
                self.source.topic,
                partition,
                iso(judged.floor_ms),
                iso(judged.upper_ms),
            )
            return batch
        declared = self.source.schema_.event_time
        for i in np.flatnonzero(judged.out):
            record = self._record_at(int(batch.positions[i]))
            reason = self._times.reason(int(times[i]), judged)
            if declared is not None:  # a unit mix-up (epoch seconds read as ms) named, not only refused
                reason += unit_hint(declared, float(times[i]), float(times[i]))
            self._dead_letter(partition, record, reason)
        return batch.rows(np.flatnonzero(~judged.out).astype(np.int64))

    def _record_at(self, offset: int) -> Any:
        if self._by_offset is None:
            self._by_offset = {r.offset: r for r in self._block_records}
        return self._by_offset[offset]

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
        if table.num_rows != len(values) or not self._fits(table):
            return None
        if self._json_schema is None:
            wanted = [f for f in table.schema if f.name in self._input_columns]
            if len(wanted) == len(self._input_columns) and not any(pa.types.is_null(f.type) for f in wanted):
                self._json_schema = pa.schema(wanted)
        return table

    def _table(self, events: list[dict[str, Any]]) -> pa.Table:
        """Events as a table of the columns the rules and transforms read, built column by column:
        ``Table.from_pylist`` takes its columns from the first event's keys, so a field the first
        event lacks (an optional one; an older writer schema in a registry topic) would be null for
        every event of the block."""
        return pa.table({c: [e.get(c) for e in events] for c in self._decoded_columns})

    def _fits(self, table: pa.Table) -> bool:
        """Whether a block read as one table meets the rules as a whole (then the kinds of the
        stream's learned columns are fixed from it); if not, its events are screened one by one.

        A column has one type or the read fails, so its type speaks for every value: a type the
        schema does not allow (a string label, string IDs where this stream's are numbers) sends the
        block to the per-message path, where each such event is dead-lettered."""
        for column in self._rules.required:
            if column not in table.column_names or table.column(column).null_count:
                return False
        if not self._rules.table_fits(table):
            return False
        self._rules.learn_from_table(table)
        return True

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
        self._dead_letters.send(partition, record, reason)
