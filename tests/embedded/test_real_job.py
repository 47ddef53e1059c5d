"""A PrimusJob in real pods on the real node: the master as a driver pod (the shipped RBAC, in-cluster
credentials), data executor pods from the data image, the trainer pod from the trainer image; data
and checkpoints on a PersistentVolume; a Kafka topic read from inside the pods; every port on the
job's TLS (on by default on Kubernetes). One job takes the three faults in turn — a data executor pod
force-deleted, the master pod deleted and its successor re-adopting the running pods, the trainer pod
killed and resumed from its checkpoint — and still trains every planned row and every stream record
exactly once, and ends ``Succeeded``. Another runs two trainers with the history and the checkpoints
on the object store, through the kill of one trainer pod."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.embedded.kafka.broker import EmbeddedKafka
from airflow_provider_primus.embedded.kafka.distribution import KafkaDistribution
from airflow_provider_primus.embedded.kube.access import ADMIN
from airflow_provider_primus.embedded.kube.local import LocalCluster
from airflow_provider_primus.embedded.kube.project_image import DATA, TRAINER, ProjectImage, build_on
from airflow_provider_primus.embedded.kube.relay import TcpRelay
from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, resource_path
from airflow_provider_primus.kubernetes.install import apply
from airflow_provider_primus.kubernetes.manifests import rbac
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.kubernetes.submission import read_ca_cert, read_token, start_master_pod
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import submit, wait_for
from airflow_provider_primus.master.store import JobRecord
from tests.embedded.conftest import import_image
from tests.example_package import build_wheel, example_project
from tests.kube_env import install_crd
from tests.master.conftest import trace_rows, trace_rows_of_group
from tests.s3_helpers import admin_fs, new_bucket
from tests.training.conftest import SCHEMA, T0, events, to_json

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.timeout(3000),
]

POD_USER = 10001  # the images' user: what it writes on the volume must be its own
HOURS, PER_HOUR, STREAM_ROWS = 6, 4000, 800
STORE = "/data/store"  # where the master and data executors see the history (the volume's store/)


@dataclass
class PodJobWorld:
    """A namespace with the CRD and RBAC, a bound PersistentVolumeClaim over ``volume`` (a host
    directory), the history in it and a topic, and the job's documents."""

    api: KubeApi
    namespace: str
    volume: Path
    docs: Path
    bootstrap: str  # the broker, as this process reaches it
    pod_bootstrap: str  # the broker, as pods reach it
    topic: str
    images: dict[str, str]
    name: str = "job"
    hours: int = HOURS
    trainers: int = 1
    storage: dict[str, Any] | None = None  # the object store's settings, once the history is there
    object_root: str | None = None  # bucket/prefix of the history (store/) and checkpoints

    @property
    def history_rows(self) -> int:
        return self.hours * PER_HOUR

    stream_ids: list[int] = field(default_factory=list)

    @property
    def store(self) -> KubeJobStore:
        return KubeJobStore(self.api, self.namespace)

    def job(self, **spec: Any) -> Path:
        data = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "hybrid"},
            "spec": {
                "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=self.hours)).isoformat()},
                "planning": {"target_rows_per_task": 2000, "min_rows_per_task": 1000},
                "sources": [
                    {
                        "name": "history",
                        "type": "files",
                        "format": "parquet",
                        "uri": f"s3://{self.object_root}/store" if self.object_root else f"file://{STORE}",
                        "path_template": "{date}/{hour}",
                        "granularity": "hour",
                        "schema": SCHEMA,
                        **({"storage": self.storage} if self.storage else {}),
                    },
                    {
                        "name": "events",
                        "type": "kafka",
                        "bootstrap_servers": self.pod_bootstrap,
                        "topic": self.topic,
                        "event_time_field": "ts",
                        "start": {"policy": "earliest"},
                        "group_id": f"{self.topic}-trainer",
                        "schema": SCHEMA,
                    },
                ],
                "mixture": [
                    {"source": "history", "weight": 0.8, "priority": 0},
                    {"source": "events", "weight": 0.2, "priority": 1},
                ],
            },
        }
        training = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "t"},
            "spec": {
                "mode": "mixed",
                "batch_size": 20,
                "checkpoint": {
                    "every_steps": 50,
                    "every_s": 0.0,
                    **(
                        {"dir": f"s3://{self.object_root}/checkpoints", "storage": self.storage}
                        if self.object_root
                        else {}
                    ),
                },
                # The stream's records are from the history's last hour: aged by the wall clock, not
                # held back until a replay of the history reaches them.
                "mixing": {"shuffle": {"buffer_rows": 0}, "freshness": {"clock": "wall"}},
            },
        }
        kubernetes = {
            "namespace": self.namespace,
            "image": self.images[DATA],
            "images": {"trainer": self.images[TRAINER]},
            "image_pull_policy": "Never",  # imported into the node: nothing can be pulled here
            "volumes": [
                {"name": "work", "persistent_volume_claim": {"claim_name": "primus-work"}},
                {"name": "scratch", "empty_dir": {"size_limit": "256Mi"}},
                {"name": "extra", "config_map": {"name": "primus-extra"}},
            ],
            "mounts": {
                "master": [
                    {"volume": "work", "path": STORE, "sub_path": "store", "read_only": True},
                    {"volume": "work", "path": "/var/lib/primus", "sub_path": "home"},
                ],
                "data": [{"volume": "work", "path": STORE, "sub_path": "store", "read_only": True}],
                "trainer": [
                    {"volume": "work", "path": "/var/lib/primus", "sub_path": "home"},
                    {"volume": "scratch", "path": "/tmp/scratch"},
                    {"volume": "extra", "path": "/etc/primus-extra", "read_only": True},
                ],
            },
        }
        job = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": self.name},
            "spec": {
                "data": "data.yaml",
                "training": "training.yaml",
                "passthrough": ["row_id"],
                "control": {"host": "0.0.0.0"},  # a pod's own address; peers dial its pod IP
                "roles": {
                    "data": {"replicas": {"min": 2}, "resources": {"cpu": "250m", "memory": "768Mi"}},
                    # Two trainers share the node's two cores with the master and two data pods.
                    "trainer": {"resources": {"cpu": "900m", "memory": "3Gi"}}
                    if self.trainers == 1
                    else {
                        "replicas": {"min": 1, "initial": self.trainers, "max": self.trainers},
                        "resources": {"cpu": "400m", "memory": "2Gi"},
                    },
                },
                "scaling": {"enabled": False},
                "data_service": {"batch_rows": 500, "window": 2, "master_grace_s": 180.0},
                "backend": {"type": "kubernetes", "kubernetes": kubernetes},
                **spec,
            },
        }
        for name, doc in (("data.yaml", data), ("training.yaml", training), ("job.yaml", job)):
            (self.docs / name).write_text(yaml.safe_dump(doc, sort_keys=False))
        return self.docs / "job.yaml"

    # --- looking at it -----------------------------------------------------------------------------

    def record(self) -> JobRecord:
        return self.store.get(self.name)

    def wait(self, what: str, predicate: Callable[[JobRecord], bool], timeout_s: float = 300) -> JobRecord:
        try:
            return wait_for(self.store, self.name, predicate, timeout_s)
        except TimeoutError as exc:
            raise AssertionError(f"{what}: {exc}\n{self.diagnostics()}") from None

    def pods(self) -> dict[str, dict[str, Any]]:
        listing = self.api.get(
            resource_path("v1", "pods", self.namespace), labelSelector=f"primus.dev/job={self.name}"
        )
        return {p["metadata"]["name"]: p for p in listing["items"]}

    def wait_pods(self, what: str, predicate: Callable[[dict[str, dict[str, Any]]], bool],
                  timeout_s: float = 300) -> dict[str, dict[str, Any]]:  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not predicate(pods := self.pods()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: pods {sorted(pods)}\n{self.diagnostics()}")
            time.sleep(0.25)  # the API server's state: polled like kubectl get -w would show it
        return pods

    def log(self, pod: str, previous: bool = False) -> str:
        try:
            path = resource_path("v1", "pods", self.namespace, pod) + "/log"
            return self.api.get_text(path, **({"previous": "true"} if previous else {}))
        except KubeError as exc:
            return f"(no log: {exc})"

    def diagnostics(self) -> str:
        lines = []
        for name, pod in sorted(self.pods().items()):
            status = pod.get("status") or {}
            lines.append(
                f"--- {name} {status.get('phase')} {json.dumps(status.get('containerStatuses'))[:600]}"
            )
            lines.append(self.log(name)[-2500:])
            if any(c.get("restartCount") for c in status.get("containerStatuses") or []):
                lines.append(f"--- {name}, the container before its last restart:")
                lines.append(self.log(name, previous=True)[-4000:])
        events = self.api.get(resource_path("v1", "events", self.namespace)).get("items", [])
        lines += [f"event {e.get('reason')}: {e.get('message')}" for e in events[-30:]]
        return "\n".join(lines)

    def client(self) -> ControlClient:
        record = self.wait(
            "the master's control API", lambda r: bool((r.status.get("master") or {}).get("api"))
        )
        return ControlClient(
            record.status["master"]["api"],
            read_token(self.api, self.namespace, self.name),
            ca=read_ca_cert(self.api, self.namespace, self.name),
        )

    def trace(self) -> Path:
        return self.volume / "home" / "jobs" / self.name / "trace.jsonl"

    def trace_runs(self) -> list[tuple[str, int]]:
        """The writer and step of every trace record, in the order written (a restarted trainer is
        another writer, and starts again at its checkpoint's step)."""
        records = []
        for line in self.trace().read_text().splitlines() if self.trace().exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            records.append((entry["run"], entry["step"]))
        return records

    def trace_steps(self) -> list[int]:
        return [step for _, step in self.trace_runs()]

    def produce_stream(self, rows: int, seed: int) -> None:
        from airflow_provider_primus.data.sources.kafka import produce

        table = events(self.history_rows + len(self.stream_ids), rows, T0 + timedelta(hours=self.hours), seed)
        produce(self.bootstrap, self.topic, to_json(table))
        self.stream_ids += table.column("row_id").to_pylist()


def _own(path: Path) -> None:
    os.chown(path, POD_USER, POD_USER)
    path.chmod(0o755)


def make_world(api: KubeApi, root: Path, bootstrap: str, pod_bootstrap: str,
               images: dict[str, str], *, hours: int = HOURS) -> PodJobWorld:  # fmt: skip
    """The namespace (CRD, RBAC), the volume (a hostPath PersistentVolume bound to the job's claim by
    kube-controller-manager), the history on it, a ConfigMap to mount, a topic with records."""
    from kafka.admin import KafkaAdminClient, NewTopic

    namespace = f"real-{uuid.uuid4().hex[:6]}"
    install_crd(api)
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    for doc in rbac(namespace):
        apply(api, doc)
    volume, docs = root / "volume", root / "docs"
    docs.mkdir(parents=True)
    for sub in ("", "home", "store"):
        (volume / sub).mkdir(parents=True, exist_ok=True)
        _own(volume / sub)
    for h in range(hours):
        t = T0 + timedelta(hours=h)
        part = volume / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        pq.write_table(
            events(h * PER_HOUR, PER_HOUR, t, seed=h), part / "part-0.parquet", row_group_size=1000
        )
    pv = f"primus-work-{namespace}"
    api.create("/api/v1/persistentvolumes", {
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "primus-local",
                 "hostPath": {"path": str(volume), "type": "Directory"}},
    })  # fmt: skip
    api.create(resource_path("v1", "persistentvolumeclaims", namespace), {
        "metadata": {"name": "primus-work"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "primus-local", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    extra = {"metadata": {"name": "primus-extra"}, "data": {"note": "mounted on the trainer"}}
    api.create(resource_path("v1", "configmaps", namespace), extra)
    topic = f"clicks-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="primus-tests")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()
    world = PodJobWorld(api, namespace, volume, docs, bootstrap, pod_bootstrap, topic, images, hours=hours)
    claim = resource_path("v1", "persistentvolumeclaims", namespace, "primus-work")
    deadline = time.monotonic() + 60
    while api.get(claim).get("status", {}).get("phase") != "Bound":
        assert time.monotonic() < deadline, f"the claim was not bound: {api.get(claim).get('status')}"
        time.sleep(0.2)  # kube-controller-manager's binder
    return world


# --- the checks --------------------------------------------------------------------------------------


def ended(record: JobRecord) -> bool:
    return record.status.get("phase") in TERMINAL


def step(record: JobRecord) -> int:
    return int((record.status.get("progress") or {}).get("trainer_step") or 0)


def running_pod(pods: dict[str, dict[str, Any]], name: str) -> bool:
    pod = pods.get(name)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return pod["status"].get("phase") == "Running" and all(s.get("ready") for s in statuses)


def cpu_of(record: JobRecord, name: str) -> float:
    return float(executor_state(record, name)["handle"]["allotment"]["cpu"])


def executor_state(record: JobRecord, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (record.status.get("executors") or {}).get(name) or {}
    return found


def assert_exactly_once(world: PodJobWorld) -> None:
    rows = trace_rows(world.trace())
    expected = Counter(range(world.history_rows)) + Counter(world.stream_ids)
    assert len(rows) == sum(expected.values()), f"{len(rows)} rows trained, {sum(expected.values())} planned"
    assert Counter(rows) == expected


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_images(project_images: dict[str, ProjectImage], real_cluster: LocalCluster) -> dict[str, str]:
    """Both images imported into the node's containerd (pods use ``imagePullPolicy: Never``)."""
    for image in project_images.values():
        import_image(real_cluster, image)
    return {target: image.name for target, image in project_images.items()}


@pytest.fixture(scope="module")
def pod_kafka(kafka_dist: KafkaDistribution, real_cluster: LocalCluster, session_tmp: Path) -> Iterator[
        EmbeddedKafka]:  # fmt: skip
    """A broker that also listens on the node's address on the pods' bridge (pods cannot reach this
    machine's loopback), advertising that address to clients that connect there."""
    from tests.conftest import KAFKA_INSTANCE

    assert real_cluster.state is not None
    broker = EmbeddedKafka(kafka_dist, session_tmp / "kafka-pods", instance=KAFKA_INSTANCE,
                           also_on=real_cluster.state.node_ip)  # fmt: skip
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def pod_world(
    real_cluster: LocalCluster,
    node_images: dict[str, str],
    pod_kafka: EmbeddedKafka,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[int], PodJobWorld]]:
    """Makes a world of ``hours`` of history in a namespace of its own."""
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path / "primus-home"))
    assert pod_kafka.state is not None and pod_kafka.state.external_bootstrap_servers is not None
    bootstrap, pod_bootstrap = pod_kafka.state.bootstrap_servers, pod_kafka.state.external_bootstrap_servers
    with real_cluster.cluster_state.api_client() as client:
        api = KubeApi(client)
        yield lambda hours: make_world(api, tmp_path, bootstrap, pod_bootstrap, node_images, hours=hours)


# --- the test ------------------------------------------------------------------------------------------


def test_a_job_in_real_pods_survives_its_pods_deaths_and_trains_exactly_once(
    pod_world: Callable[[int], PodJobWorld],
) -> None:
    run_fault_job(pod_world(HOURS))


def test_the_airflow_operator_runs_a_job_in_pods_and_the_sensor_follows_it(
    pod_world: Callable[[int], PodJobWorld], real_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PrimusSubmitJobOperator(backend="kubernetes") through a cncf-kubernetes connection submits
    the job and starts its master pod; it waits for the end, and PrimusJobSensor, through a
    ``primus`` connection for that namespace, follows it to ``Succeeded``."""
    from airflow_provider_primus.operators.job import PrimusSubmitJobOperator
    from airflow_provider_primus.sensors.job import PrimusJobSensor
    from tests.operators.test_job_operators import context

    world = pod_world(1)
    kubeconfig = real_cluster.cluster_state.kubeconfig(ADMIN)
    kube_conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
    extra = {"backend": "kubernetes", "namespace": world.namespace, "kubernetes_conn_id": "primus_pods_kube"}
    primus_conn = {"conn_type": "primus", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_PODS_KUBE", json.dumps(kube_conn))
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_PODS", json.dumps(primus_conn))
    world.produce_stream(200, seed=3)
    op = PrimusSubmitJobOperator(
        task_id="train", job=str(world.job()), name=world.name, backend="kubernetes",
        namespace=world.namespace, kubernetes_conn_id="primus_pods_kube", deferrable=False,
        poll_interval=1.0, report_every_s=30.0,
    )  # fmt: skip
    result = op.execute(context())
    assert result["phase"] == "Succeeded", f"{result}\n{world.diagnostics()}"
    master = world.api.get(resource_path("v1", "pods", world.namespace, f"{world.name}-master"))
    assert master["metadata"]["ownerReferences"][0]["kind"] == "PrimusJob"  # the operator's master pod
    sensor = PrimusJobSensor(task_id="done", job=world.name, primus_conn_id="primus_pods", poke_interval=1.0)
    followed = sensor.execute(context())
    assert followed["phase"] == "Succeeded" and followed["job"] == world.name
    assert_exactly_once(world)


def test_a_users_model_trains_in_pods_from_an_image_built_on_the_trainer_image(
    pod_world: Callable[[int], PodJobWorld],
    real_cluster: LocalCluster,
    project_images: dict[str, ProjectImage],
    tmp_path: Path,
) -> None:
    """The way docs/models.md gives a Kubernetes job its model: the example's Dockerfile FROM the
    project's trainer image with the example's wheel installed, named in images.trainer. The model
    is not importable where the job is submitted, so the trainer's first step is its check."""
    project = example_project(tmp_path / "example")
    build_wheel(project)
    name = f"primus.dev/two-tower-trainer:{uuid.uuid4().hex[:8]}"
    archive = build_on(project_images[TRAINER], project, name, tmp_path / "two-tower.tar")
    import_image(real_cluster, ProjectImage("two-tower", name, archive, ""))
    world = pod_world(1)
    world.images = {**world.images, TRAINER: name}  # this test only: the fixture's dict is shared
    world.produce_stream(200, seed=5)
    path = world.job()
    training = yaml.safe_load((world.docs / "training.yaml").read_text())
    training["apiVersion"] = "primus.dev/v1beta1"  # the model protocol is v1beta1's
    training["spec"]["batch_size"] = 200
    training["spec"]["model"] = {
        "type": "python",
        "entrypoint": "two_tower:build",
        "options": {"tower": [8, 4]},
    }
    (world.docs / "training.yaml").write_text(yaml.safe_dump(training, sort_keys=False))
    submit(path, store=world.store)
    start_master_pod(world.store, world.name)
    done = world.wait("the job ends", ended, timeout_s=900)
    assert done.status["phase"] == "Succeeded", f"{done.status.get('message')}\n{world.diagnostics()}"
    assert world.pods()["job-trainer-0-0"]["spec"]["containers"][0]["image"] == name
    assert_exactly_once(world)


def freeze(pod: dict[str, Any], frozen: bool) -> None:
    """Freeze (or thaw) a pod's container in its cgroup v1 freezer, as ``runc pause`` does: the
    process keeps its sockets and its memory but runs no instruction, so the pass cannot end under a
    fault however fast the trainer is. Returns once the kernel reports the state reached."""
    uid = pod["metadata"]["uid"]
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    root = Path("/sys/fs/cgroup/freezer")
    groups = [g for u in (uid, uid.replace("-", "_")) for g in root.glob(f"**/*pod{u}*/*{container}*")]
    assert len(groups) == 1, f"the freezer cgroup of {pod['metadata']['name']}: {groups}"
    state = groups[0] / "freezer.state"
    want = "FROZEN" if frozen else "THAWED"
    state.write_text(want)
    deadline = time.monotonic() + 30
    while state.read_text().strip() != want:
        assert time.monotonic() < deadline, f"{pod['metadata']['name']} still {state.read_text().strip()}"
        time.sleep(0.05)


def run_fault_job(world: PodJobWorld) -> None:
    world.produce_stream(STREAM_ROWS, seed=7)
    path = world.job()
    job = yaml.safe_load(path.read_text())
    # The trainer is frozen while the master is replaced (below): a silence of its reports that is
    # the test's doing, not a hang for the master to fix.
    job["spec"]["roles"]["trainer"]["failover"] = {"hang_timeout_s": 900.0}
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    submit(path, store=world.store)
    master = start_master_pod(world.store, world.name)
    assert master["spec"]["serviceAccountName"] == "primus-master"
    first = world.wait("the trainer trains", lambda r: step(r) > 0, timeout_s=600)
    assert first.status["phase"] == "Running", first.status
    pods = world.pods()
    assert sorted(pods) == ["job-data-0-0", "job-data-1-0", "job-master", "job-trainer-0-0"]
    trainer_spec = pods["job-trainer-0-0"]["spec"]
    assert trainer_spec["containers"][0]["image"] == world.images[TRAINER]
    assert pods["job-data-0-0"]["spec"]["containers"][0]["image"] == world.images[DATA]
    kinds = {v["name"]: next(k for k in v if k != "name") for v in trainer_spec["volumes"]}
    assert {kinds["v-work"], kinds["v-scratch"], kinds["v-extra"]} == {
        "persistentVolumeClaim", "emptyDir", "configMap"}  # fmt: skip
    ips = {n: p["status"]["podIP"] for n, p in pods.items()}
    assert all(ip.startswith("10.88.") for ip in ips.values()), ips
    assert ips["job-master"] in first.status["master"]["api"]

    # A checkpoint exists; then the trainer is slowed (an in-place resize, which the kubelet applies)
    # and frozen, so that every fault lands mid-pass: at 50m a small model still steps tens of times
    # a second, and the pass could end before the master's successor is up.
    world.wait("a checkpoint", lambda r: step(r) > 60)
    world.client().resize("trainer-0", cpu=0.05)
    world.wait("the trainer slowed", lambda r: cpu_of(r, "trainer-0") == 0.05)
    freeze(world.pods()["job-trainer-0-0"], True)

    # (a) A data executor pod force-deleted (grace 0): its leases go back; a new incarnation serves.
    world.api.delete(resource_path("v1", "pods", world.namespace, "job-data-0-0"), {"gracePeriodSeconds": 0})
    world.wait_pods("data-0's new incarnation", lambda p: running_pod(p, "job-data-0-1"))
    world.wait("data-0 running again", lambda r: executor_state(r, "data-0").get("state") == "running")

    # (c) The master pod deleted; its successor (started as the Airflow hook starts it) re-adopts the
    # running pods — the same pods, nothing launched twice — and tells them its new address.
    live = {n: e["handle"]["ref"]["pod"] for n, e in world.record().status["executors"].items()
            if e["state"] == "running"}  # fmt: skip
    before = {pod: world.pods()[pod]["metadata"]["uid"] for pod in live.values()}
    launched = sum(1 for e in world.store.events(world.name) if e.type == "ExecutorLaunched")
    old_master = pods["job-master"]["metadata"]["uid"]
    world.api.delete(resource_path("v1", "pods", world.namespace, "job-master"))
    world.wait_pods("the master pod gone", lambda p: "job-master" not in p, timeout_s=120)
    assert not ended(world.record())
    start_master_pod(world.store, world.name)
    world.wait("the successor adopts", lambda _: sum(
        1 for e in world.store.events(world.name) if e.type == "ExecutorAdopted") >= len(live))  # fmt: skip
    freeze(world.pods()["job-trainer-0-0"], False)
    pods = world.wait_pods("the successor's pod", lambda p: running_pod(p, "job-master"))
    assert pods["job-master"]["metadata"]["uid"] != old_master
    successor = pods["job-master"]["status"]["podIP"]
    world.wait(
        "the successor's control API",
        lambda r: successor in ((r.status.get("master") or {}).get("api") or ""),
    )
    adopted = {pod: pods[pod]["metadata"]["uid"] for pod in live.values() if pod in pods}
    assert adopted == before, (
        f"the same pods, adopted: {sorted(pods)} for {live}\n"
        + "\n".join(f"event {e.type}: {e.message}" for e in world.store.events(world.name))
        + f"\n{world.diagnostics()}"
    )
    for pod in live.values():  # each told the new dispatcher's address (read from a downward API file)
        assert pods[pod]["metadata"]["annotations"]["primus.dev/dispatcher"].startswith(
            f"grpc+tls://{successor}:"  # TLS: on by default on Kubernetes
        )

    # (b) The trainer's CPU back, then its pod killed; its successor resumes from the last checkpoint
    # (on the volume) and the pass goes on to the end.
    world.client().resize("trainer-0", cpu=0.9)
    world.wait("the trainer's CPU back", lambda r: cpu_of(r, "trainer-0") == 0.9)
    killed_at = max(world.trace_steps())
    assert not ended(world.record()), "the pass must still run when its trainer is killed"
    world.api.delete(
        resource_path("v1", "pods", world.namespace, "job-trainer-0-0"), {"gracePeriodSeconds": 0}
    )
    world.wait_pods("the trainer's new incarnation", lambda p: "job-trainer-0-1" in p)

    done = world.wait("the job ends", ended, timeout_s=900)
    assert done.status["phase"] == "Succeeded", f"{done.status.get('message')}\n{world.diagnostics()}"
    events = [e.type for e in world.store.events(world.name)]
    # Launched: 2 data + 1 trainer, then data-0 and trainer-0 again; none by the successor master.
    assert events.count("ExecutorLaunched") == launched + 1 == 5, events
    records = world.trace_runs()
    back = next(i for i in range(1, len(records)) if records[i][0] != records[i - 1][0])
    # The killed incarnation trains on until the kubelet stops it, so its last step is the trace's
    # before the resume (at least the step read when the kill was sent); its successor resumes from
    # a checkpoint at or before that step, never from scratch.
    last, resumed = records[back - 1][1], records[back][1]
    assert last >= killed_at, f"the trace went back before the kill: {last} < {killed_at}"
    assert 50 < resumed <= last + 1, f"the trainer resumed at step {resumed}, its last step was {last}"
    assert_exactly_once(world)


# --- two trainers, the object store, TLS ---------------------------------------------------------------


@pytest.fixture
def pods_s3(s3_server: S3State, real_cluster: LocalCluster) -> Iterator[str]:
    """The session's S3 server as pods reach it: a relay on the node's address on the pods' bridge
    (the server itself listens on loopback only, which a pod cannot reach)."""
    assert real_cluster.state is not None
    node_ip = real_cluster.state.node_ip
    with socket.socket() as probe:
        probe.bind((node_ip, 0))
        port = probe.getsockname()[1]
    relay = TcpRelay((node_ip, port), ("127.0.0.1", s3_server.s3_port)).start()
    try:
        yield f"http://{node_ip}:{port}"
    finally:
        relay.stop()


def move_to_object_store(world: PodJobWorld, state: S3State, endpoint: str) -> str:
    """The world's history uploaded to a fresh prefix of the session bucket, and the job's history
    source and checkpoints pointed there, with the key pair in a Kubernetes Secret of the namespace
    (nothing of it in a document). Returns the prefix."""
    root = new_bucket(state, "pods")
    fs = admin_fs(state)
    store = world.volume / "store"
    for part in sorted(store.rglob("*.parquet")):
        with fs.open_output_stream(f"{root}/store/{part.relative_to(store)}") as out:
            out.write(part.read_bytes())
    secret = {
        "metadata": {"name": "lake-keys"},
        "stringData": {"access_key_id": state.access_key, "secret_access_key": state.secret_key},
    }
    world.api.create(resource_path("v1", "secrets", world.namespace), secret)
    world.storage = {
        "endpoint": endpoint,
        "region": state.region,
        "addressing": "path",
        "credentials": {"secret": {"name": "lake-keys"}},
    }
    world.object_root = root
    return root


def test_two_trainers_in_pods_read_and_checkpoint_on_the_object_store_over_tls(
    pod_world: Callable[[int], PodJobWorld], s3_server: S3State, pods_s3: str
) -> None:
    """The full job on the object store and a trainer group in pods: the history read
    from S3 by the master (planning) and the data executor pods, checkpoints written there by the
    trainers, every port on the job's TLS; one trainer pod of two killed mid-run, the group restarted
    from its checkpoint in S3, every row and record trained exactly once."""
    world = pod_world(3)
    root = move_to_object_store(world, s3_server, pods_s3)
    world.trainers = 2
    world.produce_stream(400, seed=11)
    submit(world.job(), store=world.store)
    start_master_pod(world.store, world.name)
    world.wait("the group trains", lambda r: step(r) > 0, timeout_s=600)
    record = world.record()
    assert record.status["master"]["api"].startswith("https://")
    pods = world.wait_pods(
        "both trainers", lambda p: running_pod(p, "job-trainer-0-0") and running_pod(p, "job-trainer-1-0")
    )
    for pod in ("job-trainer-0-0", "job-trainer-1-0", "job-data-0-0"):
        env = {e["name"]: e for e in pods[pod]["spec"]["containers"][0]["env"]}
        assert (
            env["PRIMUS_S3_SECRET_LAKE_KEYS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"]
            == "lake-keys"
        )
        assert s3_server.secret_key not in json.dumps(pods[pod])
        annotation = pods[pod]["metadata"].get("annotations", {}).get("primus.dev/dispatcher", "")
        assert annotation.startswith("grpc+tls://"), annotation

    # A checkpoint in the bucket, then the group slowed so that the kill lands mid-pass.
    fs = admin_fs(s3_server)
    world.wait("a checkpoint in the bucket", lambda _: bool(checkpoint_objects(fs, root)), timeout_s=300)
    world.client().resize("trainer-0", cpu=0.05)
    world.wait("the group slowed", lambda r: cpu_of(r, "trainer-0") == 0.05)
    assert not ended(world.record())
    world.api.delete(
        resource_path("v1", "pods", world.namespace, "job-trainer-1-0"), {"gracePeriodSeconds": 0}
    )
    world.wait("the group restarted", lambda r: (r.status.get("master") or {}).get("trainer_generation") == 2)
    world.client().resize("trainer-0", cpu=0.4)
    done = world.wait("the job ends", ended, timeout_s=900)
    assert done.status["phase"] == "Succeeded", f"{done.status.get('message')}\n{world.diagnostics()}"
    assert not (world.volume / "home" / "jobs" / world.name / "checkpoints").exists()
    rows = trace_rows_of_group(world.volume / "home", world.name)
    expected = Counter(range(world.history_rows)) + Counter(world.stream_ids)
    assert len(rows) == sum(expected.values()), f"{len(rows)} rows trained, {sum(expected.values())} planned"
    assert Counter(rows) == expected


def checkpoint_objects(fs: pafs.S3FileSystem, root: str) -> list[str]:
    selector = pafs.FileSelector(f"{root}/checkpoints", allow_not_found=True, recursive=True)
    return [i.path for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
