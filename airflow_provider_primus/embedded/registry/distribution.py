"""Apicurio Registry's server distribution, fetched once from Maven Central into the provider's cache.

Why this artefact: the stream tests need a real schema registry that speaks the Confluent API, and
Apicurio Registry (Apache-2.0) publishes its whole Quarkus server on Maven Central as
``io.apicurio:apicurio-registry-app:<version>:tar.gz:all`` (a runner jar and its ``lib/``). The 3.x
line is compiled for Java 21; 2.6 runs on the Java 17 this machine has and serves the same
Confluent-compatible API under ``/apis/ccompat/v7``.

``mvn dependency:copy`` puts the archive in a temporary directory (through ``~/.m2``), it is unpacked
there and renamed into ``<cache>/apicurio-registry-<version>/`` under a file lock, next to a stamp;
a later call whose stamp matches only stats two files, with neither Maven nor the network.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.buildcache import locked, record_build_time, replace_dir
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

__all__ = ["APICURIO_VERSION", "RegistryDistribution", "RegistryFetchError", "ensure_registry"]

APICURIO_VERSION = "2.6.13.Final"
ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
STAMP = "stamp"


class RegistryFetchError(PrimusError):
    """The distribution is missing and could not be fetched; the message carries Maven's output."""


@dataclass(frozen=True)
class RegistryDistribution:
    home: Path
    version: str

    @property
    def runner(self) -> Path:
        return self.home / f"apicurio-registry-app-{self.version}-runner.jar"


def ensure_registry(
    version: str = APICURIO_VERSION, *, cache: Path | None = None, mvn: str | None = None
) -> RegistryDistribution:
    """The unpacked distribution, fetched on first use (~140 MB, a minute), then a stamp check."""
    root = cache or default_cache_dir()
    dist = RegistryDistribution(root / f"apicurio-registry-{version}", version)
    stamp = ARTIFACT.format(version=version)
    if _ready(dist, stamp):
        return dist
    with locked(root):
        if _ready(dist, stamp):
            return dist
        mvn_path = mvn or shutil.which("mvn")
        if not mvn_path:
            raise RegistryFetchError(
                "Maven (mvn) is needed once to fetch Apicurio Registry; fix: apt-get install maven"
            )
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=root, prefix=".apicurio-") as tmp:
            staged = Path(tmp) / "dist"
            done = subprocess.run(
                [mvn_path, "-q", "-B", "dependency:copy", f"-Dartifact={stamp}", f"-DoutputDirectory={tmp}"],
                capture_output=True,
                text=True,
                cwd=tmp,
                check=False,
            )
            archives = list(Path(tmp).glob("*.tar.gz"))
            if done.returncode != 0 or not archives:
                tail = (done.stdout + done.stderr)[-2000:]
                raise RegistryFetchError(f"mvn dependency:copy {stamp} failed ({done.returncode}):\n{tail}")
            with tarfile.open(archives[0]) as archive:
                archive.extractall(staged, filter="data")
            archives[0].unlink()
            (staged / STAMP).write_text(stamp + "\n")
            replace_dir(staged, dist.home)
        seconds = round(time.monotonic() - started, 1)
        record_build_time(root, {"what": f"apicurio-registry-{version}", "seconds": seconds})
        log.info("Apicurio Registry %s fetched in %.1f s", version, seconds)
    return dist


def _ready(dist: RegistryDistribution, stamp: str) -> bool:
    try:
        return (dist.home / STAMP).read_text().strip() == stamp and dist.runner.is_file()
    except OSError:
        return False
