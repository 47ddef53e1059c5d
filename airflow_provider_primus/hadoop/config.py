"""A Hadoop client configuration directory (``HADOOP_CONF_DIR``), read the way Hadoop reads it.

The backend needs four facts from it: the ResourceManager's web address (REST), the default
filesystem (where applications are staged), the NameNode's HTTP address (WebHDFS) and the classpath
an application's containers get (``yarn.application.classpath``). ``${name}`` references are
expanded from the same files, as in ``yarn.resourcemanager.webapp.address =
${yarn.resourcemanager.hostname}:8088``.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from airflow_provider_primus.errors import PrimusError

__all__ = ["HadoopConf", "HadoopConfError", "load_conf"]

FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")
# Hadoop's own defaults (yarn-default.xml, hdfs-default.xml) for what a site file may leave out.
DEFAULTS = {
    "yarn.resourcemanager.hostname": "0.0.0.0",
    "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088",
    "dfs.namenode.http-address": "0.0.0.0:9870",
    "fs.defaultFS": "file:///",
    "yarn.application.classpath": ",".join(
        [
            "$HADOOP_CONF_DIR",
            "$HADOOP_COMMON_HOME/share/hadoop/common/*",
            "$HADOOP_COMMON_HOME/share/hadoop/common/lib/*",
            "$HADOOP_HDFS_HOME/share/hadoop/hdfs/*",
            "$HADOOP_HDFS_HOME/share/hadoop/hdfs/lib/*",
            "$HADOOP_YARN_HOME/share/hadoop/yarn/*",
            "$HADOOP_YARN_HOME/share/hadoop/yarn/lib/*",
        ]
    ),
    "hadoop.security.authentication": "simple",
}
_REF = re.compile(r"\$\{([^}$\s]+)\}")


class HadoopConfError(PrimusError):
    """The configuration directory is missing or unreadable; the message names the file."""


@dataclass(frozen=True)
class HadoopConf:
    directory: Path | None
    values: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        raw = self.values.get(name, DEFAULTS.get(name))
        if raw is None:
            return None
        for _ in range(20):  # Hadoop's own expansion depth
            expanded = _REF.sub(lambda m: self.values.get(m[1], DEFAULTS.get(m[1], m[0])), raw)
            if expanded == raw:
                break
            raw = expanded
        return raw.strip()

    @property
    def rm_url(self) -> str:
        return "http://" + _loopback_if_wildcard(self.get("yarn.resourcemanager.webapp.address") or "")

    @property
    def fs_default(self) -> str:
        return self.get("fs.defaultFS") or "file:///"

    @property
    def webhdfs_url(self) -> str:
        return "http://" + _loopback_if_wildcard(self.get("dfs.namenode.http-address") or "")

    @property
    def application_classpath(self) -> list[str]:
        return [p.strip() for p in (self.get("yarn.application.classpath") or "").split(",") if p.strip()]

    @property
    def kerberos(self) -> bool:
        return self.get("hadoop.security.authentication") == "kerberos"

    @property
    def rm_principal(self) -> str | None:
        """The ResourceManager's Kerberos principal, ``_HOST`` replaced as Hadoop does: the renewer
        of the delegation tokens an application is submitted with."""
        principal = self.get("yarn.resourcemanager.principal")
        if not principal:
            return None
        # In HA mode the first ResourceManager's host, as Hadoop's YarnClientUtils picks it.
        suffix = ""
        if (self.get("yarn.resourcemanager.ha.enabled") or "").lower() == "true":
            listed = (self.get("yarn.resourcemanager.ha.rm-ids") or "").split(",")
            ids = [i.strip() for i in listed if i.strip()]
            suffix = f".{ids[0]}" if ids else ""
        address = (
            self.get(f"yarn.resourcemanager.address{suffix}")
            or self.get(f"yarn.resourcemanager.hostname{suffix}")
            or ""
        )
        host = address.rpartition(":")[0] if ":" in address else address
        return principal.replace("_HOST", (host or "0.0.0.0").lower())

    def token_service(self) -> str:
        """The service an HDFS delegation token names, as Hadoop's clients select it: the NameNode's
        RPC ``ip:port`` (``hadoop.security.token.service.use_ip``), or ``ha-hdfs:<nameservice>``."""
        netloc = urlparse(self.fs_default).netloc
        host, _, port = netloc.rpartition(":")
        if not port.isdigit():  # hdfs://nameservice: an HA pair
            return f"ha-hdfs:{netloc}"
        with contextlib.suppress(OSError):  # unresolvable here: the name as written
            host = socket.gethostbyname(host)
        return f"{host}:{port}"


def _loopback_if_wildcard(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "") else address


def load_conf(directory: str | Path | None = None) -> HadoopConf:
    """The configuration in ``directory``, else ``$HADOOP_CONF_DIR``; Hadoop's defaults when neither."""
    where = directory or os.environ.get("HADOOP_CONF_DIR")
    if not where:
        return HadoopConf(None, {})
    path = Path(where).expanduser()
    if not path.is_dir():
        raise HadoopConfError(f"Hadoop configuration directory {path} does not exist (HADOOP_CONF_DIR)")
    values: dict[str, str] = {}
    for name in FILES:
        file = path / name
        if not file.is_file():
            continue
        try:
            root = ET.parse(file).getroot()
        except ET.ParseError as exc:
            raise HadoopConfError(f"{file}: not a Hadoop configuration file ({exc})") from exc
        for prop in root.iter("property"):
            key, value = prop.findtext("name"), prop.findtext("value")
            if key and value is not None:
                values[key.strip()] = value
    return HadoopConf(path, values)
