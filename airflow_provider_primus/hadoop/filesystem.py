"""``hdfs://`` files sources: pyarrow's own HadoopFileSystem where libhdfs (a Hadoop install and
a JVM) is present, else WebHDFS through fsspec, which needs neither.

WebHDFS is the NameNode's HTTP port, which the ``hdfs://`` URI does not name: it comes from the
Hadoop client configuration (``$HADOOP_CONF_DIR``: ``dfs.namenode.http-address`` for the NameNode
that ``fs.defaultFS`` names). Who the client is: in a YARN container of a Kerberized cluster, the
application's delegation token (``$PRIMUS_HDFS_TOKEN_FILE``); elsewhere on a Kerberized cluster,
SPNEGO from this process's Kerberos login (``hadoop/kerberos.py``); under simple authentication
``$HADOOP_USER_NAME`` or the process's user.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.hadoop.config import load_conf
from airflow_provider_primus.hadoop.kerberos import HDFS_TOKEN_FILE_ENV, KerberosLogin, RequestsSpnegoAuth

__all__ = ["HdfsError", "open_hdfs", "webhdfs_info"]

_filesystems: dict[tuple[str, ...], pafs.FileSystem] = {}


class HdfsError(PrimusError):
    """An ``hdfs://`` URI cannot be opened; the message says which setting is missing."""


def _replacing_webhdfs(auth: Any = None) -> type[Any]:
    """fsspec's WebHDFS whose ``mv`` keeps pyarrow's ``move`` contract (a file at the destination is
    replaced) atomically: HDFS's rename with the OVERWRITE option (``rename2``), where the plain
    rename fsspec sends answers ``false`` and moves nothing. Checkpoint manifests rely on it.
    ``auth``: SPNEGO for its requests session (fsspec's own Kerberos option needs requests-kerberos)."""
    from fsspec.implementations.webhdfs import WebHDFS

    class ReplacingWebHDFS(WebHDFS):  # type: ignore[misc]
        def _connect(self) -> None:
            super()._connect()
            if auth is not None:
                self.session.auth = auth

        @staticmethod
        def _process_info(info: dict[str, Any]) -> dict[str, Any]:
            return webhdfs_info(WebHDFS._process_info(info))

        def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
            destination = self._strip_protocol(path2)
            self._call("RENAME", method="put", path=path1, destination=destination, renameoptions="OVERWRITE")

    return ReplacingWebHDFS


def webhdfs_info(info: dict[str, Any]) -> dict[str, Any]:
    """A WebHDFS FileStatus with its ``modificationTime`` (ms) as the ``mtime`` pyarrow's listings
    read: fsspec leaves it under its own name, so a listing would say nothing of when a file
    changed, and a file rewritten after planning could not be told from the planned one. Changed in
    place, as fsspec's listing ignores the return value."""
    ms = info.get("modificationTime")
    if isinstance(ms, int) and ms > 0:
        info["mtime"] = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
    return info


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
    identity, connect = _client(conf.kerberos, urlparse(conf.webhdfs_url))
    key = (conf.webhdfs_url, *identity)
    fs = _filesystems.get(key)
    if fs is None:
        fs = _filesystems[key] = pafs.PyFileSystem(pafs.FSSpecHandler(connect()))
    return fs, parsed.path.rstrip("/") or "/"


def _client(kerberos: bool, http: Any) -> tuple[tuple[str, ...], Callable[[], Any]]:
    """Who this process is to WebHDFS (the cache key) and how to connect as that."""
    host, port = http.hostname, http.port
    token_file = os.environ.get(HDFS_TOKEN_FILE_ENV)
    if kerberos and token_file:  # a container of a Kerberized cluster's application
        return ("token", token_file), lambda: _replacing_webhdfs()(host, port=port, token=_token(token_file))
    if kerberos:
        login = KerberosLogin.from_environment()
        identity = ("kerberos", login.principal or "", login.keytab or "")
        return identity, lambda: _replacing_webhdfs(RequestsSpnegoAuth(login))(host, port=port)
    user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    return ("user", user), lambda: _replacing_webhdfs()(host, port=port, user=user)


def _token(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise HdfsError(f"the application's HDFS delegation token {path} is unreadable: {exc}") from exc
