"""A real node: kubelet + containerd + runc beside the embedded control plane. Pods are containers
whose cgroup limits the kernel applies, and an in-place resize reaches the running container.

The test image (``cgroupprobe``) prints its own CPU quota and memory limit, as read from inside its
container, every 0.2 s; the tests read them from the pod's log through the API server (which reaches
the kubelet at the node's InternalIP). The last two tests stop the module's node and check that
nothing is left on the machine, then do the same through `primus cluster up|status|down`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from airflow_provider_primus.embedded.kube import host
from airflow_provider_primus.embedded.kube.binaries import KUBE_VERSION
from airflow_provider_primus.embedded.kube.images import CGROUP_PROBE
from airflow_provider_primus.embedded.kube.local import LocalCluster
from airflow_provider_primus.kubernetes.client import STRATEGIC_PATCH, KubeApi, KubeError, api_client_from
from airflow_provider_primus.process import PRIMUS_MODULE
from tests.embedded.conftest import start_real_cluster, stop_shared_node

pytestmark = pytest.mark.realnode

T = TypeVar("T")
CONTAINER = "probe"
CPU_PERIOD_US = 100_000
MIB = 1024 * 1024


def await_value(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    """Poll ``probe`` until it returns something; fail with ``what`` and the last value at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f}s")
        time.sleep(0.1)  # the kubelet's and the container's progress: nothing to block on


@dataclass
class ProbePod:
    api: KubeApi
    namespace: str
    name: str
    uid: str
    container_id: str
    ip: str

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def get(self) -> dict[str, Any]:
        return self.api.get(self.path)

    def samples(self) -> list[dict[str, int]]:
        """What the container printed about its own cgroup, newest last."""
        text = self.api.get_text(f"{self.path}/log", container=CONTAINER, tailLines=10)
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def _running(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and "running" in _status(pod).get("state", {})


def _container_cgroup(hierarchy: str, pod_uid: str, container_id: str, cgroup_version: int) -> Path:
    """The container's group as the kubelet (cgroupfs driver) lays it out, seen from the host."""
    root = Path("/sys/fs/cgroup") if cgroup_version == 2 else Path("/sys/fs/cgroup", hierarchy)
    cid = container_id.split("://", 1)[-1]
    return root / "kubepods" / "burstable" / f"pod{pod_uid}" / cid


def _host_limits(pod: ProbePod, cgroup_version: int) -> tuple[int, int]:
    """(CPU quota in µs, memory limit in bytes) of the container's cgroup, read on the host."""
    if cgroup_version == 2:
        group = _container_cgroup("", pod.uid, pod.container_id, 2)
        quota = (group / "cpu.max").read_text().split()[0]
        return int(quota), int((group / "memory.max").read_text())
    cpu = _container_cgroup("cpu", pod.uid, pod.container_id, 1) / "cpu.cfs_quota_us"
    memory = _container_cgroup("memory", pod.uid, pod.container_id, 1) / "memory.limit_in_bytes"
    return int(cpu.read_text()), int(memory.read_text())


@pytest.fixture(scope="module")
def real_cluster(session_tmp: Path) -> Iterator[LocalCluster]:
    """This module's own node (its last tests stop it and start others through the CLI), after the
    package's shared node has ended: the machine has room for one."""
    stop_shared_node()
    cluster = start_real_cluster(session_tmp / "realnode-own")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(real_cluster: LocalCluster) -> Iterator[KubeApi]:
    with real_cluster.cluster_state.api_client() as client:
        yield KubeApi(client)


@pytest.fixture(scope="module")
def probe_pod(real_cluster: LocalCluster, api: KubeApi) -> ProbePod:
    """A Burstable pod (requests 100m/32Mi, limits 200m/64Mi) running the locally built probe image."""
    assert real_cluster.state is not None
    namespace = f"realnode-{uuid.uuid4().hex[:8]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})

    # kube-controller-manager's service-account controller makes it; the admission plugin needs it.
    def service_account() -> bool | None:
        try:
            api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            return True
        except KubeError:
            return None

    await_value("the namespace's default ServiceAccount", service_account, timeout_s=30)
    name = "cgroup-probe"
    body = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Always",  # a restart would show in restartCount, not end the pod
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": real_cluster.state.images[CGROUP_PROBE],
                    "imagePullPolicy": "Never",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": "200m", "memory": "64Mi"},
                    },
                }
            ],
        },
    }
    created_at = time.monotonic()
    api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"

    def running() -> dict[str, Any] | None:
        pod = api.get(path)
        return pod if _running(pod) else None

    pod = await_value("the probe pod Running", running)
    print(f"\npod Running {time.monotonic() - created_at:.2f}s after creation")
    return ProbePod(
        api, namespace, name, pod["metadata"]["uid"], _status(pod)["containerID"], pod["status"]["podIP"]
    )


def test_the_node_is_a_ready_kubelet_of_the_same_release(real_cluster: LocalCluster, api: KubeApi) -> None:
    state = real_cluster.state
    assert state is not None
    node = api.get(f"/api/v1/nodes/{state.node}")
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBE_VERSION
    assert info["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == state.node_ip
    assert ipaddress.ip_address(state.node_ip) in ipaddress.ip_network(state.pod_cidr)
    print(f"\nstart-up: {state.startup_seconds}s, by component: {state.component_seconds}")


def test_a_pod_of_a_local_image_runs_on_the_bridge_with_its_cgroup_limits(
    real_cluster: LocalCluster, probe_pod: ProbePod
) -> None:
    state = real_cluster.state
    assert state is not None
    assert ipaddress.ip_address(probe_pod.ip) in ipaddress.ip_network(state.pod_cidr)
    assert probe_pod.ip != state.node_ip
    # On the host: the container's own group carries the limits (200m = 20 ms per 100 ms period).
    assert _host_limits(probe_pod, state.cgroup_version) == (20_000, 64 * MIB)
    # In the container: the same, as it reads them itself.
    sample = await_value("a sample in the pod's log", lambda: (probe_pod.samples() or [None])[-1])
    assert sample["cgroup"] == state.cgroup_version
    assert (sample["cpu_quota_us"], sample["cpu_period_us"]) == (20_000, CPU_PERIOD_US)
    assert sample["memory_limit_bytes"] == 64 * MIB


def test_an_in_place_resize_reaches_the_running_container(
    real_cluster: LocalCluster, probe_pod: ProbePod
) -> None:
    state = real_cluster.state
    assert state is not None
    before = probe_pod.get()
    patch = {
        "spec": {
            "containers": [{"name": CONTAINER, "resources": {"limits": {"cpu": "400m", "memory": "96Mi"}}}]
        }
    }
    patched_at = time.monotonic()
    probe_pod.api.patch(f"{probe_pod.path}/resize", patch, content_type=STRATEGIC_PATCH)

    def resized_inside() -> dict[str, int] | None:
        for sample in reversed(probe_pod.samples()):
            if sample["cpu_quota_us"] == 40_000 and sample["memory_limit_bytes"] == 96 * MIB:
                return sample
        return None

    await_value("the new limits read from inside the container", resized_inside, timeout_s=30)
    applied_s = time.monotonic() - patched_at
    assert _host_limits(probe_pod, state.cgroup_version) == (40_000, 96 * MIB)

    def status_updated() -> dict[str, Any] | None:
        pod = probe_pod.get()
        limits = _status(pod).get("resources", {}).get("limits", {})
        return pod if limits == {"cpu": "400m", "memory": "96Mi"} else None

    after = await_value("the resize in the pod's status", status_updated, timeout_s=30)
    status_s = time.monotonic() - patched_at
    print(
        f"\nresize applied in the container {applied_s:.2f}s after the PATCH, in the status {status_s:.2f}s"
    )
    # The same pod and the same container, never restarted.
    assert after["metadata"]["uid"] == before["metadata"]["uid"] == probe_pod.uid
    assert _status(after)["containerID"] == _status(before)["containerID"] == probe_pod.container_id
    assert _status(after)["restartCount"] == 0
    assert after["status"]["podIP"] == probe_pod.ip
    pending = [c for c in after["status"].get("conditions", []) if c["type"].startswith("PodResize")]
    assert pending == []


def test_teardown_leaves_nothing_on_the_machine(real_cluster: LocalCluster, probe_pod: ProbePod) -> None:
    """Runs last against the module's node (it stops it): a running pod is on it when it stops."""
    node_state = real_cluster.node.state if real_cluster.node else None
    assert node_state is not None
    real_cluster.stop()
    assert real_cluster.leftovers() == []
    assert host.kubepods_cgroups() == []
    assert not host.bridge_exists(node_state.bridge)
    assert host.mounts_under(real_cluster.workdir) == []
    assert host.processes_mentioning(str(real_cluster.workdir)) == []


def _primus(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", PRIMUS_MODULE, "cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_primus_cluster_up_status_down(session_tmp: Path, real_cluster: LocalCluster) -> None:
    """The CLI a user runs: a detached cluster, a kubeconfig that works, a clean machine after down.
    Depends on ``real_cluster`` only for the skip; the previous test stopped that one."""
    real_cluster.stop()  # idempotent: the machine has room for one node
    workdir = session_tmp / "cli-cluster"
    up = _primus("up", "--workdir", str(workdir))
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        status = _primus("status", "--workdir", str(workdir))
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["node_ready"] is True
        with api_client_from(kubeconfig=state["kubeconfig"]) as client:
            nodes = KubeApi(client).get("/api/v1/nodes")["items"]
        assert [n["metadata"]["name"] for n in nodes] == [state["node"]]
    finally:
        down = _primus("down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == "stopped"
    assert _primus("status", "--workdir", str(workdir)).returncode == 3
    assert host.kubepods_cgroups() == []
    assert host.mounts_under(workdir) == []
    assert host.processes_mentioning(str(workdir)) == []


def test_primus_cluster_down_cleans_up_after_a_killed_supervisor(
    session_tmp: Path, real_cluster: LocalCluster
) -> None:
    """`kill -9` of the process that owns the cluster leaves containers, cgroups, mounts and the
    bridge behind; `primus cluster down` removes them from the node's state file alone."""
    real_cluster.stop()
    workdir = session_tmp / "cli-killed"
    up = _primus("up", "--workdir", str(workdir))
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        with api_client_from(kubeconfig=state["kubeconfig"]) as client:
            api = KubeApi(client)
            accounts = "/api/v1/namespaces/default/serviceaccounts"
            await_value(
                "the default ServiceAccount", lambda: api.get(accounts)["items"] or None, timeout_s=30
            )
            pod = {
                "metadata": {"name": "orphan"},
                "spec": {
                    "containers": [
                        {
                            "name": CONTAINER,
                            "image": state["images"][CGROUP_PROBE],
                            "imagePullPolicy": "Never",
                        }
                    ]
                },
            }
            api.create("/api/v1/namespaces/default/pods", pod)
            await_value(
                "the pod Running",
                lambda: True if _running(api.get("/api/v1/namespaces/default/pods/orphan")) else None,
            )
        os.kill(state["pid"], signal.SIGKILL)
        assert host.kubepods_cgroups() != []  # what the dead supervisor could not clean
    finally:
        down = _primus("down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    assert host.kubepods_cgroups() == []
    assert host.mounts_under(workdir) == []
    assert host.processes_mentioning(str(workdir)) == []
    assert not host.bridge_exists("primus0")
