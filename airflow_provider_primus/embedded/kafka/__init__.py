"""A real Apache Kafka broker (single KRaft node) for development and tests."""

from airflow_provider_primus.embedded.kafka.broker import BrokerState, EmbeddedKafka, SecuredListener
from airflow_provider_primus.embedded.kafka.distribution import (
    DEFAULT_KAFKA_VERSION,
    KafkaDistribution,
    KafkaDistributionError,
    ensure_distribution,
)

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerState",
    "EmbeddedKafka",
    "KafkaDistribution",
    "KafkaDistributionError",
    "SecuredListener",
    "ensure_distribution",
]
