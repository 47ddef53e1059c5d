"""Hadoop's YARN mini cluster (ResourceManager, one NodeManager, HDFS), started once per session.

Small on purpose (the suite shares a few cores): one NodeManager offering 4 GiB and 4 vcores, which
fits an ApplicationMaster and a handful of 256 MiB executors. Without Java or Maven the YARN tests
skip; a build or start that fails, fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_primus.embedded.yarn import MiniYarnCluster, start
from airflow_provider_primus.embedded.yarn.build import MiniClusterBuild, ensure_mini_cluster_build
from airflow_provider_primus.yarn.build import YarnToolchainMissing
from tests.master.conftest import JobWorld, job_world

__all__ = ["job_world"]  # the same files-only world as the master's tests


@pytest.fixture(scope="session")
def yarn_build() -> MiniClusterBuild:
    try:
        return ensure_mini_cluster_build()
    except YarnToolchainMissing as exc:
        pytest.skip(f"Java or Maven missing, so the YARN mini cluster cannot be built: {exc}")


@pytest.fixture(scope="session")
def yarn_cluster(yarn_build: MiniClusterBuild, session_tmp: Path) -> Iterator[MiniYarnCluster]:
    try:
        cluster = start(
            session_tmp / "yarn", node_managers=1, nm_memory_mb=4096, nm_vcores=4, build=yarn_build
        )
    except YarnToolchainMissing as exc:  # jars cached, but no JDK to run them
        pytest.skip(f"Java missing, so the YARN mini cluster cannot start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def yarn_world(
    job_world: JobWorld, yarn_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch
) -> JobWorld:
    """The files-only job world, its jobs pointed at the mini cluster's configuration."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn_cluster.conf_dir))
    return job_world
