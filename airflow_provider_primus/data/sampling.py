"""A sample of each source's event times, checked for plausibility: ``primus validate --sample N``.

Validation of the document alone cannot see a unit mix-up: ``event_time: ts`` is valid whether
``ts`` holds milliseconds or seconds. A sample of the data can. Files sources are planned over the
document's window (which also judges every Parquet file by its footer's statistics) and up to N
rows are read, spread over the window's tasks; a Kafka source's newest N records are read. The
event-time column goes through its declared transforms, as training would read it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from kafka import TopicPartition

from airflow_provider_primus.contracts.data import HistorySource, PrimusData, is_history
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.event_time import EventTimeFinding, check_values
from airflow_provider_primus.data.formats import UndecodableValue, value_decoder
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from airflow_provider_primus.data.sources.kafka_client import consumer as kafka_consumer
from airflow_provider_primus.data.transforms import BatchTransformer

__all__ = ["SAMPLE_TASKS", "sample_event_times"]

SAMPLE_TASKS = 8  # tasks read per files source: the first, the last and evenly between


def sample_event_times(data: PrimusData, rows: int, *, timeout_s: float = 10.0) -> list[tuple[str, str]]:
    """``(source, problem)`` for every source whose sampled event times are implausible or that
    could not be sampled; sources without an event time are skipped."""
    problems: list[tuple[str, str]] = []
    files = [s for s in data.spec.sources if is_history(s) and s.schema_.event_time]
    streams = [s for s in data.spec.sources if isinstance(s, KafkaSource) and s.schema_.event_time]
    if files:
        problems += _files(data, files, rows)
    for stream in streams:
        try:
            finding = _stream(stream, rows, timeout_s)
        except Exception as exc:  # an unreachable broker, a missing topic: say so, do not guess
            problems.append((stream.name, f"could not sample topic {stream.topic!r}: {exc}"))
            continue
        if finding is not None:
            problems.append((stream.name, finding.message()))
    return problems


def _files(data: PrimusData, sources: list[HistorySource], rows: int) -> list[tuple[str, str]]:
    window = data.spec.window
    if window is None:
        return [(s.name, "not sampled: the document has no spec.window to read") for s in sources]
    # Only the sources sampled here: planning a Kafka source would ask its broker for offsets.
    only = data.model_copy(update={"spec": data.spec.model_copy(update={"sources": sources, "mixture": []})})
    try:
        graph = plan(only, window.start, window.end)
    except Exception as exc:  # a missing partition under policy fail, an unreachable store
        return [(s.name, f"could not plan the window to sample it: {exc}") for s in sources]
    from_statistics = {f.source: f for f in graph.event_times}  # every Parquet file, by its footer
    problems: list[tuple[str, str]] = []
    for source in sources:
        finding = from_statistics.get(source.name)
        if finding is None:
            tasks = [t for t in graph.tasks if t.source == source.name]
            if not tasks:
                problems.append((source.name, "not sampled: the window holds no data files"))
                continue
            try:
                finding = _check_tasks(source, tasks, rows)
            except Exception as exc:  # an unreadable file, a column the data does not have
                problems.append((source.name, f"could not read a sample: {exc}"))
                continue
        if finding is not None:
            problems.append((source.name, finding.message()))
    return problems


def _spread(tasks: list[Task], count: int) -> list[Task]:
    if len(tasks) <= count:
        return tasks
    return [tasks[round(i * (len(tasks) - 1) / (count - 1))] for i in range(count)]


def _check_tasks(source: HistorySource, tasks: list[Task], rows: int) -> EventTimeFinding | None:
    event_time = source.schema_.event_time
    if event_time is None or not tasks or rows <= 0 or source.schema_.python_steps:
        return None  # a python step may compute the event time: only its whole batches tell
    chosen = _spread(tasks, SAMPLE_TASKS)
    per_task = max(1, math.ceil(rows / len(chosen)))
    fs, _ = history_filesystem(source)
    transformer = BatchTransformer(source.schema_)
    values: list[pa.Array] = []
    for task in chosen:
        batches = read_task(
            task,
            fmt=source.format,
            columns=[event_time.column],
            batch_rows=per_task,
            end_row=per_task,
            filesystem=fs,
            fields=read_fields(source),
        )
        for batch in batches:
            path = task.slices[0].path if task.slices else task.task_id
            values.append(transformer.apply_transforms(event_time.column, batch.column(0), path))
    if not values:
        return None
    return _check(source.name, event_time, values)


def _check(source: str, event_time: Any, values: list[pa.Array]) -> EventTimeFinding | None:
    """One finding over arrays that may differ in type (files of one source, JSON's ints and
    strings): the first kind with implausible values."""
    by_type: dict[str, list[pa.Array]] = {}
    for array in values:
        by_type.setdefault(str(array.type), []).append(array)
    for arrays in by_type.values():
        finding = check_values(source, event_time, pa.chunked_array(arrays))
        if finding is not None:
            return finding
    return None


def _stream(source: KafkaSource, rows: int, timeout_s: float) -> EventTimeFinding | None:
    event_time = source.schema_.event_time
    if event_time is None or rows <= 0:
        return None
    ints: list[int] = []
    texts: list[str] = []
    decoder = value_decoder(source)  # Avro or Protobuf values; None for JSON
    decode = decoder.decode if decoder is not None else json.loads
    for value in _newest_values(source, rows, timeout_s):
        try:
            event = decode(value)
        except (TypeError, ValueError, UndecodableValue):
            continue  # malformed messages are the dead-letter topic's business, not this check's
        found = event.get(event_time.column) if isinstance(event, dict) else None
        if isinstance(found, int) and not isinstance(found, bool):
            ints.append(found)
        elif isinstance(found, str):
            texts.append(found)
    arrays = [pa.array(ints, pa.int64())] if ints else []
    if texts:
        arrays.append(pa.array(texts, pa.string()))
    return _check(source.name, event_time, arrays) if arrays else None


def _newest_values(source: KafkaSource, rows: int, timeout_s: float) -> Iterator[bytes]:
    """The values of up to ``rows`` of the topic's newest records, spread over its partitions."""
    consumer: Any = kafka_consumer(
        source,
        enable_auto_commit=False,
        client_id="primus-validate",
        bootstrap_timeout_ms=int(timeout_s * 1000),
        request_timeout_ms=int(timeout_s * 1000) + 1000,
    )
    try:
        parts = consumer.partitions_for_topic(source.topic)
        if not parts:
            raise RuntimeError(f"the topic does not exist on {source.where()}")
        tps = [TopicPartition(source.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        if all(end[tp] <= begin[tp] for tp in tps):
            raise RuntimeError("it has no records to sample")
        per = max(1, math.ceil(rows / len(tps)))
        left: dict[Any, int] = {}
        for tp in tps:
            start = max(begin[tp], end[tp] - per)
            consumer.seek(tp, start)
            left[tp] = end[tp] - start
        deadline = time.monotonic() + timeout_s
        while any(n > 0 for n in left.values()) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    if left.get(tp, 0) > 0:
                        left[tp] -= 1
                        if record.value is not None:
                            yield record.value
    finally:
        consumer.close()
