"""Building the test cluster's launcher and its classpath once into the provider's cache.

Maven resolves the runtime classpath of ``java/pom.xml`` (Hadoop's client and mini cluster jars, the
test KDC, and the runtime pieces the shaded mini cluster lacks) into
``<cache>/yarn-hadoop-<version>-<pom hash>/libs`` and packages ``java/src`` (``MiniCluster``, its
``Kerberos``) into ``<cache>/yarn-minicluster-<source hash>/primus-yarn-minicluster.jar``. The
launcher compiles against the ApplicationMaster's jar (``yarn/build.py``: the argument and JSON
helpers they share), so its key covers the ApplicationMaster's sources too. Each directory is
staged and renamed into place with its manifest written last; one builder at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.buildcache import locked, record_build_time, replace_dir
from airflow_provider_primus.paths import cache_dir
from airflow_provider_primus.yarn import build as am_build
from airflow_provider_primus.yarn.build import HADOOP_VERSION, YarnBuildError, digest, maven_sources

__all__ = ["MINI_CLUSTER_CLASS", "MiniClusterBuild", "ensure_mini_cluster_build", "source_dir"]

JAR = "primus-yarn-minicluster.jar"
MANIFEST = "manifest.json"
MINI_CLUSTER_CLASS = "dev.primus.yarn.MiniCluster"


def source_dir() -> Path:
    return Path(__file__).with_name("java")


@dataclass(frozen=True)
class MiniClusterBuild:
    libs: Path  # Hadoop's jars: the launcher's classpath and its containers'
    jar: Path  # the launcher
    am_jar: Path  # the ApplicationMaster (the launcher's shared helpers)

    def classpath(self) -> str:
        """The launcher's JVM classpath: its jar, the AM's, every resolved jar (manifest order)."""
        jars = json.loads((self.libs.parent / MANIFEST).read_text())["jars"]
        return os.pathsep.join([str(self.jar), str(self.am_jar), *(str(self.libs / j) for j in jars)])


def _complete(home: Path) -> bool:
    try:
        listed = json.loads((home / MANIFEST).read_text())["jars"]
    except (OSError, ValueError, KeyError):
        return False
    return all((home / "libs" / jar).is_file() for jar in listed)


def ensure_mini_cluster_build(root: Path | None = None, mvn: str | None = None) -> MiniClusterBuild:
    """The cached launcher and classpath (and the ApplicationMaster it compiles against), built
    first where missing."""
    am = am_build.ensure_build(root, mvn)
    src, am_src = source_dir(), am_build.source_dir()
    base = root or cache_dir()
    libs_home = base / f"yarn-hadoop-{HADOOP_VERSION}-{digest([src / 'pom.xml'], src)}"
    both = f"{digest(maven_sources(src), src)}:{digest(maven_sources(am_src), am_src)}"
    jar_home = base / f"yarn-minicluster-{hashlib.sha256(both.encode()).hexdigest()[:16]}"
    build = MiniClusterBuild(libs_home / "libs", jar_home / JAR, am.jar)
    if _complete(libs_home) and build.jar.is_file():
        return build
    mvn_path = am_build.find_maven(mvn)
    with locked(base / ".yarn-minicluster-build"):
        need_libs = not _complete(libs_home)
        if not need_libs and build.jar.is_file():
            return build
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=base, prefix=".yarn-minicluster-build-") as tmp:
            work = Path(tmp) / "java"
            shutil.copytree(src, work, ignore=shutil.ignore_patterns("target"))
            goals = ["package", f"-Dprimus.am.jar={am.jar}"]
            if need_libs:
                goals += [
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'libs'}",
                ]
            what = "the YARN mini cluster's launcher" + (" and classpath" if need_libs else "")
            am_build.run_maven(mvn_path, work / "pom.xml", goals, what)
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
            {
                "what": "yarn-minicluster",
                "resolved": need_libs,
                "seconds": round(time.monotonic() - started, 1),
            },
        )
    return build
