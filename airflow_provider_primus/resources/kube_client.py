"""A thin JSON client over the official ``kubernetes`` ApiClient, and an informer (list + watch cache).

Why not the generated typed APIs: turning every pod of a 1,000-executor job into ``V1Pod`` objects
costs more Python time than the whole reconcile pass may take, and custom resources are plain dicts
anyway. The ApiClient still does what it is good at — authentication (tokens, client certificates,
exec plugins), TLS, connection pooling — and may come from anywhere: a kubeconfig, the in-cluster
service account, or the cncf-kubernetes ``KubernetesHook`` (``hook.api_client``).

Every request is counted (``KubeApi.requests``), which is how the benchmark proves that an idle
reconcile pass costs the same number of requests at 10 and at 1,000 executors.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class KubeError(RuntimeError):
    """A refused request: ``status`` is the HTTP code, ``reason`` the apiserver's (Conflict, …),
    ``causes`` the field errors ``[(field, message)]`` of an Invalid answer."""

    def __init__(
        self, status: int, reason: str, message: str, causes: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.status, self.reason, self.causes = status, reason, list(causes)
        super().__init__(f"{status} {reason}: {message}")


def _error(exc: ApiException) -> KubeError:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    causes = [
        (str(c.get("field", "")), str(c.get("message", "")))
        for c in (body.get("details") or {}).get("causes") or []
    ]
    return KubeError(
        int(exc.status or 0),
        str(body.get("reason") or exc.reason),
        str(body.get("message") or exc.body),
        causes,
    )


def api_client_from(
    *, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
) -> ApiClient:
    """An ApiClient the way kubectl finds one: in-cluster when running in a pod (or asked), else the
    given kubeconfig (or $KUBECONFIG / ~/.kube/config) and context. Never a process-global default."""
    from kubernetes import config

    cfg = Configuration()
    if in_cluster or (in_cluster is None and kubeconfig is None and _in_cluster()):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return ApiClient(cfg)


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )


class KubeApi:
    def __init__(self, api_client: ApiClient, *, timeout_s: float = 30.0) -> None:
        self.client = api_client
        self.timeout_s = timeout_s
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        self._count()
        try:
            resp = self.client.call_api(
                path,
                method,
                query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout_s,
                _return_http_data_only=True,
            )
        except ApiException as exc:
            raise _error(exc) from None
        data = resp.data
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Mapping[str, Any], **query: Any) -> dict[str, Any]:
        return self.request("POST", path, query=query, body=dict(body))

    def replace(self, path: str, body: Mapping[str, Any], **query: Any) -> dict[str, Any]:
        return self.request("PUT", path, query=query, body=dict(body))

    def patch(self, path: str, body: Any, *, content_type: str = MERGE_PATCH, **query: Any) -> dict[str, Any]:
        return self.request("PATCH", path, query=query, body=body, content_type=content_type)

    def delete(self, path: str, body: Mapping[str, Any] | None = None, **query: Any) -> dict[str, Any]:
        return self.request("DELETE", path, query=query, body=dict(body) if body else None)

    def watch(
        self, path: str, *, resource_version: str, timeout_s: int, **query: Any
    ) -> Iterator[dict[str, Any]]:
        """Watch events from ``resource_version`` until the server ends the stream (``timeout_s``)."""
        self._count()
        params = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        try:
            resp = self.client.call_api(
                path,
                "GET",
                query_params=[(k, v) for k, v in params.items() if v is not None],
                header_params={"Accept": JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=(self.timeout_s, timeout_s + 30),
                _return_http_data_only=True,
            )
        except ApiException as exc:
            raise _error(exc) from None
        try:
            for line in iter_resp_lines(resp):
                if line:
                    yield json.loads(line)
        finally:
            resp.release_conn()


def parse_time(value: str | None) -> float:
    """An RFC 3339 timestamp of the apiserver (``creationTimestamp``) as epoch seconds; 0 if unset."""
    if not value:
        return 0.0
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def resource_path(api_version: str, plural: str, namespace: str | None, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{quote(namespace)}/{plural}" if namespace else f"{base}/{plural}"
    return f"{path}/{quote(name)}" if name else path


class Informer:
    """List once, then watch from that resourceVersion and keep a name → object cache current.

    A watch ends (server timeout, a dropped connection): it resumes from the last resourceVersion it
    saw, bookmarks included, so nothing is listed again. Only when the apiserver has compacted that
    version away (410 Gone) does it list afresh. ``wait_for`` lets callers await a condition on the
    cache instead of polling the server.
    """

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 240,
    ) -> None:
        self.api, self.path = api, path
        self.query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self.watch_timeout_s = watch_timeout_s
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.cond = threading.Condition()
        self.restarts = 0  # watches resumed after they ended
        self.relists = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        self._list()
        self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _list(self) -> None:
        listing = self.api.get(self.path, **self.query)
        with self.cond:
            self.objects = {o["metadata"]["name"]: o for o in listing.get("items", [])}
            self.resource_version = listing["metadata"]["resourceVersion"]
            self.cond.notify_all()

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        meta = obj.get("metadata") or {}
        with self.cond:
            if meta.get("resourceVersion"):
                self.resource_version = meta["resourceVersion"]
            if kind == "BOOKMARK":
                return
            if kind == "DELETED":
                self.objects.pop(meta["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[meta["name"]] = dict(obj)
            self.cond.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.api.watch(
                    self.path,
                    resource_version=self.resource_version,
                    timeout_s=self.watch_timeout_s,
                    **self.query,
                ):
                    if self._stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        if (event.get("object") or {}).get("code") == 410:
                            self.relists += 1
                            self._list()
                        break
                    self._apply(event)
                self.restarts += 1
            except KubeError as exc:
                if exc.status == 410:
                    self.relists += 1
                    self._relist_quietly()
                else:
                    log.warning("watch %s: %s; resuming", self.path, exc)
                    self._stop.wait(1.0)
            except Exception as exc:  # a dropped connection: resume from the last version seen
                log.info("watch %s ended (%s); resuming", self.path, exc)
                self.restarts += 1
                self._stop.wait(0.2)

    def _relist_quietly(self) -> None:
        try:
            self._list()
        except Exception as exc:
            log.warning("relist %s: %s", self.path, exc)
            self._stop.wait(1.0)

    def get(self, name: str) -> dict[str, Any] | None:
        with self.cond:
            return self.objects.get(name)

    def items(self) -> list[dict[str, Any]]:
        with self.cond:
            return list(self.objects.values())

    def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not predicate(self.objects):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True
