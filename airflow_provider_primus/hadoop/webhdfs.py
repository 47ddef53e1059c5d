"""WebHDFS, the part the YARN backend needs to stage an application's files: make a directory, write
a file (the two-step create: the NameNode redirects to a DataNode), read its status, delete.

Staging is a handful of small files per submission (the ApplicationMaster jar, the job's documents
and token), so a plain HTTP client is enough; reading data on ``hdfs://`` goes through fsspec's
WebHDFS filesystem instead (``hadoop/filesystem.py``). Simple authentication sends ``user.name``; on a
Kerberized cluster ``auth`` is SPNEGO, and :meth:`WebHdfs.delegation_token` gets the token the
application's containers use instead of Kerberos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from airflow_provider_primus.errors import PrimusError

__all__ = ["FileStatus", "WebHdfs", "WebHdfsError"]


class WebHdfsError(PrimusError):
    """A WebHDFS call failed; the message names the operation, the path and the NameNode's answer."""


@dataclass(frozen=True)
class FileStatus:
    length: int
    modification_time: int  # ms since the epoch: a LocalResource's timestamp must equal it
    type: str


class WebHdfs:
    def __init__(self, url: str, user: str, timeout_s: float = 30.0, auth: httpx.Auth | None = None) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.http = httpx.Client(timeout=timeout_s, auth=auth)
        self._who = {} if auth is not None else {"user.name": user}

    def _call(self, method: str, path: str, op: str, **params: Any) -> httpx.Response:
        query = {"op": op, **self._who, **{k: str(v) for k, v in params.items()}}
        try:
            response = self.http.request(method, f"{self.url}/webhdfs/v1{path}", params=query)
        except httpx.HTTPError as exc:
            raise WebHdfsError(f"WebHDFS {op} {path}: {exc}") from exc
        return response

    @staticmethod
    def _check(response: httpx.Response, op: str, path: str) -> httpx.Response:
        if response.status_code >= 400:
            try:
                detail = response.json()["RemoteException"]["message"]
            except (ValueError, KeyError, TypeError):
                detail = response.text[:500]
            raise WebHdfsError(f"WebHDFS {op} {path}: HTTP {response.status_code}: {detail}")
        return response

    def mkdirs(self, path: str, permission: str = "700") -> None:
        self._check(self._call("PUT", path, "MKDIRS", permission=permission), "MKDIRS", path)

    def create(self, path: str, data: bytes, permission: str = "600", overwrite: bool = True) -> FileStatus:
        op = "CREATE"
        first = self._call("PUT", path, op, overwrite=str(overwrite).lower(), permission=permission)
        if first.status_code != 307:
            self._check(first, op, path)
            raise WebHdfsError(
                f"WebHDFS CREATE {path}: expected a redirect to a DataNode, got {first.status_code}"
            )
        try:
            second = self.http.put(first.headers["Location"], content=data)
        except httpx.HTTPError as exc:
            raise WebHdfsError(f"WebHDFS CREATE {path} (DataNode): {exc}") from exc
        self._check(second, op, path)
        return self.status(path)

    def read(self, path: str) -> bytes:
        response = self._call("GET", path, "OPEN")
        if response.status_code == 307:
            response = self.http.get(response.headers["Location"])
        return self._check(response, "OPEN", path).content

    def status(self, path: str) -> FileStatus:
        body = self._check(self._call("GET", path, "GETFILESTATUS"), "GETFILESTATUS", path).json()
        st = body["FileStatus"]
        return FileStatus(int(st["length"]), int(st["modificationTime"]), str(st["type"]))

    def list(self, path: str) -> list[str]:
        body = self._check(self._call("GET", path, "LISTSTATUS"), "LISTSTATUS", path).json()
        return [str(s["pathSuffix"]) for s in body["FileStatuses"]["FileStatus"]]

    def delete(self, path: str, recursive: bool = True) -> bool:
        response = self._call("DELETE", path, "DELETE", recursive=str(recursive).lower())
        return bool(self._check(response, "DELETE", path).json().get("boolean"))

    def delegation_token(self, renewer: str, service: str) -> str:
        """A new HDFS delegation token (URL-safe encoded, as Hadoop's ``Token.encodeToUrlString``)
        that ``renewer`` (the ResourceManager) may renew: the kind and service Hadoop's own RPC
        clients select, so the NodeManagers' localizers use it as well as WebHDFS does."""
        response = self._call(
            "GET", "/", "GETDELEGATIONTOKEN", renewer=renewer, kind="HDFS_DELEGATION_TOKEN", service=service
        )
        body = self._check(response, "GETDELEGATIONTOKEN", "/").json()
        try:
            return str(body["Token"]["urlString"])
        except (KeyError, TypeError) as exc:
            raise WebHdfsError(f"WebHDFS GETDELEGATIONTOKEN: no token in the answer {body!r:.200}") from exc

    def close(self) -> None:
        self.http.close()
