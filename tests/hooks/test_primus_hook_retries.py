"""The hook's retry policy (the control client's), against a real master: a connection error is retried
until the master answers, a 4xx fails at once with the master's message, and a 429 or 503 is retried
— after ``Retry-After`` when the server sends one. A real master never answers 429 or 503 on demand,
so those go through ``FlakyProxy``: a real HTTP server on loopback that answers a scripted status
first and then forwards to the master."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from airflow_provider_primus.hooks.primus import PrimusError, PrimusHook
from airflow_provider_primus.master.store import modify
from tests.master.conftest import JobWorld
from tests.master.test_master import running

pytestmark = pytest.mark.timeout(240)


FORWARDED = ("authorization", "content-type")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class FlakyProxy:
    """Answers the next scripted statuses (429, 503, …) itself, then forwards to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.script: list[tuple[int, dict[str, str]]] = []
        self.answers: list[tuple[float, int]] = []  # (monotonic time, status) of every request
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    scripted = proxy.script.pop(0) if proxy.script else None
                if scripted is not None:
                    status, headers = scripted
                    payload = json.dumps({"detail": f"scripted {status}"}).encode()
                else:
                    response = httpx.request(
                        self.command,
                        proxy.upstream + self.path,
                        content=body,
                        headers={k: v for k, v in self.headers.items() if k.lower() in FORWARDED},
                        timeout=10.0,
                    )
                    status, headers, payload = response.status_code, {}, response.content
                with proxy._lock:
                    proxy.answers.append((time.monotonic(), status))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _handle
            do_POST = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def fail_next(self, *answers: tuple[int, dict[str, str]]) -> None:
        with self._lock:
            self.script.extend(answers)
            self.answers.clear()

    def statuses(self) -> list[int]:
        return [status for _, status in self.answers]

    def gaps(self) -> list[float]:
        times = [t for t, _ in self.answers]
        return [b - a for a, b in itertools.pairwise(times)]

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxied(job_world: JobWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlakyProxy]:
    """A running job whose control API is reached through a ``FlakyProxy`` (the connection's fixed
    endpoint), its token read from the job's file as usual."""
    PrimusHook().submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        record = PrimusHook().wait_for_master("job")
        with FlakyProxy(record.status["master"]["api"]) as proxy:
            conn = {
                "conn_type": "primus",
                "host": "127.0.0.1",
                "port": proxy.port,
                "extra": {"home": str(job_world.home)},
            }
            monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_PROXY", json.dumps(conn))
            yield proxy


def test_a_connection_error_is_retried_until_the_master_answers(job_world: JobWorld) -> None:
    hook = PrimusHook(retries=8, backoff_s=0.2)
    hook.submit_job(job_world.job(follow=True), start=False)
    away = f"http://127.0.0.1:{closed_port()}"  # where a master was: nothing listens there now
    modify(job_world.store, "job", lambda r: {"master": {"api": away}}, part="status")
    tried: list[str] = []
    endpoint = hook.endpoint
    with contextlib.ExitStack() as stack:

        def start_master_after_first_attempt(record: Any) -> str:
            url = endpoint(record)
            tried.append(url)
            if len(tried) == 1:  # the first attempt meets a closed port; the master starts meanwhile
                stack.enter_context(running(job_world))
            return url

        hook.endpoint = start_master_after_first_attempt  # type: ignore[method-assign]
        status = hook.get_status("job")
        assert status["phase"] in ("Pending", "Running")
        assert tried[0] == away and len(tried) >= 2 and tried[-1] != away
        hook.stop_job("job")


def test_a_4xx_fails_at_once_with_the_masters_message(job_world: JobWorld) -> None:
    hook = PrimusHook(retries=3, backoff_s=5.0)  # one retry would take 5 s: the time shows none happened
    hook.submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        hook.wait_for_master("job")
        started = time.monotonic()
        with pytest.raises(PrimusError, match="HTTP 422: role: Input should be 'data'") as refused:
            hook.scale("job", "bogus", 1)
        assert refused.value.status == 422
        with pytest.raises(PrimusError, match="HTTP 422: end must be after start"):
            asyncio.run(hook.aappend_window("job", "2026-05-02T00:00:00Z", "2026-05-01T00:00:00Z"))
        (job_world.home / "jobs" / "job" / "token").write_text("not-the-token")
        with pytest.raises(PrimusError, match="HTTP 401: missing or wrong job token") as unauthorized:
            hook.get_status("job")
        assert unauthorized.value.status == 401
        assert time.monotonic() - started < 3.0


def test_429_waits_for_retry_after_then_succeeds(proxied: FlakyProxy) -> None:
    hook = PrimusHook("primus_proxy", retries=3, backoff_s=0.05)
    proxied.fail_next((429, {"Retry-After": "1"}))
    assert hook.get_status("job")["phase"] in ("Pending", "Running")
    assert proxied.statuses() == [429, 200]
    assert proxied.gaps()[0] >= 0.95  # the server's second, not the 0.05-0.1 s backoff
    proxied.fail_next((429, {"Retry-After": "1"}))  # the async call (a trigger's) honours it too
    assert asyncio.run(hook.ascale("job", "data", 1))["accepted"] is True
    assert proxied.statuses() == [429, 200] and proxied.gaps()[0] >= 0.95


def test_5xx_is_retried_with_backoff_then_succeeds_or_gives_up(proxied: FlakyProxy) -> None:
    hook = PrimusHook("primus_proxy", retries=3, backoff_s=0.05)
    proxied.fail_next((503, {}), (502, {}))
    assert asyncio.run(hook.aget_status("job"))["phase"] in ("Pending", "Running")
    assert proxied.statuses() == [503, 502, 200]
    assert all(gap < 1.0 for gap in proxied.gaps())  # backoff, no Retry-After: fractions of a second
    proxied.fail_next(*[(503, {})] * 4)
    with pytest.raises(PrimusError, match=r"gave up after 3 retries: GET /v1/status: HTTP 503") as gave_up:
        hook.get_status("job")
    assert gave_up.value.status == 503 and proxied.statuses() == [503] * 4
