"""A client of a job's control API: what the CLI uses, and what the Airflow hook builds on."""

from __future__ import annotations

from typing import Any

import httpx


class ControlError(RuntimeError):
    pass


class ControlClient:
    def __init__(self, url: str, token: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
        try:
            response = httpx.request(
                method,
                f"{self.url}/v1/{path}",
                json=body,
                params=params or None,
                headers=self._headers,
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise ControlError(f"the job's master at {self.url} is not reachable: {exc}") from None
        if response.status_code >= 400:
            raise ControlError(f"{method} /v1/{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "status")
        return result

    def events(self, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "events", after=after, limit=limit)
        return result

    def scale(self, role: str, replicas: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "scale", {"role": role, "replicas": replicas})
        return result

    def resize(self, executor: str, cpu: float | None = None, memory: int | None = None) -> dict[str, Any]:
        body = {"executor": executor, "cpu": cpu, "memory": memory}
        result: dict[str, Any] = self._call("POST", "resize", body)
        return result

    def append_window(self, start: str, end: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "windows", {"start": start, "end": end})
        return result

    def savepoint(self, savepoint_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "savepoint", {"id": savepoint_id})
        return result

    def suspend(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "suspend")
        return result

    def resume(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "resume")
        return result

    def stop(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "stop")
        return result
