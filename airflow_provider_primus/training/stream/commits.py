"""Mirroring a checkpoint's stream offsets into the consumer group, off the training loop.

The group's offsets serve lag monitoring and ``committed``-policy starts only; the checkpoint is the
durable position. So a commit never blocks training and never fails it: it runs on its own thread and
is retried while the broker is away.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka_client import consumer, permanent_failure
from airflow_provider_primus.training.stream.reconnect import (
    RECONNECT_BACKOFF_MAX_MS,
    REQUEST_TIMEOUT_MS,
    Backoff,
    retriable,
)

log = logging.getLogger(__name__)

__all__ = ["OffsetCommitter"]


class OffsetCommitter:
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
        backoff = Backoff(cap_s=5.0)
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
                self._consumer = consumer(
                    self.source,
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
            refused = permanent_failure(self.source, exc)
            if refused is not None:  # the stream itself reports it; the commit is only a mirror
                log.error("stream %s: committing offsets failed: %s", self.source.name, refused)
                return False
            if not retriable(exc):
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
