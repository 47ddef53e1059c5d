"""Checks of what a machine needs to run the provider, each with the fix for what is missing.

Shared by ``primus doctor`` and the ``PrimusDoctorOperator`` so the command line and a DAG report
the same facts in the same words. What the cached artefacts are and when they are complete comes
from ``buildcache/`` (never from ``embedded/``, which builds them): checking builds nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow_provider_primus.buildcache.kafka import DEFAULT_KAFKA_VERSION, distribution
from airflow_provider_primus.buildcache.kube import KUBE_VERSION, binaries_in, build_stamp, is_complete
from airflow_provider_primus.paths import cache_dir as default_cache_dir

MIN_PYTHON = (3, 11)
MIN_JAVA = 17


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # A missing optional piece is reported but does not fail the doctor.
    required: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_python() -> Check:
    found = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Check("python", ok, f"Python {found} at {sys.executable}", "" if ok else "install Python 3.11+")


def java_major_version(java: str) -> int | None:
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, check=False, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_…".
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> Check:
    fix = (
        f"install a Java {MIN_JAVA}+ runtime (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )
    java = shutil.which("java")
    if not java:
        return Check("java", False, "no `java` on PATH", fix)
    major = java_major_version(java)
    if major is None:
        return Check("java", False, f"could not read the version of {java}", fix)
    ok = major >= MIN_JAVA
    return Check("java", ok, f"Java {major} at {java}", "" if ok else fix)


def check_kafka_jars(version: str, cache: Path | None) -> Check:
    dist = distribution(version, cache)
    if dist.is_complete():
        return Check("kafka-jars", True, f"Apache Kafka {version} classpath in {dist.home}")
    return Check(
        "kafka-jars",
        False,
        f"Apache Kafka {version} jars missing from {dist.home}",
        f"primus kafka fetch --cache-dir {dist.home.parent}",
    )


def check_maven(jars_present: bool) -> Check:
    mvn = shutil.which("mvn")
    if mvn:
        return Check("maven", True, f"Maven at {mvn}", required=False)
    return Check(
        "maven",
        False,
        "no `mvn` on PATH"
        + (" (only needed to fetch the Kafka jars, which are present)" if jars_present else ""),
        "apt-get install maven",
        required=not jars_present,
    )


def check_airflow_db() -> Check:
    """The configured metadata DB exists and is migrated to this Airflow's head revision."""
    fix = "airflow db migrate"
    try:
        import airflow
        from airflow.configuration import conf
        from alembic.script import ScriptDirectory
        from sqlalchemy import create_engine, inspect, text

        url = conf.get("database", "sql_alchemy_conn")
        migrations = Path(airflow.__file__).parent / "migrations"
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(migrations))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                if "alembic_version" not in inspect(conn).get_table_names():
                    return Check("airflow-db", False, f"metadata DB {_redact(url)} is not initialised", fix)
                current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        finally:
            engine.dispose()
    except Exception as exc:  # any failure here is a finding to report, not a crash
        return Check("airflow-db", False, f"cannot open the Airflow metadata DB: {exc}", fix)
    if current != head:
        return Check(
            "airflow-db",
            False,
            f"metadata DB {_redact(url)} at revision {current}, Airflow expects {head}",
            fix,
        )
    return Check("airflow-db", True, f"metadata DB {_redact(url)} migrated (revision {head})")


def _redact(url: str) -> str:
    """Never print a DB password."""
    return re.sub(r"(://[^:/@]+:)[^@]+@", r"\1***@", url)


def check_kube_binaries(cache: Path | None) -> Check:
    """Optional: the Kubernetes control plane the kube tests and ``primus bench k8s`` start."""
    home = (cache or default_cache_dir()) / f"kube-{KUBE_VERSION}"
    if is_complete(binaries_in(home), build_stamp()):
        return Check(
            "kube-control-plane", True, f"Kubernetes {KUBE_VERSION} binaries in {home}", required=False
        )
    fix = (
        "make test (builds them with Go once)" if shutil.which("go") else "install Go >= 1.25, then make test"
    )
    return Check(
        "kube-control-plane",
        False,
        f"no Kubernetes {KUBE_VERSION} control-plane binaries (only the kube tests and bench k8s need them)",
        fix,
        required=False,
    )


def run_checks(
    *,
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    cache: Path | None = None,
    airflow_db: bool = True,
) -> list[Check]:
    kafka = check_kafka_jars(kafka_version, cache)
    checks: list[Callable[[], Check]] = [
        check_python,
        check_java,
        lambda: kafka,
        lambda: check_maven(kafka.ok),
        lambda: check_kube_binaries(cache),
    ]
    if airflow_db:
        checks.append(check_airflow_db)
    return [check() for check in checks]


def healthy(checks: list[Check]) -> bool:
    return all(c.ok or not c.required for c in checks)
