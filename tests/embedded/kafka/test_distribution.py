import json
from pathlib import Path

import pytest

from airflow_provider_primus.embedded.kafka.distribution import (
    KafkaDistributionError,
    check_classpath,
    distribution,
    ensure_distribution,
    render_pom,
)

V = "4.1.1"
BASE = [f"kafka_2.13-{V}.jar", f"kafka-clients-{V}.jar", f"kafka-server-{V}.jar", "slf4j-api-2.0.17.jar"]


def test_pom_pins_one_slf4j2_binding() -> None:
    pom = render_pom(V)
    assert f"<version>{V}</version>" in pom
    assert "<artifactId>log4j-slf4j2-impl</artifactId>" in pom
    # The SLF4J 1.x binding appears only as an exclusion.
    assert pom.count("<artifactId>log4j-slf4j-impl</artifactId>") == 1
    exclusions = pom.split("<exclusions>")[1].split("</exclusions>")[0]
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in exclusions
    assert "@" not in pom.replace("xmlns", "")


def test_classpath_with_exactly_one_binding_passes() -> None:
    check_classpath([*BASE, "log4j-slf4j2-impl-2.24.3.jar"], V)


@pytest.mark.parametrize(
    "jars, message",
    [
        ([*BASE], "found none"),
        ([*BASE, "log4j-slf4j2-impl-2.24.3.jar", "log4j-slf4j-impl-2.24.3.jar"], "exactly one"),
        ([*BASE, "slf4j-reload4j-1.7.36.jar"], "exactly one"),
        ([*BASE[1:], "log4j-slf4j2-impl-2.24.3.jar"], "kafka_2.13"),
    ],
)
def test_classpath_is_refused(jars: list[str], message: str) -> None:
    with pytest.raises(KafkaDistributionError, match=message):
        check_classpath(jars, V)


def test_incomplete_cache_is_not_complete(tmp_path: Path) -> None:
    dist = distribution(V, tmp_path)
    assert not dist.is_complete()
    dist.libs.mkdir(parents=True)
    (dist.libs / "a.jar").write_text("x")
    dist.manifest.write_text(json.dumps({"version": V, "jars": ["a.jar", "b.jar"]}))
    assert not dist.is_complete()  # a jar named in the manifest is missing
    with pytest.raises(KafkaDistributionError, match="primus kafka fetch"):
        dist.classpath()


def test_missing_maven_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaDistributionError, match="apt-get install maven"):
        ensure_distribution(V, tmp_path, mvn="")  # "" means: behave as if mvn were not installed


def test_cached_distribution_is_complete(kafka_dist) -> None:
    jars = kafka_dist.classpath().split(":")
    names = [Path(j).name for j in jars]
    check_classpath(names, kafka_dist.version)
    assert all(Path(j).is_file() for j in jars)
