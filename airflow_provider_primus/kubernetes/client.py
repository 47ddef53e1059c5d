"""A thin JSON client over the official ``kubernetes`` ApiClient, retrying what is worth retrying.

Why not the generated typed APIs: turning every pod of a 1,000-executor job into ``V1Pod`` objects
costs more Python time than the whole reconcile pass may take, and custom resources are plain dicts
anyway. The ApiClient still does what it is good at — authentication (tokens, client certificates,
exec plugins), TLS, connection pooling — and may come from anywhere: a kubeconfig, the in-cluster
service account, or the cncf-kubernetes ``KubernetesHook`` (``hook.api_client``).

Why retries here: an apiserver sheds load with 429 (API priority and fairness) and answers 5xx while
it or etcd restarts; a master that failed its pass on every such blip would count them as errors and
could fail the job. ``RetryPolicy`` (tenacity) retries those, waiting what ``Retry-After`` asks for
when the server says, exponential backoff with jitter otherwise (so many masters do not retry in
step), within a bounded number of attempts and time. Other 4xx answers are the caller's to handle
(404, 409 Conflict, 422 Invalid) and fail at once. A create is not idempotent, so it is repeated only
when the request surely was not acted on: a connection that never opened, 429, or a 5xx with
``Retry-After``; otherwise a repeat could meet its own first attempt as a 409.

Every request is counted (``KubeApi.requests``, each attempt once), which is how the benchmark proves
that an idle reconcile pass costs the same number of requests at 10 and at 1,000 executors.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)
from tenacity.wait import wait_base

from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.master.client import retry_after_s

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"

T = TypeVar("T")


class KubeError(PrimusError):
    """A refused request: ``status`` is the HTTP code, ``reason`` the apiserver's (Conflict, …),
    ``causes`` the field errors ``[(field, message)]`` of an Invalid answer, ``retry_after`` the
    seconds the server asked the client to wait (``Retry-After``), if it did."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        causes: Sequence[tuple[str, str]] = (),
        retry_after: float | None = None,
    ) -> None:
        self.status, self.reason, self.causes = status, reason, list(causes)
        self.retry_after = retry_after
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
        retry_after(exc.headers),
    )


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """``Retry-After`` in seconds (the control client's reading of it), None if absent or bad."""
    return retry_after_s((headers or {}).get("Retry-After"))


def transient(exc: BaseException, method: str) -> bool:
    """Whether repeating ``method`` after ``exc`` may succeed and cannot do anything twice."""
    if isinstance(exc, KubeError):
        if exc.status == 429:
            return True  # refused before it was processed
        return 500 <= exc.status <= 599 and (method != "POST" or exc.retry_after is not None)
    reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(reason, urllib3.exceptions.SSLError):
        return False  # a certificate or TLS setting: another attempt meets the same
    if isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
        return True  # no connection (refused, unreachable, DNS): nothing was sent
    return method != "POST" and isinstance(
        reason, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError
    )


class _wait_retry_after(wait_base):
    """The server's ``Retry-After`` when it gave one, the fallback wait otherwise."""

    def __init__(self, fallback: wait_base) -> None:
        self.fallback = fallback

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, KubeError) and exc.retry_after is not None:
            return exc.retry_after
        return float(self.fallback(retry_state))


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``attempts`` tries, and none started (nor a wait begun) that would end later than
    ``max_delay_s`` after the first, so a reconcile pass or an Airflow call stays bounded; backoff
    from ``backoff_s`` doubling up to ``max_backoff_s``, plus up to ``backoff_s`` of jitter."""

    attempts: int = 5
    max_delay_s: float = 20.0
    backoff_s: float = 0.25
    max_backoff_s: float = 5.0

    def call(self, method: str, path: str, fn: Callable[[], T]) -> T:
        retrying = Retrying(
            retry=retry_if_exception(lambda exc: transient(exc, method)),
            wait=_wait_retry_after(
                wait_exponential_jitter(initial=self.backoff_s, max=self.max_backoff_s, jitter=self.backoff_s)
            ),
            stop=stop_after_attempt(self.attempts) | stop_before_delay(self.max_delay_s),
            before_sleep=lambda state: _log_retry(method, path, state),
            reraise=True,
        )
        return retrying(fn)


NO_RETRY = RetryPolicy(attempts=1)

# What the transport under the ApiClient may do on its own: follow a few redirects, nothing else.
# urllib3's default would retry by itself (three times, sleeping whatever Retry-After says, however
# long, and uncounted), under the policy above and outside its bounds.
_ONE_ATTEMPT = urllib3.Retry(
    total=None, connect=0, read=0, status=0, other=0, redirect=3, respect_retry_after_header=False
)


def _one_attempt_per_request(client: ApiClient) -> None:
    pool_manager = getattr(getattr(client, "rest_client", None), "pool_manager", None)
    if pool_manager is None:
        return
    pool_manager.connection_pool_kw["retries"] = _ONE_ATTEMPT  # pools made from now on
    for key in list(pool_manager.pools.keys()):  # and those that already exist
        pool = pool_manager.pools.get(key)
        if pool is not None:
            pool.retries = _ONE_ATTEMPT


def _log_retry(method: str, path: str, state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    sleep = state.next_action.sleep if state.next_action else 0.0
    # The path and the error only: no query, no body (a Secret's data is never in either).
    log.warning(
        "%s %s: %s; attempt %d failed, retrying in %.2fs", method, path, exc, state.attempt_number, sleep
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
    """JSON requests over ``api_client``, retried by ``retry``. The client's transport is set to make
    one attempt per request, so that ``retry`` is the only retry loop, its bounds hold and every
    attempt is counted."""

    def __init__(
        self, api_client: ApiClient, *, timeout_s: float = 30.0, retry: RetryPolicy | None = None
    ) -> None:
        _one_attempt_per_request(api_client)
        self.client = api_client
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any],
        headers: Mapping[str, str],
        body: Any,
        timeout: float | tuple[float, float],
    ) -> Any:
        """One attempt: the raw urllib3 response, or the apiserver's refusal as ``KubeError``."""
        self._count()
        try:
            return self.client.call_api(
                path,
                method,
                query_params=[(k, v) for k, v in query.items() if v is not None],
                header_params=dict(headers),
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
                _return_http_data_only=True,
            )
        except ApiException as exc:
            raise _error(exc) from None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        headers = {"Accept": JSON, "Content-Type": content_type}

        def once() -> bytes:
            resp = self._call(
                method, path, query=query or {}, headers=headers, body=body, timeout=self.timeout_s
            )
            data: bytes = resp.data  # read inside the attempt: a connection can drop mid-body
            return data

        data = self.retry.call(method, path, once)
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def get_text(self, path: str, **query: Any) -> str:
        """A plain-text GET (a pod's ``log`` subresource), retried like any GET."""

        def once() -> bytes:
            resp = self._call(
                "GET", path, query=query, headers={"Accept": "*/*"}, body=None, timeout=self.timeout_s
            )
            data: bytes = resp.data
            return data

        return self.retry.call("GET", path, once).decode(errors="replace")

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
        """Watch events from ``resource_version`` until the server ends the stream (``timeout_s``).
        Opening the stream is retried like a GET; a stream that breaks later just ends (the caller
        resumes from the last version it saw)."""
        params = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        resp = self.retry.call(
            "GET",
            path,
            lambda: self._call(
                "GET",
                path,
                query=params,
                headers={"Accept": JSON},
                body=None,
                timeout=(self.timeout_s, timeout_s + 30),
            ),
        )
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
