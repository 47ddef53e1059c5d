"""Hadoop's own YARN mini cluster (ResourceManager, NodeManagers, HDFS) on loopback: ``cluster``."""

from airflow_provider_primus.embedded.yarn.cluster import (
    MiniYarnCluster,
    YarnClusterError,
    running,
    start,
    stop,
)

__all__ = ["MiniYarnCluster", "YarnClusterError", "running", "start", "stop"]
