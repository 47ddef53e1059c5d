"""The dead-letter topic: where a malformed stream message goes, with the reason in its headers.

A malformed message is never trained on and never stops training. Dead-lettering is at-least-once:
after a crash the messages between the last checkpoint and the crash are re-read and may be
forwarded again (the headers carry topic/partition/offset to deduplicate on).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka import ensure_topic
from airflow_provider_primus.data.sources.kafka_client import producer

log = logging.getLogger(__name__)

__all__ = ["DeadLetters", "dead_letter_topic"]


def dead_letter_topic(source: KafkaSource) -> str:
    return source.dead_letter_topic or f"{source.topic}.dlq"


class DeadLetters:
    def __init__(self, source: KafkaSource, *, enabled: bool = True) -> None:
        """``enabled=False`` only logs: nothing is produced (the producer is made on first use)."""
        self.source = source
        self.topic = dead_letter_topic(source)
        self.enabled = enabled
        self._producer: Any = None

    def send(self, partition: int, record: Any, reason: str) -> None:
        log.warning(
            "stream %s: message %s/%d@%d dead-lettered: %s",
            self.source.name,
            self.source.topic,
            partition,
            record.offset,
            reason,
        )
        if not self.enabled:
            return
        if self._producer is None:
            ensure_topic(self.source, self.topic)
            self._producer = producer(self.source, client_id=f"primus-dlq-{self.source.name}")
        headers = [
            ("primus.error", reason.encode()[:1000]),
            ("primus.source", self.source.name.encode()),
            ("primus.topic", self.source.topic.encode()),
            ("primus.partition", str(partition).encode()),
            ("primus.offset", str(record.offset).encode()),
        ]
        self._producer.send(self.topic, key=record.key, value=record.value, headers=headers)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
