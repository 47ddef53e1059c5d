"""Session-wide real services for the test suite.

Airflow reads its configuration at import time, so the isolated AIRFLOW_HOME is set up here, at
conftest import, before any test module imports Airflow. PRIMUS_HOME is isolated the same way; the
Kafka jar cache is *not*: it is the machine's shared, read-mostly cache that keeps reruns offline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="primus-tests-"))
AIRFLOW_HOME = _SESSION_TMP / "airflow"
AIRFLOW_HOME.mkdir()
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "PRIMUS_HOME": str(_SESSION_TMP / "primus-home"),
    }
)
# Each session tags its broker so a leak check can tell its JVMs from a developer's dev broker.
KAFKA_INSTANCE = f"pytest-{os.getpid()}"
_broker_startup: list[float] = []

from airflow_provider_primus.embedded.kafka import (  # noqa: E402 - after the environment above
    BrokerState,
    EmbeddedKafka,
    KafkaDistribution,
    ensure_distribution,
)


def venv_bin(name: str) -> str:
    """A console script installed next to this interpreter (the project's venv)."""
    return str(Path(sys.executable).parent / name)


@pytest.fixture(scope="session")
def session_tmp() -> Path:
    return _SESSION_TMP


@pytest.fixture(scope="session")
def kafka_dist() -> KafkaDistribution:
    return ensure_distribution()


@pytest.fixture(scope="session")
def kafka_broker(kafka_dist: KafkaDistribution) -> Iterator[BrokerState]:
    """One real broker per test session; tests isolate themselves with their own topics and groups."""
    broker = EmbeddedKafka(kafka_dist, _SESSION_TMP / "kafka", instance=KAFKA_INSTANCE)
    state = broker.start()
    _broker_startup.append(state.startup_seconds)
    try:
        yield state
    finally:
        broker.stop()


@pytest.fixture
def new_topic(kafka_broker: BrokerState) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics on the session broker; deleted after the test."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers, client_id="primus-tests")
    created: list[str] = []

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        created.append(name)
        return name

    try:
        yield make
    finally:
        if created:
            admin.delete_topics(created)
        admin.close()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's SQLite metadata DB, migrated by Airflow's own CLI."""
    proc = subprocess.run(
        [venv_bin("airflow"), "db", "migrate"], capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return AIRFLOW_HOME


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _broker_startup:
        terminalreporter.write_line(f"embedded Kafka broker startup: {_broker_startup[0]:.2f}s")


def _leaked_processes() -> list[psutil.Process]:
    """Processes this session started and did not stop: JVMs tagged with its broker instance or
    carrying its temp dir on their command line, and anything running with its AIRFLOW_HOME."""
    me = os.getpid()
    leaked = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if (
                str(_SESSION_TMP) in cmdline
                or f"=pytest-{me}" in cmdline
                or proc.environ().get("AIRFLOW_HOME", "").startswith(str(_SESSION_TMP))
            ):
                leaked.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return leaked


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    leaked = _leaked_processes()
    if leaked:
        # A leak is a failure of the suite, and the leaked processes are ended here so CI stays clean.
        print(f"\nERROR: processes left running by the test session: {[p.pid for p in leaked]}")
        for proc in leaked:
            with contextlib.suppress(psutil.NoSuchProcess):
                print(f"  {proc.pid}: {' '.join(proc.cmdline())[:200]}")
                proc.kill()
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)
