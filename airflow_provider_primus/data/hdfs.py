"""``hdfs://`` files sources: pyarrow's own HadoopFileSystem where libhdfs (a Hadoop install and
a JVM) is present, else WebHDFS through fsspec, which needs neither.

WebHDFS is the NameNode's HTTP port, which the ``hdfs://`` URI does not name: it comes from the
Hadoop client configuration (``$HADOOP_CONF_DIR``: ``dfs.namenode.http-address`` for the NameNode
that ``fs.defaultFS`` names). Under simple authentication the user is ``$HADOOP_USER_NAME`` or the
process's; a Kerberized NameNode needs libhdfs (docs/yarn.md).
"""

from __future__ import annotations

import getpass
import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from airflow_provider_primus.yarn.config import load_conf

__all__ = ["HdfsError", "open_hdfs"]

_filesystems: dict[tuple[str, str], pafs.FileSystem] = {}


class HdfsError(RuntimeError):
    """An ``hdfs://`` URI cannot be opened; the message says which setting is missing."""


def _replacing_webhdfs() -> type[Any]:
    """fsspec's WebHDFS whose ``mv`` keeps pyarrow's ``move`` contract (a file at the destination is
    replaced) atomically: HDFS's rename with the OVERWRITE option (``rename2``), where the plain
    rename fsspec sends answers ``false`` and moves nothing. Checkpoint manifests rely on it."""
    from fsspec.implementations.webhdfs import WebHDFS

    class ReplacingWebHDFS(WebHDFS):  # type: ignore[misc]
        def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
            destination = self._strip_protocol(path2)
            self._call("RENAME", method="put", path=path1, destination=destination, renameoptions="OVERWRITE")

    return ReplacingWebHDFS


def open_hdfs(uri: str, owner: str | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem for ``hdfs://namenode:port/path`` and the path in it."""
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        return fs, root.rstrip("/") or "/"
    except (OSError, ValueError, ImportError):
        pass  # no libhdfs here: WebHDFS below
    parsed = urlparse(uri)
    conf = load_conf()
    default = urlparse(conf.fs_default)
    who = owner or repr(uri)
    if conf.directory is None or default.scheme != "hdfs":
        raise HdfsError(
            f"{who}: {uri} needs the NameNode's WebHDFS address and libhdfs is not available; set "
            "HADOOP_CONF_DIR to a Hadoop client configuration whose fs.defaultFS is that NameNode"
        )
    if parsed.netloc and parsed.netloc != default.netloc:
        raise HdfsError(
            f"{who}: {uri} names NameNode {parsed.netloc} but HADOOP_CONF_DIR ({conf.directory}) "
            f"configures {default.netloc}; point HADOOP_CONF_DIR at that cluster's configuration"
        )
    http = urlparse(conf.webhdfs_url)
    user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    key = (conf.webhdfs_url, user)
    fs = _filesystems.get(key)
    if fs is None:
        webhdfs = _replacing_webhdfs()(http.hostname, port=http.port, user=user)
        fs = _filesystems[key] = pafs.PyFileSystem(pafs.FSSpecHandler(webhdfs))
    return fs, parsed.path.rstrip("/") or "/"
