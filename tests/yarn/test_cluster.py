"""The mini cluster is a real YARN and HDFS: the ResourceManager answers, a NodeManager registered
with the resources it was given, HDFS takes a file and gives it back. Its launcher is a module of its
own: the ApplicationMaster's jar, which every submission ships, carries none of it."""

from __future__ import annotations

import getpass
import os
import zipfile

import pytest

from airflow_provider_primus.embedded.yarn import MiniYarnCluster, running
from airflow_provider_primus.embedded.yarn.build import MiniClusterBuild
from airflow_provider_primus.hadoop.webhdfs import WebHdfs
from airflow_provider_primus.yarn.rest import ResourceManager

pytestmark = pytest.mark.yarn


def test_the_application_master_jar_carries_no_test_cluster(yarn_build: MiniClusterBuild) -> None:
    am = set(zipfile.ZipFile(yarn_build.am_jar).namelist())
    launcher = set(zipfile.ZipFile(yarn_build.jar).namelist())
    assert "dev/primus/yarn/ApplicationMaster.class" in am
    assert not {"dev/primus/yarn/MiniCluster.class", "dev/primus/yarn/Kerberos.class"} & am
    assert {"dev/primus/yarn/MiniCluster.class", "dev/primus/yarn/Kerberos.class"} <= launcher
    # The helpers they share are the AM's, on the launcher's classpath beside it, not copied.
    assert "dev/primus/yarn/Json.class" in am and "dev/primus/yarn/Json.class" not in launcher
    assert yarn_build.classpath().split(os.pathsep)[:2] == [str(yarn_build.jar), str(yarn_build.am_jar)]
    # Hadoop's jars: the test cluster's classpath, not part of a submission.
    assert not any(name.startswith("org/apache/hadoop/") for name in am)


def test_resource_manager_answers_and_a_node_manager_registered(yarn_cluster: MiniYarnCluster) -> None:
    rm = ResourceManager(yarn_cluster.rm_url, getpass.getuser())
    try:
        assert rm.info()["state"] == "STARTED"
        nodes = rm.nodes()
    finally:
        rm.close()
    assert [n["state"] for n in nodes] == ["RUNNING"]
    assert nodes[0]["availMemoryMB"] + nodes[0]["usedMemoryMB"] == 4096
    assert {n["id"] for n in nodes} == {n["id"] for n in yarn_cluster.node_managers}
    # The configuration a client reads names the same ResourceManager.
    assert (yarn_cluster.conf_dir / "yarn-site.xml").is_file()
    assert running(yarn_cluster.workdir) is not None


def test_hdfs_is_writable(yarn_cluster: MiniYarnCluster) -> None:
    assert yarn_cluster.webhdfs_url is not None
    fs = WebHdfs(yarn_cluster.webhdfs_url, getpass.getuser())
    try:
        fs.mkdirs("/tmp/primus-test-cluster")
        status = fs.create("/tmp/primus-test-cluster/hello.txt", b"hello yarn")
        assert status.length == len(b"hello yarn")
        assert fs.read("/tmp/primus-test-cluster/hello.txt") == b"hello yarn"
        assert "hello.txt" in fs.list("/tmp/primus-test-cluster")
        assert fs.delete("/tmp/primus-test-cluster")
    finally:
        fs.close()
