"""What tests and benchmarks create and wait for on the embedded control plane.

Without kube-controller-manager nothing makes a namespace's ``default`` ServiceAccount, and nodes
exist only when created: kwok then manages every node carrying its annotation (Ready, pod
lifecycles). Separate from the processes (``cluster.py``): these change with the objects the
backend's tests need, not with how the components run.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from airflow_provider_primus.embedded.kube.access import ClusterState, KubeClusterError

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
# Simulated nodes get loopback addresses: whatever might ever try to reach one (the apiserver
# proxying to a kubelet) stays on this machine.
NODE_IP_RANGE = ipaddress.ip_network("127.240.0.0/16")


def create_namespace(state: ClusterState, name: str, labels: Mapping[str, str] | None = None) -> None:
    """The namespace and its ``default`` ServiceAccount (which the ServiceAccount admission
    plugin requires of every pod, and which only kube-controller-manager would create)."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    with state.api_client() as api_client:
        core = CoreV1Api(api_client)
        for create, args in (
            (core.create_namespace, ({"metadata": {"name": name, "labels": dict(labels or {})}},)),
            (core.create_namespaced_service_account, (name, {"metadata": {"name": "default"}})),
        ):
            try:
                create(*args)
            except ApiException as exc:
                if exc.status != 409:  # already there: creating is idempotent
                    raise


def add_nodes(
    state: ClusterState,
    indices: Iterator[int],
    count: int,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: int = 110,
    prefix: str = "kwok-node",
    labels: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    kwok_log_tail: Callable[[], str],
) -> list[str]:
    """Create ``count`` kwok-managed nodes (no taints, label ``type=kwok``) and wait until kwok
    has made every one Ready. Names continue a per-cluster sequence: ``<prefix>-<n>``, ``n`` drawn
    from ``indices``; a timeout's message carries ``kwok_log_tail()``."""
    from kubernetes.client import CoreV1Api

    names: list[str] = []
    resources_ = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "1Ti"}
    with state.api_client() as api_client:
        core = CoreV1Api(api_client)
        for _ in range(count):
            index = next(indices)
            name = f"{prefix}-{index}"
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        **dict(labels or {}),
                    },
                },
                "spec": {},
                "status": {
                    "allocatable": resources_,
                    "capacity": resources_,
                    "addresses": [
                        {"type": "InternalIP", "address": str(NODE_IP_RANGE[index + 2])},
                        {"type": "Hostname", "address": name},
                    ],
                },
            }
            core.create_node(body)
            names.append(name)
        wanted = set(names)
        deadline = time.monotonic() + timeout_s
        while True:
            # Raw JSON: building V1Node objects costs ~1 ms each, too slow for 1,000-node benches.
            listed = core.list_node(label_selector="type=kwok", _preload_content=False)
            ready = {
                node["metadata"]["name"]
                for node in json.loads(listed.data)["items"]
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in node.get("status", {}).get("conditions") or []
                )
            }
            if wanted <= ready:
                return names
            if time.monotonic() > deadline:
                raise KubeClusterError(
                    f"nodes not Ready after {timeout_s:.0f}s: {sorted(wanted - ready)}\n{kwok_log_tail()}"
                )
            time.sleep(0.05)  # kwok patches the status within milliseconds


def wait_for_pod(
    state: ClusterState,
    namespace: str,
    name: str,
    condition: Callable[[Any], bool],
    timeout_s: float = 30.0,
) -> Any:
    """Watch one pod until ``condition(pod)`` holds and return that pod (a ``V1Pod``; ``None``
    once deleted, so ``lambda p: p is None`` waits for a deletion)."""
    from kubernetes import watch
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout_s
    last: Any = None
    with state.api_client() as api_client:
        core = CoreV1Api(api_client)
        while True:
            pods = core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
            last = pods.items[0] if pods.items else None
            if condition(last):
                return last
            left = deadline - time.monotonic()
            if left <= 0:
                break
            watcher = watch.Watch()
            try:
                for event in watcher.stream(
                    core.list_namespaced_pod,
                    namespace,
                    field_selector=f"metadata.name={name}",
                    resource_version=pods.metadata.resource_version,
                    timeout_seconds=max(1, int(left)),
                    _request_timeout=left + 5,
                ):
                    if event["type"] == "ERROR":
                        break  # e.g. 410 Gone: list again
                    last = None if event["type"] == "DELETED" else event["object"]
                    if condition(last):
                        return last
                    if time.monotonic() > deadline:
                        break
            except ApiException as exc:
                if exc.status != 410:
                    raise
            finally:
                watcher.stop()
            if time.monotonic() > deadline:
                break
    status = None if last is None else last.status
    raise KubeClusterError(
        f"pod {namespace}/{name}: condition not met within {timeout_s:.0f}s; last: {status}"
    )
