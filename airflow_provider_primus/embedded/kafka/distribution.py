"""Resolving the Kafka broker's runtime classpath from Maven Central into the provider's cache.

Maven resolves the dependency graph of ``org.apache.kafka:kafka_2.13`` once; the jars are copied into
``<cache>/kafka-<version>/libs`` and a manifest marks the directory complete. Later runs only read
the manifest, so they start offline. The copy goes to a temporary directory first and is renamed
into place, so an interrupted fetch never leaves a half-filled classpath that looks complete. Where
the jars live and when they are complete is ``buildcache/kafka.py`` (the doctor reads it too).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from airflow_provider_primus.buildcache.kafka import (
    DEFAULT_KAFKA_VERSION,
    MANIFEST,
    KafkaDistribution,
    KafkaDistributionError,
    distribution,
)

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "KafkaDistribution",
    "KafkaDistributionError",
    "check_classpath",
    "distribution",
    "ensure_distribution",
    "render_pom",
]

LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
# The SLF4J bindings we know of; the classpath must carry exactly one (log4j-slf4j2-impl).
_SLF4J_BINDINGS = re.compile(
    r"^(log4j-slf4j-impl|log4j-slf4j2-impl|slf4j-reload4j|slf4j-log4j12|slf4j-simple|logback-classic)-"
)


def render_pom(version: str) -> str:
    template = resources.files(__package__).joinpath("resources/pom.xml.template").read_text()
    return (
        template.replace("@KAFKA_VERSION@", version)
        .replace("@LOG4J_VERSION@", LOG4J_VERSION)
        .replace("@SLF4J_VERSION@", SLF4J_VERSION)
    )


def check_classpath(jars: list[str], version: str) -> None:
    """Refuse a classpath that would start a broken or noisy broker."""
    required = [f"kafka_2.13-{version}.jar", f"kafka-clients-{version}.jar", f"kafka-server-{version}.jar"]
    missing = [jar for jar in required if jar not in jars]
    if missing:
        raise KafkaDistributionError(f"resolved classpath lacks {', '.join(missing)}")
    bindings = sorted(jar for jar in jars if _SLF4J_BINDINGS.match(jar))
    if [b.split("-2.")[0] for b in bindings] != ["log4j-slf4j2-impl"]:
        raise KafkaDistributionError(
            f"expected exactly one SLF4J binding (log4j-slf4j2-impl), found {bindings or 'none'}"
        )


def ensure_distribution(
    version: str = DEFAULT_KAFKA_VERSION,
    root: Path | None = None,
    mvn: str | None = None,
) -> KafkaDistribution:
    """Return the cached distribution, resolving it with Maven first when it is not complete."""
    dist = distribution(version, root)
    if dist.is_complete():
        return dist
    mvn_path = shutil.which("mvn") if mvn is None else mvn
    if not mvn_path:
        raise KafkaDistributionError(
            "Maven (mvn) is needed once to fetch the Kafka jars; fix: apt-get install maven"
        )
    dist.home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dist.home, prefix=".fetch-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(render_pom(version))
        staged = work / "libs"
        cmd = [
            mvn_path,
            "-B",
            "-q",
            "-f",
            str(work / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staged}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise KafkaDistributionError(
                f"Maven could not resolve org.apache.kafka:kafka_2.13:{version} (exit {proc.returncode}):\n"
                f"{tail}"
            )
        jars = sorted(p.name for p in staged.glob("*.jar"))
        check_classpath(jars, version)
        if dist.libs.exists():
            shutil.rmtree(dist.libs)
        staged.rename(dist.libs)
        (dist.home / "pom.xml").write_text(render_pom(version))
        manifest = {"version": version, "jars": jars}
        tmp_manifest = dist.home / (MANIFEST + ".tmp")
        tmp_manifest.write_text(json.dumps(manifest, indent=2))
        tmp_manifest.replace(dist.manifest)
    return dist
