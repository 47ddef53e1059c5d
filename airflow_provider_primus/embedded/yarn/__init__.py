"""Hadoop's own YARN mini cluster (ResourceManager, NodeManagers, HDFS) on loopback: ``cluster``; its
launcher (``java/``, a Maven module of its own) and Hadoop's jars are built by ``build``."""

from airflow_provider_primus.embedded.yarn.cluster import (
    MiniYarnCluster,
    YarnClusterError,
    running,
    start,
    stop,
)

__all__ = ["MiniYarnCluster", "YarnClusterError", "running", "start", "stop"]
