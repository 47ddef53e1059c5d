"""The ResourceManager's REST API (``/ws/v1/cluster``): new application, submit, find, kill; and a
NodeManager's view of its containers (``/ws/v1/node/containers``).

Submission goes through REST rather than Hadoop's Java client so the Python side needs no JVM: only
the ApplicationMaster speaks Hadoop RPC (through Hadoop's own library). Simple authentication sends
``user.name``; on a Kerberized cluster ``auth`` is SPNEGO (``hadoop/kerberos.py``) and the user is
the principal's.
"""

from __future__ import annotations

from typing import Any

import httpx

from airflow_provider_primus.errors import PrimusError

__all__ = ["ResourceManager", "YarnRestError", "node_containers"]

# Application states in which it may still run containers.
UNFINISHED = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


class YarnRestError(PrimusError):
    """A REST call failed; the message names the call and carries the server's answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _json(response: httpx.Response, what: str) -> Any:
    if response.status_code >= 400:
        try:
            detail = response.json().get("RemoteException", {}).get("message") or response.text[:500]
        except ValueError:
            detail = response.text[:500]
        raise YarnRestError(f"{what}: HTTP {response.status_code}: {detail}", response.status_code)
    return response.json() if response.content else {}


class ResourceManager:
    def __init__(self, url: str, user: str, timeout_s: float = 30.0, auth: httpx.Auth | None = None) -> None:
        self.url = url.rstrip("/")
        self.user = user
        params = {} if auth is not None else {"user.name": user}
        self.http = httpx.Client(timeout=timeout_s, params=params, auth=auth)

    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, f"{self.url}/ws/v1/cluster{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise YarnRestError(f"{what}: the ResourceManager at {self.url} did not answer: {exc}") from exc
        return _json(response, what)

    def info(self) -> dict[str, Any]:
        return dict(self._call("GET", "/info", "cluster info")["clusterInfo"])

    def nodes(self) -> list[dict[str, Any]]:
        return list((self._call("GET", "/nodes", "nodes").get("nodes") or {}).get("node") or [])

    def new_application(self) -> dict[str, Any]:
        return dict(self._call("POST", "/apps/new-application", "new application"))

    def submit(self, body: dict[str, Any]) -> None:
        self._call("POST", "/apps", "submit application", json=body)

    def app(self, app_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/apps/{app_id}", f"application {app_id}")["app"])

    def apps(self, *, tag: str | None = None, states: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        params: dict[str, str] = {}
        if tag:
            params["applicationTags"] = tag
        if states:
            params["states"] = ",".join(states)
        found = self._call("GET", "/apps", "applications", params=params).get("apps") or {}
        return list(found.get("app") or [])

    def attempts(self, app_id: str) -> list[dict[str, Any]]:
        body = self._call("GET", f"/apps/{app_id}/appattempts", f"attempts of {app_id}")
        return list((body.get("appAttempts") or {}).get("appAttempt") or [])

    def kill(self, app_id: str) -> None:
        self._call("PUT", f"/apps/{app_id}/state", f"kill {app_id}", json={"state": "KILLED"})

    def close(self) -> None:
        self.http.close()


def node_containers(
    node_http: str, user: str, timeout_s: float = 10.0, auth: httpx.Auth | None = None
) -> list[dict[str, Any]]:
    """The containers a NodeManager runs, as it reports them (its own resources view)."""
    url = node_http if node_http.startswith("http") else f"http://{node_http}"
    params = {} if auth is not None else {"user.name": user}
    response = httpx.get(f"{url}/ws/v1/node/containers", params=params, timeout=timeout_s, auth=auth)
    body = _json(response, f"containers of node {node_http}")
    return list((body.get("containers") or {}).get("container") or [])
