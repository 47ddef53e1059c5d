"""The real node for ``realnode`` tests: one per module that asks for it, skipped with the exact
reason on a machine that cannot run one (no root, no writable cgroups, no containerd, no Go)."""

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


@pytest.fixture(scope="module")
def real_cluster(session_tmp: Path) -> Iterator[LocalCluster]:
    """The control plane plus a Ready real node, started by the same code as `primus cluster up`."""
    reason = real_node_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = LocalCluster(session_tmp / "realnode")
    try:
        cluster.start()
    except GoNotFoundError as exc:
        pytest.skip(f"go not installed: {exc}")
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
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
    """Import an image's archive into the node's containerd (as `primus cluster` users do); seconds."""
    assert cluster.node is not None
    started = time.monotonic()
    # The trainer's archive is ~3 GB of gzip layers: unpacking it takes minutes on 2 busy cores.
    cluster.node.containerd.ctr("images", "import", str(image.archive), timeout_s=900)
    return time.monotonic() - started
