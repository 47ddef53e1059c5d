"""How the stream's Kafka clients ride out a broker outage: which errors mean "away for now", how long
a request may hang, and how long to wait between attempts.

Shared by the fetch thread and the offset committer so that both treat an outage alike.
"""

from __future__ import annotations

from kafka.errors import KafkaError

from airflow_provider_primus.data.sources.kafka import BrokerUnavailableError

__all__ = ["RECONNECT_BACKOFF_MAX_MS", "REQUEST_TIMEOUT_MS", "Backoff", "retriable"]

REQUEST_TIMEOUT_MS = 10_000  # a hung request is dropped and its connection made again after this
RECONNECT_BACKOFF_MAX_MS = 1000  # a returning broker is found again within about a second


def retriable(exc: BaseException) -> bool:
    """Connection loss, timeouts, leader moves: what a broker restart looks like from a client."""
    if isinstance(exc, BrokerUnavailableError):  # the offset lookups' word for the same
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


class Backoff:
    """Exponential waits between attempts against an unreachable broker, capped at a few seconds."""

    def __init__(self, first_s: float = 0.2, cap_s: float = 2.0) -> None:
        self.first_s, self.cap_s, self.next_s = first_s, cap_s, first_s

    def __call__(self) -> float:
        wait, self.next_s = self.next_s, min(self.cap_s, self.next_s * 2)
        return wait

    def reset(self) -> None:
        self.next_s = self.first_s
