"""The embedded control plane is a real Kubernetes: its API server, admission, RBAC and scheduler
decide, and kwok plays the kubelet's part of the pod lifecycle (run, exit, resize, delete)."""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from airflow_provider_primus.embedded.kube.binaries import (
    KUBE_VERSION,
    GoNotFoundError,
    KubeBinaries,
    KubeBinariesError,
    build_stamp,
    ensure_binaries,
)
from airflow_provider_primus.embedded.kube.cluster import (
    EXIT_CODE_ANNOTATION,
    POD_CIDR,
    RUN_DURATION_ANNOTATION,
    KubeCluster,
)
from tests.conftest import KUBE_NODES


def _pod(
    name: str, *, annotations: dict[str, str] | None = None, cpu: str = "500m", cpu_limit: str = "2"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "primus/executor:test",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": "1Gi"},
                        "limits": {"cpu": cpu_limit, "memory": "1Gi"},
                    },
                }
            ],
        },
    }


def _ready(pod: Any) -> bool:
    return pod is not None and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


@pytest.fixture(scope="module")
def core(kube_cluster: KubeCluster) -> Iterator[client.CoreV1Api]:
    with kube_cluster.api_client() as api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def namespace(kube_cluster: KubeCluster) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube_cluster.create_namespace(name)
    return name


def test_cached_binaries_are_a_stamp_check(kube_binaries: KubeBinaries) -> None:
    started = time.monotonic()
    again = ensure_binaries()
    assert time.monotonic() - started < 0.5
    assert again == kube_binaries
    assert all(path.is_file() for path in again.all())


def test_missing_go_is_its_own_error(tmp_path: Path) -> None:
    with pytest.raises(GoNotFoundError, match="needs Go"):
        ensure_binaries(tmp_path, go="")
    assert build_stamp("v1.35.4") != build_stamp("v1.35.5")


def test_a_failing_build_fails_with_the_tail_of_gos_output(tmp_path: Path) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho 'go: k8s.io/kubernetes@v1.35.4: missing go.sum entry' >&2\nexit 1\n")
    fake_go.chmod(0o755)
    with pytest.raises(KubeBinariesError, match=r"missing go\.sum entry") as failed:
        ensure_binaries(tmp_path / "cache", go=str(fake_go))
    assert not isinstance(failed.value, GoNotFoundError)  # so the fixture fails instead of skipping
    assert not (tmp_path / "cache" / f"kube-{KUBE_VERSION}" / "bin").exists()


def test_api_server_reports_the_pinned_release(kube_cluster: KubeCluster) -> None:
    with kube_cluster.api_client() as api_client:
        info = client.VersionApi(api_client).get_code()
    assert info.git_version == KUBE_VERSION == "v1.35.4"
    assert (info.major, info.minor) == ("1", "35")


def test_kubeconfig_verifies_tls_against_the_cluster_ca(kube_cluster: KubeCluster) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kube_cluster.kubeconfig()), client_configuration=cfg)
    assert cfg.verify_ssl and cfg.ssl_ca_cert
    with client.ApiClient(cfg) as api_client:
        nodes = client.CoreV1Api(api_client).list_node(label_selector="type=kwok").items
    assert len(nodes) >= KUBE_NODES
    assert all(_ready_node(node) for node in nodes)


def _ready_node(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_scheduler_places_a_pod_and_kwok_runs_it(
    kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("runs"))
    pod = kube_cluster.wait_for_pod(namespace, "runs", _ready, timeout_s=20)
    assert pod.status.phase == "Running"
    assert pod.spec.node_name.startswith("kwok-node-")  # chosen by kube-scheduler, not by us
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["PodScheduled"] == conditions["ContainersReady"] == "True"
    (status,) = pod.status.container_statuses
    assert status.ready and status.state.running is not None
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_CIDR)
    assert pod.status.host_ip


def test_scheduler_leaves_a_pod_that_fits_nowhere_pending(
    kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("too-big", cpu="64", cpu_limit="64"))  # nodes have 32 CPUs

    def unschedulable(pod: Any) -> bool:
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or []
        )

    pod = kube_cluster.wait_for_pod(namespace, "too-big", unschedulable, timeout_s=20)
    assert pod.spec.node_name is None and pod.status.phase == "Pending"


@pytest.mark.parametrize(("code", "phase", "reason"), [(3, "Failed", "Error"), (0, "Succeeded", "Completed")])
def test_annotated_pod_exits_with_its_code(
    kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str, *, code: int, phase: str, reason: str
) -> None:
    name = f"exits-{code}"
    started = time.monotonic()
    annotations = {EXIT_CODE_ANNOTATION: str(code), RUN_DURATION_ANNOTATION: "300ms"}
    core.create_namespaced_pod(namespace, _pod(name, annotations=annotations))
    pod = kube_cluster.wait_for_pod(
        namespace, name, lambda p: p.status.phase in ("Succeeded", "Failed"), timeout_s=20
    )
    assert time.monotonic() - started >= 0.3  # ran for its run-duration first
    assert pod.status.phase == phase
    (status,) = pod.status.container_statuses
    assert status.state.terminated.exit_code == code
    assert status.state.terminated.reason == reason
    assert not status.ready


def test_deleting_a_pod_removes_it(kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, _pod("deleted"))
    kube_cluster.wait_for_pod(namespace, "deleted", _ready, timeout_s=20)
    core.delete_namespaced_pod("deleted", namespace)  # graceful: kwok plays the kubelet's final delete
    assert kube_cluster.wait_for_pod(namespace, "deleted", lambda p: p is None, timeout_s=20) is None


def test_in_place_resize_keeps_the_pod(
    kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("resized"))
    before = kube_cluster.wait_for_pod(namespace, "resized", _ready, timeout_s=20)
    patch = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1500m"}}}]}}
    answer = core.patch_namespaced_pod_resize("resized", namespace, patch)
    assert answer.spec.containers[0].resources.requests["cpu"] == "1500m"
    assert answer.metadata.generation > before.metadata.generation

    after = kube_cluster.wait_for_pod(
        namespace, "resized", lambda p: p.status.observed_generation == p.metadata.generation, timeout_s=20
    )
    assert after.metadata.uid == before.metadata.uid  # the same pod, not a replacement
    assert after.spec.node_name == before.spec.node_name
    assert after.status.container_statuses[0].resources.requests["cpu"] == "1500m"
    assert after.status.container_statuses[0].state.running is not None


def test_rbac_decides_for_static_token_users(
    kube_cluster: KubeCluster, core: client.CoreV1Api, namespace: str
) -> None:
    with kube_cluster.api_client("primus-no-rbac") as api_client, pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).list_namespaced_pod(namespace)
    assert refused.value.status == 403

    rbac = client.RbacAuthorizationV1Api(core.api_client)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pod-readers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "primus:pod-readers"}
            ],
        },
    )
    deadline = time.monotonic() + 10
    with kube_cluster.api_client("primus-pod-reader") as api_client:
        reader = client.CoreV1Api(api_client)
        while True:  # the authorizer sees the binding once its informer has it (milliseconds)
            try:
                reader.list_namespaced_pod(namespace)
                break
            except ApiException as exc:
                assert exc.status == 403 and time.monotonic() < deadline
                time.sleep(0.05)
        with pytest.raises(ApiException) as other_ns:
            reader.list_namespaced_pod("default")
    assert other_ns.value.status == 403
