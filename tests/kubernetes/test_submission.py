"""The master on Kubernetes, end to end against a real apiserver, scheduler and kwok: submission
creates the PrimusJob, its token Secret and documents ConfigMap; the master — a real ``primus
master`` process authenticated as the shipped RBAC Role allows, nothing more — launches pods,
scales them out and in (control API and the ``scale`` subresource), resizes one in place, and after
a ``kill -9`` a new master re-adopts every pod without a duplicate. Deleting the job stops it."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_primus.contracts.crd import API_VERSION, PLURAL
from airflow_provider_primus.kubernetes.client import resource_path
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import read_job_ca, read_token, submit, wait_for
from airflow_provider_primus.master.store import JobRecord
from tests.kube_env import MASTER_USER, SUBMITTER_USER, KubeEnv
from tests.master.conftest import JobWorld

MIB = 2**20


class KubeJob:
    def __init__(self, kube: KubeEnv, world: JobWorld, name: str = "job") -> None:
        self.kube, self.world, self.name = kube, world, name
        self.store = KubeJobStore(kube.api(SUBMITTER_USER), kube.namespace)
        self.admin = kube.api()
        self.masters: list[subprocess.Popen[bytes]] = []

    def submit(self, **spec: Any) -> JobRecord:
        spec.setdefault("backend", {"type": "kubernetes", "kubernetes": {"namespace": self.kube.namespace}})
        return submit(self.world.job(self.name, **spec), store=self.store)

    def start_master(self, user: str = MASTER_USER) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "airflow_provider_primus.cli.main", "master", self.name]
        command += ["--namespace", self.kube.namespace, "--kubeconfig", str(self.kube.kubeconfig(user))]
        log = open(self.world.root / f"master-{len(self.masters)}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        self.masters.append(proc)
        return proc

    def wait(self, predicate: Callable[[JobRecord], bool], timeout_s: float = 60) -> JobRecord:
        try:
            return wait_for(self.store, self.name, predicate, timeout_s)
        except TimeoutError:
            logs = "".join(p.read_text()[-3000:] for p in self.world.root.glob("master-*.log"))
            raise AssertionError(f"timed out; master logs:\n{logs}") from None

    def pods(self) -> dict[str, dict[str, Any]]:
        listing = self.admin.get(
            resource_path("v1", "pods", self.kube.namespace), labelSelector=f"primus.dev/job={self.name}"
        )
        return {p["metadata"]["name"]: p for p in listing["items"]}

    def running_pods(self) -> dict[str, dict[str, Any]]:
        return {n: p for n, p in self.pods().items() if p.get("status", {}).get("phase") == "Running"}

    def wait_pods(
        self, predicate: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            pods = self.pods()
            if predicate(pods):
                return pods
            if time.monotonic() > deadline:
                raise AssertionError(f"pods: {sorted(pods)}")
            time.sleep(0.2)

    def client(self) -> ControlClient:
        record = self.wait(lambda r: bool((r.status.get("master") or {}).get("api")))
        return ControlClient(record.status["master"]["api"], read_token(self.name), ca=read_job_ca(self.name))

    def close(self) -> None:
        for proc in self.masters:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            proc.wait()


@pytest.fixture
def kube_job(kube: KubeEnv, job_world: JobWorld) -> Iterator[KubeJob]:
    job = KubeJob(kube, job_world)
    try:
        yield job
    finally:
        job.close()


def running(role: str, count: int) -> Callable[[JobRecord], bool]:
    def check(record: JobRecord) -> bool:
        ex = record.status.get("executors") or {}
        return sum(1 for e in ex.values() if e["state"] == "running" and e["handle"]["role"] == role) == count

    return check


def phase_running(pods: dict[str, dict[str, Any]], prefix: str, count: int) -> bool:
    names = [
        n for n, p in pods.items() if n.startswith(prefix) and p.get("status", {}).get("phase") == "Running"
    ]
    return len(names) == count


def test_submit_creates_the_resource_secret_and_documents(kube_job: KubeJob, kube: KubeEnv) -> None:
    record = kube_job.submit()
    obj = kube.api().get(resource_path(API_VERSION, PLURAL, kube.namespace, "job"))
    assert obj["spec"]["data"] == str(kube_job.world.data_path)
    owner = [{"kind": "PrimusJob", "name": "job", "uid": obj["metadata"]["uid"]}]
    secret = kube.api().get(resource_path("v1", "secrets", kube.namespace, "job-token"))
    tls = kube.api().get(resource_path("v1", "secrets", kube.namespace, "job-tls"))
    documents = kube.api().get(resource_path("v1", "configmaps", kube.namespace, "job-documents"))
    policies = resource_path("networking.k8s.io/v1", "networkpolicies", kube.namespace)
    listed = kube.api().get(policies, labelSelector="primus.dev/job=job")["items"]
    assert sorted(p["metadata"]["name"] for p in listed) == ["job-control", "job-isolation"]
    isolation, control = (kube.api().get(f"{policies}/job-{n}") for n in ("isolation", "control"))
    for made in (secret, tls, documents, isolation, control):
        refs = [{k: r[k] for k in ("kind", "name", "uid")} for r in made["metadata"]["ownerReferences"]]
        assert refs == owner
    # TLS is on by default on Kubernetes: the job's CA in its Secret is the one written locally.
    assert base64.b64decode(tls["data"]["ca.crt"]) == read_job_ca("job")
    assert "ca.key" in tls["data"]
    # Only the job's own pods reach the job's pods; its master also takes calls from control clients.
    own = {"primus.dev/job": "job"}
    assert isolation["spec"]["podSelector"]["matchLabels"] == own
    assert isolation["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": own}}]}]
    assert control["spec"]["podSelector"]["matchLabels"] == {**own, "primus.dev/role": "master"}
    (peer,) = control["spec"]["ingress"][0]["from"]
    assert peer["podSelector"]["matchLabels"] == {"primus.dev/control-client": "true"}
    assert sorted(documents["data"]) == ["document-0.yaml", "document-1.yaml"]
    assert documents["data"]["document-0.yaml"] == kube_job.world.data_path.read_text()
    assert record.version > 0
    events = kube_job.store.events("job")
    assert [e.type for e in events] == ["Submitted"]


def test_the_master_launches_scales_and_resizes_pods(kube_job: KubeJob, kube: KubeEnv) -> None:
    kube_job.submit(
        roles={
            "data": {
                "replicas": {"min": 1, "initial": 2, "max": 6},
                "resources": {"cpu": "500m", "memory": "256Mi"},
            },
            "trainer": {"resources": {"cpu": 1, "memory": "1Gi"}},
        }
    )
    kube_job.start_master()
    kube_job.wait(lambda r: running("data", 2)(r) and running("trainer", 1)(r))
    pods = kube_job.wait_pods(
        lambda p: phase_running(p, "job-data-", 2) and phase_running(p, "job-trainer-", 1)
    )
    assert sorted(pods) == ["job-data-0-0", "job-data-1-0", "job-trainer-0-0"]
    trainer = pods["job-trainer-0-0"]["spec"]["containers"][0]
    assert trainer["resources"]["limits"] == {"cpu": "1", "memory": str(1024 * MIB)}
    printed = kube.api().get(resource_path(API_VERSION, PLURAL, kube.namespace, "job"))["status"]
    assert printed["phase"] == "Running" and printed["roles"] == "data 2/2, trainer 1/1"

    # Scale out through the control API, then in through the scale subresource (kubectl scale).
    kube_job.client().scale("data", 4)
    kube_job.wait(running("data", 4))
    kube_job.wait_pods(lambda p: phase_running(p, "job-data-", 4))
    scale = resource_path(API_VERSION, PLURAL, kube.namespace, "job") + "/scale"
    assert kube.api().get(scale)["status"]["replicas"] == 4
    kube.api().patch(scale, {"spec": {"replicas": 1}})
    kube_job.wait(running("data", 1))
    pods = kube_job.wait_pods(lambda p: sorted(p) == ["job-data-0-0", "job-trainer-0-0"])

    # Resize in place: same pod, new resources.
    uid = pods["job-data-0-0"]["metadata"]["uid"]
    kube_job.client().resize("data-0", cpu=1.5, memory=512 * MIB)
    record = kube_job.wait(
        lambda r: r.status["executors"]["data-0"]["handle"]["allotment"] == {"cpu": 1.5, "memory": 512 * MIB}
    )
    pod = kube_job.pods()["job-data-0-0"]
    assert pod["metadata"]["uid"] == uid
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1500m", "memory": str(512 * MIB)}
    assert "Resized" in [e.type for e in kube_job.store.events("job")]
    assert record.status["phase"] == "Running"


def test_a_restarted_master_re_adopts_every_pod(kube_job: KubeJob) -> None:
    kube_job.submit(roles={"data": {"replicas": {"min": 3}, "resources": {"cpu": "250m", "memory": "128Mi"}}})
    first = kube_job.start_master()
    kube_job.wait(lambda r: running("data", 3)(r) and running("trainer", 1)(r))
    before = kube_job.wait_pods(
        lambda p: len([1 for q in p.values() if q["status"].get("phase") == "Running"]) == 4
    )
    uids = {n: p["metadata"]["uid"] for n, p in before.items()}
    first.send_signal(signal.SIGKILL)  # no clean-up of any kind
    first.wait()
    kube_job.start_master()
    record = kube_job.wait(
        lambda r: sum(1 for e in kube_job.store.events("job") if e.type == "ExecutorAdopted") == 4
    )
    time.sleep(2.0)  # a few passes of the new master: nothing may be launched or deleted
    after = kube_job.pods()
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == uids
    events = [e.type for e in kube_job.store.events("job")]
    assert events.count("ExecutorLaunched") == 4 and "OrphanDeleted" not in events
    assert record.status["phase"] == "Running"


def test_deleting_the_job_stops_its_master_and_pods(kube_job: KubeJob) -> None:
    kube_job.submit()
    master = kube_job.start_master()
    kube_job.wait(lambda r: running("data", 1)(r) and running("trainer", 1)(r))
    kube_job.wait_pods(lambda p: len(p) == 2)
    kube_job.store.delete("job")
    assert master.wait(timeout=60) == 3  # Stopped
    kube_job.wait_pods(lambda p: not p)
