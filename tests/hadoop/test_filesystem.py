"""``hdfs://`` without a cluster: what is missing is said before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_primus.hadoop.filesystem import HdfsError, open_hdfs
from tests.hadoop.sites import site


def test_an_hdfs_uri_without_libhdfs_or_a_configuration_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(HdfsError, match="set HADOOP_CONF_DIR"):
        open_hdfs("hdfs://nn.example:8020/logs", "source 'history'")
    site(tmp_path / "core-site.xml", **{"fs.defaultFS": "hdfs://other:8020"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    with pytest.raises(HdfsError, match=r"names NameNode nn\.example:8020 but HADOOP_CONF_DIR"):
        open_hdfs("hdfs://nn.example:8020/logs", "source 'history'")
