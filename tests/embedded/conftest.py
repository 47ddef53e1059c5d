"""The real node for ``realnode`` tests: one for this package's modules that run pods on it, one of
its own for the module that tests the node's life (test_real_node.py); skipped with the exact reason
on a machine that cannot run one (no root, no writable cgroups, no containerd, no Go)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_primus.embedded.kube import host
from airflow_provider_primus.embedded.kube.binaries import GoNotFoundError
from airflow_provider_primus.embedded.kube.local import LocalCluster
from airflow_provider_primus.embedded.kube.node import NodeUnavailableError, node_lock_free
from airflow_provider_primus.embedded.kube.project_image import (
    ImageBuilderUnavailableError,
    ProjectImage,
    builder_missing,
    ensure_project_images,
)


def real_node_unavailable() -> str | None:
    """Why this machine cannot run a real node now, or None."""
    missing = host.missing_prerequisites()
    if missing:
        return "a real Kubernetes node needs: " + "; ".join(missing)
    if not node_lock_free():
        return "another real node already runs on this machine (`primus cluster down` stops it)"
    return None


def start_real_cluster(workdir: Path) -> LocalCluster:
    """The control plane plus a Ready real node, started by the same code as `primus cluster up`,
    or the test skipped with the reason this machine cannot run one."""
    reason = real_node_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = LocalCluster(workdir)
    try:
        cluster.start()
    except GoNotFoundError as exc:
        pytest.skip(f"go not installed: {exc}")
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    return cluster


_SHARED: list[LocalCluster] = []
_IMPORTED: set[tuple[int, Path]] = set()  # (cluster, archive) pairs already in that node's containerd


@pytest.fixture(scope="package")
def real_cluster(session_tmp: Path) -> Iterator[LocalCluster]:
    """One node for the modules that only run pods on it (the images', the jobs'): a start and the
    trainer image's import (a ~3 GB archive) are minutes on two cores, paid once. A module that
    stops or replaces the node (test_real_node.py) first ends this one: the machine has room for one."""
    cluster = start_real_cluster(session_tmp / "realnode")
    _SHARED.append(cluster)
    try:
        yield cluster
    finally:
        _SHARED.remove(cluster)
        cluster.stop()


def stop_shared_node() -> None:
    """End the package's shared node (idempotent), for a module that needs the machine's one node."""
    for cluster in _SHARED:
        cluster.stop()


@pytest.fixture(scope="module")
def project_images() -> dict[str, ProjectImage]:
    """The data and trainer images of this checkout (built, or found in the cache by content hash)."""
    missing = builder_missing()
    if missing:
        pytest.skip("the project's images need: " + "; ".join(missing))
    try:
        return ensure_project_images()
    except ImageBuilderUnavailableError as exc:
        pytest.skip(str(exc))


def import_image(cluster: LocalCluster, image: ProjectImage) -> float:
    """Import an image's archive into the node's containerd (as `primus cluster` users do), once per
    node; seconds (0 when that node has it already)."""
    assert cluster.node is not None
    key = (id(cluster.node), image.archive)
    if key in _IMPORTED:
        return 0.0
    started = time.monotonic()
    # The trainer's archive is ~3 GB of gzip layers: unpacking it takes minutes on 2 busy cores.
    cluster.node.containerd.ctr("images", "import", str(image.archive), timeout_s=900)
    _IMPORTED.add(key)
    return time.monotonic() - started
