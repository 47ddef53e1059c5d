"""The client of our ApplicationMaster's API (``java/.../ApplicationMaster.java``): HTTP/JSON on the
AM's host (HTTPS with the job's CA on a TLS job), every call carrying the job token. The AM does
what the Python master decides: ask for a container per executor incarnation, launch, release,
resize in place, adopt after a restart.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote

import httpx

from airflow_provider_primus.errors import PrimusError

__all__ = ["AmClient", "AmError", "AmUnreachable"]


class AmError(PrimusError):
    """The ApplicationMaster answered with an error (``status``: 404 unknown, 409 conflict, ...)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class AmUnreachable(PrimusError):
    """No ApplicationMaster answers at this address (it exited; a new attempt may be starting)."""


class AmClient:
    def __init__(
        self, url: str, token: str, timeout_s: float = 30.0, verify: ssl.SSLContext | bool = True
    ) -> None:
        """``verify``: the job CA's context for an ``https://`` AM (a TLS job)."""
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}, verify=verify
        )

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, wait_s: float = 0) -> Any:
        try:
            response = self.http.request(
                method, f"{self.url}/v1/{path}", json=body or {}, timeout=self.timeout_s + wait_s
            )
        except httpx.TransportError as exc:
            raise AmUnreachable(f"the ApplicationMaster at {self.url} does not answer: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = response.json().get("error") or response.text
            except ValueError:
                message = response.text
            raise AmError(f"ApplicationMaster {method} /v1/{path}: {message}", response.status_code)
        return response.json()

    def status(self) -> dict[str, Any]:
        return dict(self._call("GET", "status"))

    def launch(self, key: str, spec: dict[str, Any], wait_s: float) -> dict[str, Any]:
        return dict(self._call("PUT", f"executors/{quote(key, safe='')}", {**spec, "wait_s": wait_s}, wait_s))

    def executor(self, key: str) -> dict[str, Any]:
        return dict(self._call("GET", f"executors/{quote(key, safe='')}"))

    def release(self, key: str) -> dict[str, Any]:
        return dict(self._call("DELETE", f"executors/{quote(key, safe='')}"))

    def resize(self, key: str, memory_mb: int, vcores: int, wait_s: float) -> dict[str, Any]:
        body = {"memory_mb": memory_mb, "vcores": vcores, "wait_s": wait_s}
        return dict(self._call("POST", f"executors/{quote(key, safe='')}/resize", body, wait_s))

    def adopt(self, key: str, container: str, name: str, role: str) -> dict[str, Any]:
        body = {"container": container, "name": name, "role": role}
        return dict(self._call("POST", f"executors/{quote(key, safe='')}/adopt", body))

    def release_unclaimed(self) -> list[str]:
        return list(self._call("POST", "release-unclaimed").get("released") or [])

    def finish(self, status: str, message: str) -> None:
        self._call("POST", "finish", {"status": status, "message": message})

    def close(self) -> None:
        self.http.close()
