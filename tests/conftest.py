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
import time
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
        # As the demo deploys Airflow: operators and sensors defer unless a test says otherwise.
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        "PRIMUS_HOME": str(_SESSION_TMP / "primus-home"),
        # No cloud metadata service to ask for object-store credentials: tests name theirs.
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
# Each session tags its broker so a leak check can tell its JVMs from a developer's dev broker.
KAFKA_INSTANCE = f"pytest-{os.getpid()}"
_broker_startup: list[float] = []

from airflow_provider_primus.embedded.kafka import (  # noqa: E402 - after the environment above
    BrokerState,
    EmbeddedKafka,
    KafkaDistribution,
    SecuredListener,
    ensure_distribution,
)
from airflow_provider_primus.embedded.kube.binaries import (  # noqa: E402
    GoNotFoundError,
    KubeBinaries,
    ensure_binaries,
)
from airflow_provider_primus.embedded.kube.cluster import KubeCluster  # noqa: E402
from airflow_provider_primus.embedded.registry import (  # noqa: E402
    EmbeddedRegistry,
    RegistryState,
    ensure_registry,
)
from airflow_provider_primus.embedded.s3 import EmbeddedS3, S3State, ensure_seaweedfs  # noqa: E402
from airflow_provider_primus.embedded.s3 import GoNotFoundError as S3GoNotFoundError  # noqa: E402
from tests.kube_env import USERS as KUBE_ENV_USERS  # noqa: E402
from tests.kube_env import KubeEnv, install_crd, new_namespace  # noqa: E402

# Static-token users of the session's Kubernetes cluster: no RBAC of their own (tests bind them).
KUBE_TEST_USERS = {
    "primus-no-rbac": ["primus:nobody"],
    "primus-pod-reader": ["primus:pod-readers"],
    **KUBE_ENV_USERS,
}
KUBE_NODES = 3
_kube_startup: list[float] = []
_s3_startup: list[float] = []


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


@pytest.fixture(scope="session")
def secured_kafka_broker(kafka_dist: KafkaDistribution) -> Iterator[EmbeddedKafka]:
    """A second broker with a SASL_SSL (SCRAM-SHA-256) listener beside its PLAINTEXT one, a CA and a
    broker certificate generated for the session; ``secured_client()`` gives its settings, ``secured``
    its user and (random) password. Started only by the tests that ask for it."""
    broker = EmbeddedKafka(
        kafka_dist,
        _SESSION_TMP / "kafka-secured",
        instance=KAFKA_INSTANCE,
        secured=SecuredListener(mechanism="SCRAM-SHA-256"),
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[RegistryState]:
    """One Apicurio Registry (Confluent-compatible API, HTTPS with a CA made for the session) per
    test session, started only by the tests that ask for it; fetched from Maven Central on first use."""
    registry = EmbeddedRegistry(ensure_registry(), _SESSION_TMP / "registry")
    state = registry.start()
    try:
        yield state
    finally:
        registry.stop()


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
        # Created is not yet visible: a client asking the broker's metadata at once can be told the
        # topic does not exist (a planner would say so). Await it in the metadata clients read.
        deadline = time.monotonic() + 30
        while name not in admin.list_topics():
            assert time.monotonic() < deadline, f"topic {name} never appeared in the broker's metadata"
            time.sleep(0.05)
        return name

    try:
        yield make
    finally:
        if created:
            admin.delete_topics(created)
        admin.close()


@pytest.fixture(scope="session")
def kube_binaries() -> KubeBinaries:
    """The control plane's binaries; built on first use (minutes), then a stamp check (~1 ms)."""
    try:
        return ensure_binaries()
    except GoNotFoundError as exc:  # only a missing toolchain skips; a failing build fails
        pytest.skip(f"go not installed: {exc}")


@pytest.fixture(scope="session")
def kube_cluster(kube_binaries: KubeBinaries) -> Iterator[KubeCluster]:
    """One real control plane (etcd, kube-apiserver, kube-scheduler, kwok) per session with
    ``KUBE_NODES`` kwok nodes; tests isolate themselves in their own namespaces."""
    cluster = KubeCluster(kube_binaries, _SESSION_TMP / "kube", users=KUBE_TEST_USERS)
    state = cluster.start()
    _kube_startup.append(state.startup_seconds)
    try:
        cluster.add_nodes(KUBE_NODES)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kube_crd(kube_cluster: KubeCluster) -> KubeCluster:
    """The session cluster with the PrimusJob CRD installed (and established)."""
    from airflow_provider_primus.kubernetes.client import KubeApi

    install_crd(KubeApi(kube_cluster.api_client()))
    return kube_cluster


@pytest.fixture
def kube(kube_crd: KubeCluster) -> KubeEnv:
    """A fresh namespace on the session cluster with the shipped RBAC bound to the test users."""
    from airflow_provider_primus.kubernetes.client import KubeApi

    return KubeEnv(kube_crd, new_namespace(kube_crd, KubeApi(kube_crd.api_client())))


@pytest.fixture(scope="session")
def s3_binary() -> Path:
    """SeaweedFS's ``weed``; built from the Go module proxy on first use (minutes), then a stamp check."""
    try:
        return ensure_seaweedfs()
    except S3GoNotFoundError as exc:  # only a missing toolchain skips; a failing build fails
        pytest.skip(f"go not installed, so the S3 test server cannot be built: {exc}")


@pytest.fixture(scope="session")
def s3_server(s3_binary: Path) -> Iterator[S3State]:
    """One real S3-compatible server (SeaweedFS) per session on loopback, with a generated key pair;
    tests isolate themselves in their own buckets."""
    server = EmbeddedS3(s3_binary, _SESSION_TMP / "s3")
    state = server.start()
    _s3_startup.append(state.startup_seconds)
    try:
        yield state
    finally:
        server.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's SQLite metadata DB, migrated by Airflow's own CLI."""
    proc = subprocess.run(
        [venv_bin("airflow"), "db", "migrate"], capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return AIRFLOW_HOME


# What one machine has only one of, or only room for one of, runs on one pytest-xdist worker
# (scripts/test.sh runs ``--dist loadgroup``): the real node (a machine-wide lock; a second worker's
# tests would skip), the YARN mini cluster and the schema registry (JVMs of gigabytes each, started
# once by the worker that runs their tests). Every other session server is per worker.
_EXCLUSIVE_FIXTURES = {"yarn_cluster": "yarn", "schema_registry": "registry"}


def exclusive_group(item: pytest.Item) -> str | None:
    """The xdist group a test must share with the others of its kind, or None."""
    if item.get_closest_marker("realnode") is not None:
        return "realnode"
    fixtures = getattr(item, "fixturenames", ())
    return next((group for name, group in _EXCLUSIVE_FIXTURES.items() if name in fixtures), None)


_GROUP_ORDER = ("realnode", "yarn", "registry")


# scripts/test.sh runs the suite in two phases: the parallel workers without the ``exclusive``
# tests, then those alone (``PRIMUS_EXCLUSIVE=skip|only``); unset, everything runs.
_PHASE = os.environ.get("PRIMUS_EXCLUSIVE", "")


def _select_phase(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _PHASE not in ("skip", "only"):
        return
    keep = _PHASE == "only"
    selected = [i for i in items if (i.get_closest_marker("exclusive") is not None) == keep]
    if len(selected) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in selected])
        items[:] = selected


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_phase(config, items)
    groups: dict[str, str | None] = {}
    for item in items:
        group = groups[item.nodeid] = exclusive_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The groups are the suite's longest runs on one worker each: handed out first, they overlap
        # the rest instead of trailing it. (Every worker sorts alike, as xdist requires.)
        rank = {group: i for i, group in enumerate(_GROUP_ORDER)}
        items.sort(key=lambda item: rank.get(groups[item.nodeid] or "", len(rank)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _broker_startup:
        terminalreporter.write_line(f"embedded Kafka broker startup: {_broker_startup[0]:.2f}s")
    if _kube_startup:
        terminalreporter.write_line(f"embedded Kubernetes control plane startup: {_kube_startup[0]:.2f}s")
    if _s3_startup:
        terminalreporter.write_line(f"embedded S3 server (SeaweedFS) startup: {_s3_startup[0]:.2f}s")


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
