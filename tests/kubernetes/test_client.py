"""The client's retry policy against a real HTTP server on loopback that answers from a script:
429 with ``Retry-After`` and 5xx are retried (the wait the server asks for, backoff otherwise),
other 4xx fail at once, a create is repeated only when it surely was not acted on, connection
errors are retried, and every retry stops within its bounds."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration

from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, RetryPolicy, retry_after

FAST = RetryPolicy(attempts=5, max_delay_s=10.0, backoff_s=0.05, max_backoff_s=0.2)
BEARER = "Bearer retry-test-token"
OK: dict[str, Any] = {"kind": "Pod", "metadata": {"name": "p"}}


@dataclass
class Answer:
    status: int
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def status(code: int, reason: str, **headers: str) -> Answer:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    return Answer(code, {**body, "message": f"{reason} (scripted)"}, headers)


@dataclass
class Script:
    """Answers in order (the last repeats) and records what was asked, when, and with which token."""

    answers: list[Answer]
    seen: list[tuple[str, str, float, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, method: str, path: str, auth: str | None) -> Answer:
        with self.lock:
            self.seen.append((method, path, time.monotonic(), auth))
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def gaps(self) -> list[float]:
        return [b[2] - a[2] for a, b in zip(self.seen, self.seen[1:], strict=False)]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            answer = script.next(self.command, self.path.split("?")[0], self.headers.get("Authorization"))
            if isinstance(answer.body, list):  # a watch stream: one JSON event per line
                payload = b"".join(json.dumps(e).encode() + b"\n" for e in answer.body)
            else:
                payload = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(script: Script, port: int = 0, *, delay_s: float = 0.0) -> Iterator[int]:
    """A server on loopback answering ``script``; with ``delay_s`` it starts listening only then."""
    holder: dict[str, ThreadingHTTPServer] = {}
    started = threading.Event()

    def run() -> None:
        time.sleep(delay_s)
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(script))
        server.daemon_threads = True
        holder["server"] = server
        started.set()
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not delay_s:
        started.wait(5)
    try:
        yield port or holder["server"].server_address[1]
    finally:
        started.wait(5)
        holder["server"].shutdown()
        holder["server"].server_close()
        thread.join(5)


@contextmanager
def kube_api(port: int, retry: RetryPolicy = FAST) -> Iterator[KubeApi]:
    cfg = Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.api_key = {"authorization": BEARER}
    client = ApiClient(cfg)
    try:
        yield KubeApi(client, timeout_s=5, retry=retry)
    finally:
        client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_429_waits_what_retry_after_asks_then_succeeds() -> None:
    script = Script([status(429, "TooManyRequests", **{"Retry-After": "1"}), Answer(200, OK)])
    with serving(script) as port, kube_api(port) as api:
        assert api.get("/api/v1/namespaces/ns/pods/p") == OK
        assert api.requests == 2  # each attempt is a request
    assert len(script.seen) == 2
    assert 0.9 <= script.gaps()[0] < 3.0  # the server's 1 s, not the 0.05 s backoff
    assert {auth for *_, auth in script.seen} == {BEARER}  # every attempt authenticated


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_a_5xx_is_retried_with_backoff(code: int) -> None:
    script = Script([status(code, "InternalError"), status(code, "InternalError"), Answer(200, OK)])
    with serving(script) as port, kube_api(port) as api:
        assert api.replace("/api/v1/namespaces/ns/pods/p", OK) == OK
    assert len(script.seen) == 3
    assert all(0.04 <= gap < 1.0 for gap in script.gaps())


@pytest.mark.parametrize(
    ("code", "reason"), [(400, "BadRequest"), (403, "Forbidden"), (404, "NotFound"), (409, "Conflict")]
)
def test_other_4xx_fail_at_once(code: int, reason: str) -> None:
    script = Script([status(code, reason), Answer(200, OK)])
    with serving(script) as port, kube_api(port) as api, pytest.raises(KubeError) as err:
        api.get("/api/v1/namespaces/ns/pods/p")
    assert (err.value.status, err.value.reason) == (code, reason)
    assert len(script.seen) == 1


def test_a_create_is_repeated_only_when_it_surely_was_not_acted_on() -> None:
    # A 500 on a create may have created the object: repeating it could meet itself as a 409.
    script = Script([status(500, "InternalError"), Answer(201, OK)])
    with serving(script) as port, kube_api(port) as api, pytest.raises(KubeError) as err:
        api.create("/api/v1/namespaces/ns/pods", OK)
    assert err.value.status == 500 and len(script.seen) == 1
    # 429, and a 5xx that carries Retry-After, were refused before anything happened.
    script = Script(
        [
            status(429, "TooManyRequests"),
            status(503, "ServiceUnavailable", **{"Retry-After": "0"}),
            Answer(201, OK),
        ]
    )
    with serving(script) as port, kube_api(port) as api:
        assert api.create("/api/v1/namespaces/ns/pods", OK) == OK
    assert [m for m, *_ in script.seen] == ["POST"] * 3


def test_retries_stop_after_the_attempts() -> None:
    script = Script([status(503, "ServiceUnavailable")])
    policy = RetryPolicy(attempts=3, max_delay_s=10.0, backoff_s=0.05, max_backoff_s=0.1)
    with serving(script) as port, kube_api(port, policy) as api, pytest.raises(KubeError) as err:
        api.get("/api/v1/namespaces/ns/pods")
    assert err.value.status == 503
    assert len(script.seen) == 3


def test_a_retry_after_beyond_the_time_budget_fails_now_instead_of_sleeping() -> None:
    script = Script([status(429, "TooManyRequests", **{"Retry-After": "30"})])
    policy = RetryPolicy(attempts=5, max_delay_s=2.0)
    started = time.monotonic()
    with serving(script) as port, kube_api(port, policy) as api, pytest.raises(KubeError) as err:
        api.get("/api/v1/namespaces/ns/pods")
    assert err.value.status == 429 and err.value.retry_after == 30.0
    assert len(script.seen) == 1
    assert time.monotonic() - started < 2.0


def test_a_connection_error_is_retried_until_the_server_answers() -> None:
    """Nothing listens on the port for the first half second (an apiserver restarting)."""
    port = free_port()
    script = Script([Answer(200, OK)])
    policy = RetryPolicy(attempts=20, max_delay_s=10.0, backoff_s=0.1, max_backoff_s=0.2)
    with serving(script, port, delay_s=0.5), kube_api(port, policy) as api:
        started = time.monotonic()
        assert api.create("/api/v1/namespaces/ns/pods", OK) == OK  # never sent, so even a create
        assert time.monotonic() - started >= 0.3
        assert api.requests >= 2
    assert len(script.seen) == 1


def test_without_a_server_it_gives_up_within_its_bounds() -> None:
    port = free_port()
    policy = RetryPolicy(attempts=3, max_delay_s=10.0, backoff_s=0.05, max_backoff_s=0.1)
    with kube_api(port, policy) as api, pytest.raises(urllib3.exceptions.MaxRetryError) as err:
        api.get("/api/v1/namespaces/ns/pods")
    assert isinstance(err.value.reason, urllib3.exceptions.NewConnectionError)  # refused, as it was
    assert api.requests == 3


def test_opening_a_watch_is_retried_and_its_events_stream() -> None:
    events = [{"type": "ADDED", "object": OK}, {"type": "BOOKMARK", "object": {"metadata": {}}}]
    script = Script([status(503, "ServiceUnavailable"), Answer(200, events)])
    with serving(script) as port, kube_api(port) as api:
        got = list(api.watch("/api/v1/namespaces/ns/pods", resource_version="1", timeout_s=5))
    assert got == events
    assert len(script.seen) == 2


def test_retry_after_is_seconds_or_an_http_date() -> None:
    assert retry_after({"Retry-After": "7"}) == 7.0
    assert retry_after({"Retry-After": "-3"}) == 0.0
    in_five = retry_after({"Retry-After": email.utils.formatdate(time.time() + 5, usegmt=True)})
    assert in_five is not None and 3.0 <= in_five <= 5.0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({}) is None and retry_after(None) is None
