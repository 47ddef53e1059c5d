"""Building the YARN side once into the provider's cache: Hadoop's jars and our own jar.

Maven resolves the classpath of ``java/pom.xml`` (Hadoop's client and mini cluster jars, plus the
runtime pieces the shaded mini cluster lacks) into ``<cache>/yarn-hadoop-<version>-<pom hash>/libs``
and packages ``java/src`` into ``<cache>/yarn-am-<source hash>/primus-yarn.jar``. Both are keyed by
the content that decides their bytes, so an edited ApplicationMaster rebuilds only its jar, an edited
pom re-resolves, and any clone with the same sources shares the same build. Like the Kafka jars,
each directory is staged and renamed into place with its manifest written last, so an interrupted
build never looks complete; one builder at a time (``buildcache.locked``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.embedded.buildcache import locked, record_build_time, replace_dir
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir

__all__ = [
    "HADOOP_VERSION",
    "YarnBuild",
    "YarnBuildError",
    "YarnToolchainMissing",
    "ensure_build",
    "source_dir",
]

HADOOP_VERSION = "3.5.0"
JAR = "primus-yarn.jar"
MANIFEST = "manifest.json"
AM_CLASS = "dev.primus.yarn.ApplicationMaster"
MINI_CLUSTER_CLASS = "dev.primus.yarn.MiniCluster"


class YarnBuildError(PrimusError):
    """The YARN jars could not be built; the message shows Maven's output."""


class YarnToolchainMissing(YarnBuildError):
    """Maven or a JDK is not installed: the message says how to install them (tests skip on this)."""


def source_dir() -> Path:
    return Path(__file__).with_name("java")


def _digest(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _sources(root: Path) -> list[Path]:
    return [root / "pom.xml", *sorted((root / "src").rglob("*.java"))]


@dataclass(frozen=True)
class YarnBuild:
    libs: Path
    jar: Path

    def classpath(self, *, with_jar: bool = True) -> str:
        """The JVM classpath: our jar and every resolved jar (the manifest's list, in order)."""
        jars = json.loads((self.libs.parent / MANIFEST).read_text())["jars"]
        entries = ([str(self.jar)] if with_jar else []) + [str(self.libs / j) for j in jars]
        return os.pathsep.join(entries)


def _complete(home: Path) -> bool:
    try:
        listed = json.loads((home / MANIFEST).read_text())["jars"]
    except (OSError, ValueError, KeyError):
        return False
    return all((home / "libs" / jar).is_file() for jar in listed)


def ensure_build(root: Path | None = None, mvn: str | None = None) -> YarnBuild:
    """The cached build, made first where it is missing (Maven, network for the first resolution)."""
    src = source_dir()
    base = root or cache_dir()
    pom_hash = _digest([src / "pom.xml"], src)
    src_hash = _digest(_sources(src), src)
    libs_home = base / f"yarn-hadoop-{HADOOP_VERSION}-{pom_hash}"
    jar_home = base / f"yarn-am-{src_hash}"
    build = YarnBuild(libs_home / "libs", jar_home / JAR)
    if _complete(libs_home) and build.jar.is_file():
        return build
    mvn_path = shutil.which("mvn") if mvn is None else mvn
    if not mvn_path or not (shutil.which("javac") or os.environ.get("JAVA_HOME")):
        raise YarnToolchainMissing(
            "Maven (mvn) and a JDK (>= 11) are needed once to build the YARN ApplicationMaster and fetch "
            "Hadoop's jars; fix: apt-get install maven openjdk-17-jdk-headless"
        )
    with locked(base / ".yarn-build"):
        need_libs = not _complete(libs_home)
        if not need_libs and build.jar.is_file():
            return build
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=base, prefix=".yarn-build-") as tmp:
            work = Path(tmp) / "java"
            shutil.copytree(src, work, ignore=shutil.ignore_patterns("target"))
            goals = ["package"]
            if need_libs:
                goals += [
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'libs'}",
                ]
            cmd = [mvn_path, "-B", "-q", "-f", str(work / "pom.xml"), *goals]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
                raise YarnBuildError(f"building the YARN jars failed (exit {proc.returncode}):\n{tail}")
            if need_libs:
                staged = Path(tmp) / "libs-home"
                staged.mkdir()
                (work / "libs").rename(staged / "libs")
                jars = sorted(p.name for p in (staged / "libs").glob("*.jar"))
                if f"hadoop-client-minicluster-{HADOOP_VERSION}.jar" not in jars:
                    raise YarnBuildError(
                        f"resolved classpath lacks hadoop-client-minicluster-{HADOOP_VERSION}"
                    )
                (staged / MANIFEST).write_text(json.dumps({"hadoop": HADOOP_VERSION, "jars": jars}, indent=2))
                replace_dir(staged, libs_home)
            staged_jar = Path(tmp) / "jar-home"
            staged_jar.mkdir()
            shutil.copy2(work / "target" / JAR, staged_jar / JAR)
            replace_dir(staged_jar, jar_home)
        record_build_time(
            base,
            {"what": "yarn", "resolved": need_libs, "seconds": round(time.monotonic() - started, 1)},
        )
    return build
