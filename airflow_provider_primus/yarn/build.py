"""Building the ApplicationMaster once into the provider's cache.

Maven packages ``java/src`` into ``<cache>/yarn-am-<source hash>/primus-yarn.jar``. The jar is keyed
by the content that decides its bytes (``java/pom.xml`` and every ``.java`` file under ``java/src``),
so an edited ApplicationMaster rebuilds and any clone with the same sources shares the same build.
Like the Kafka jars, the directory is staged and renamed into place, so an interrupted build never
looks complete; one builder at a time (``buildcache.locked``). A cluster provides Hadoop's own jars
on ``yarn.application.classpath``, so the jar is all a submission needs; the test cluster's launcher
and its classpath are built by ``embedded/yarn/build.py`` with the helpers here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.buildcache import locked, record_build_time, replace_dir
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir

__all__ = [
    "AM_CLASS",
    "HADOOP_VERSION",
    "YarnBuild",
    "YarnBuildError",
    "YarnToolchainMissing",
    "digest",
    "ensure_build",
    "find_maven",
    "maven_sources",
    "run_maven",
    "source_dir",
]

HADOOP_VERSION = "3.5.0"
JAR = "primus-yarn.jar"
AM_CLASS = "dev.primus.yarn.ApplicationMaster"


class YarnBuildError(PrimusError):
    """The YARN jars could not be built; the message shows Maven's output."""


class YarnToolchainMissing(YarnBuildError):
    """Maven or a JDK is not installed: the message says how to install them (tests skip on this)."""


def source_dir() -> Path:
    return Path(__file__).with_name("java")


def digest(paths: list[Path], root: Path) -> str:
    """A content hash of ``paths`` (named relative to ``root``, so a moved file changes it too)."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def maven_sources(root: Path) -> list[Path]:
    """What decides a Maven module's jar: its pom and every Java source under ``src``."""
    return [root / "pom.xml", *sorted((root / "src").rglob("*.java"))]


@dataclass(frozen=True)
class YarnBuild:
    jar: Path  # the ApplicationMaster


def find_maven(mvn: str | None) -> str:
    """Maven, with a JDK beside it, or :class:`YarnToolchainMissing` saying how to install them."""
    mvn_path = shutil.which("mvn") if mvn is None else mvn
    if not mvn_path or not (shutil.which("javac") or os.environ.get("JAVA_HOME")):
        raise YarnToolchainMissing(
            "Maven (mvn) and a JDK (>= 11) are needed once to build the YARN ApplicationMaster and fetch "
            "Hadoop's jars; fix: apt-get install maven openjdk-17-jdk-headless"
        )
    return mvn_path


def run_maven(mvn_path: str, pom: Path, goals: list[str], what: str) -> None:
    cmd = [mvn_path, "-B", "-q", "-f", str(pom), *goals]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise YarnBuildError(f"building {what} failed (exit {proc.returncode}):\n{tail}")


def ensure_build(root: Path | None = None, mvn: str | None = None) -> YarnBuild:
    """The cached ApplicationMaster jar, built first where it is missing (Maven; the network for
    Hadoop's client jars the first time)."""
    src = source_dir()
    base = root or cache_dir()
    jar_home = base / f"yarn-am-{digest(maven_sources(src), src)}"
    build = YarnBuild(jar_home / JAR)
    if build.jar.is_file():
        return build
    mvn_path = find_maven(mvn)
    with locked(base / ".yarn-build"):
        if build.jar.is_file():
            return build
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=base, prefix=".yarn-build-") as tmp:
            work = Path(tmp) / "java"
            shutil.copytree(src, work, ignore=shutil.ignore_patterns("target"))
            run_maven(mvn_path, work / "pom.xml", ["package"], "the YARN ApplicationMaster")
            staged_jar = Path(tmp) / "jar-home"
            staged_jar.mkdir()
            shutil.copy2(work / "target" / JAR, staged_jar / JAR)
            replace_dir(staged_jar, jar_home)
        record_build_time(base, {"what": "yarn-am", "seconds": round(time.monotonic() - started, 1)})
    return build
