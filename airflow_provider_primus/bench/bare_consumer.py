"""The ingest benchmarks' yardstick: a bare kafka-python consumer reading a whole topic once, with the
fetch sizes our stream source uses, doing nothing with a value (or only what ``on_value`` does)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_provider_primus.contracts.sources import KafkaSource

__all__ = ["bare_pass"]


def bare_pass(
    source: KafkaSource, on_value: Callable[[bytes], object] | None = None
) -> tuple[int, float, list[int]]:
    """(messages, seconds, partitions) of one pass from the beginning to the end offsets of
    ``source``'s topic."""
    from kafka import TopicPartition

    from airflow_provider_primus.data.sources.kafka_client import consumer

    bare: Any = consumer(
        source,
        enable_auto_commit=False,
        max_poll_records=5000,
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    try:
        tps = [TopicPartition(source.topic, p) for p in sorted(bare.partitions_for_topic(source.topic))]
        bare.assign(tps)
        bare.seek_to_beginning(*tps)
        total = int(sum(bare.end_offsets(tps).values()))
        started = time.perf_counter()
        seen = 0
        while seen < total:
            for records in bare.poll(timeout_ms=1000).values():
                if on_value is not None:
                    for record in records:
                        on_value(record.value)
                seen += len(records)
        return total, time.perf_counter() - started, [tp.partition for tp in tps]
    finally:
        bare.close()
