"""Reading a Hadoop configuration directory as Hadoop does: variables expanded, defaults filled,
Kerberos principals' ``_HOST`` resolved, a broken file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_primus.hadoop.config import HadoopConfError, load_conf
from airflow_provider_primus.hadoop.kerberos import short_name
from tests.hadoop.sites import site


def test_configuration_is_read_and_expanded_as_hadoop_does(tmp_path: Path) -> None:
    site(tmp_path / "core-site.xml", **{"fs.defaultFS": "hdfs://nn.example:8020"})
    site(tmp_path / "yarn-site.xml", **{"yarn.resourcemanager.hostname": "rm.example"})
    site(tmp_path / "hdfs-site.xml", **{"dfs.namenode.http-address": "0.0.0.0:9870"})
    conf = load_conf(tmp_path)
    assert conf.rm_url == "http://rm.example:8088"  # ${yarn.resourcemanager.hostname}:8088
    assert conf.fs_default == "hdfs://nn.example:8020"
    assert conf.webhdfs_url == "http://127.0.0.1:9870"  # a wildcard bind is reached on loopback
    assert conf.application_classpath[0] == "$HADOOP_CONF_DIR"  # Hadoop's default list
    assert not conf.kerberos


def test_a_missing_or_broken_configuration_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(HadoopConfError, match="does not exist"):
        load_conf(tmp_path / "nowhere")
    (tmp_path / "yarn-site.xml").write_text("<configuration><property>")
    with pytest.raises(HadoopConfError, match=r"yarn-site\.xml"):
        load_conf(tmp_path)


def test_kerberos_names_come_from_the_configuration_as_hadoop_expands_them(tmp_path: Path) -> None:
    site(tmp_path / "core-site.xml", **{"fs.defaultFS": "hdfs://127.0.0.1:8020"})
    site(
        tmp_path / "yarn-site.xml",
        **{
            "yarn.resourcemanager.address": "RM.example:8032",
            "yarn.resourcemanager.principal": "rm/_HOST@EX.COM",
        },
    )
    conf = load_conf(tmp_path)
    assert conf.rm_principal == "rm/rm.example@EX.COM"  # _HOST: the ResourceManager's host, lower-cased
    assert conf.token_service() == "127.0.0.1:8020"  # the NameNode's RPC ip:port
    site(tmp_path / "core-site.xml", **{"fs.defaultFS": "hdfs://nameservice1"})
    assert load_conf(tmp_path).token_service() == "ha-hdfs:nameservice1"
    site(
        tmp_path / "yarn-site.xml",
        **{
            "yarn.resourcemanager.principal": "rm/_HOST@EX.COM",
            "yarn.resourcemanager.ha.enabled": "true",
            "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
            "yarn.resourcemanager.hostname.rm1": "rm1.example",
            "yarn.resourcemanager.hostname.rm2": "rm2.example",
        },
    )
    assert load_conf(tmp_path).rm_principal == "rm/rm1.example@EX.COM"  # HA: the first RM's host
    site(tmp_path / "yarn-site.xml")
    assert load_conf(tmp_path).rm_principal is None
    assert short_name("etl/host.example@EX.COM") == "etl" and short_name("alice@EX.COM") == "alice"
