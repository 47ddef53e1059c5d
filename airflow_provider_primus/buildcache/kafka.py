"""The Kafka broker's jars in the provider's cache: where they live and whether they are complete.

``<cache>/kafka-<version>/libs`` holds the resolved classpath and ``manifest.json`` lists it, written
last, so a directory without a complete manifest was never finished. The doctor reads this (it must
not fetch anything) and ``embedded/kafka/distribution.py`` fills it with Maven.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir

__all__ = ["DEFAULT_KAFKA_VERSION", "MANIFEST", "KafkaDistribution", "KafkaDistributionError", "distribution"]

DEFAULT_KAFKA_VERSION = os.environ.get("PRIMUS_KAFKA_VERSION", "4.1.1")
MANIFEST = "manifest.json"


class KafkaDistributionError(PrimusError):
    """The broker's jars are missing or cannot be resolved; the message says how to fix it."""


@dataclass(frozen=True)
class KafkaDistribution:
    version: str
    home: Path

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def manifest(self) -> Path:
        return self.home / MANIFEST

    def is_complete(self) -> bool:
        if not self.manifest.is_file():
            return False
        try:
            jars = json.loads(self.manifest.read_text())["jars"]
        except (ValueError, KeyError):
            return False
        return all((self.libs / jar).is_file() for jar in jars)

    def classpath(self) -> str:
        if not self.is_complete():
            raise KafkaDistributionError(
                f"Kafka {self.version} jars are not in {self.home}; fix: run `primus kafka fetch`"
            )
        jars = json.loads(self.manifest.read_text())["jars"]
        return os.pathsep.join(str(self.libs / jar) for jar in sorted(jars))


def distribution(version: str = DEFAULT_KAFKA_VERSION, root: Path | None = None) -> KafkaDistribution:
    return KafkaDistribution(version=version, home=(root or cache_dir()) / f"kafka-{version}")
