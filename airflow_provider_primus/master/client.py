"""The one client of a job's control API: the CLI, the Airflow hook and its triggers all call it.

Every call exists as a sync and an async method (the Databricks provider's pattern): a trigger awaits
the async one and never blocks the triggerer's event loop, not even to read the job's token.

Retries follow the master's contract. Its writes are recorded intent, so repeating one does no more
than once: a request that found no master (not started yet, restarting on a new port, or
unreachable), a 429 or a 5xx is worth another try, after exponential backoff with jitter, or after
the server's ``Retry-After`` when it sent one. Any other 4xx is final at once (a wrong token, a bad
scale request): retrying would get the same answer, and the caller sees the server's message.
The CLI makes one attempt (``retries=0``, a person is waiting); the hook retries.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from airflow_provider_primus.contracts.status import Event, JobStatus
from airflow_provider_primus.errors import PrimusError

log = logging.getLogger(__name__)

# A server may ask for any pause; a caller waiting longer than this is better served by an error.
MAX_RETRY_AFTER_S = 300.0

# Where the master is and the job's token: fixed, or looked up on each attempt (a restarted master
# listens on a new port, so a retry must read the job's status again).
Resolvable = str | Callable[[], str]
# The job's CA certificate (PEM), for a master that serves HTTPS: fixed or looked up (None: none).
CaSource = bytes | Callable[[], bytes | None] | None


class Logger(Protocol):
    def info(self, msg: str, /, *args: Any) -> Any: ...


class ControlError(PrimusError):
    """A control call failed for good: refused by the master, or no answer after the retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Transient(PrimusError):
    """Worth another try: no master yet or none reachable, or an overloaded or failing one (429, 5xx).

    Raised by a resolver too, when the job has no master to call yet."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def server_message(response: httpx.Response) -> str:
    """What the server said: FastAPI's ``detail`` (a string, or its validation errors) or the body."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', ())[1:]) or 'body'}: {d.get('msg')}"
            if isinstance(d, dict)
            else str(d)
            for d in detail
        )
    return response.text[:500]


class _Wait:
    """Exponential backoff with jitter, unless the server said when to come back."""

    def __init__(self, backoff_s: float, max_backoff_s: float) -> None:
        self.backoff = wait_exponential(multiplier=backoff_s, max=max_backoff_s) + wait_random(0, backoff_s)

    def __call__(self, state: RetryCallState) -> float:
        backoff: float = self.backoff(state)
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return min(max(exc.retry_after, backoff), MAX_RETRY_AFTER_S)
        return backoff


class ControlClient:
    """A job's control API.

    :param url: the master's base URL, or a function that looks it up (called on every attempt; it
        may raise ``Transient`` while the job has no master).
    :param token: the job's token, or a function that reads it (called on every attempt).
    :param timeout_s: bound on each HTTP request.
    :param retries: further attempts after a transient failure (0: one attempt).
    :param backoff_s: the first backoff; it doubles per retry, plus up to as much again of jitter.
    :param max_backoff_s: the longest backoff between two attempts (``Retry-After`` may ask for more).
    :param logger: where retries are logged (the hook passes its task log).
    :param ca: the job's CA certificate (PEM), or a function that reads it: an ``https`` master is
        verified against it and nothing else (``tls.py``); without it such a master is refused.
    """

    def __init__(
        self,
        url: Resolvable,
        token: Resolvable,
        timeout_s: float = 10.0,
        *,
        retries: int = 0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        logger: Logger | None = None,
        ca: CaSource = None,
    ) -> None:
        self._url = url
        self._token = token
        self._ca = ca
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.log: Logger = logger or log

    @property
    def url(self) -> str:
        return (self._url() if callable(self._url) else self._url).rstrip("/")

    # --- one attempt, and the retry loop around it ------------------------------------------------

    def _target(self) -> tuple[str, dict[str, str], ssl.SSLContext | bool]:
        token = self._token() if callable(self._token) else self._token
        url = self.url
        # No token, no header (``Bearer `` alone is not a valid header value): the master says 401.
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return url, headers, self._verify(url)

    def _verify(self, url: str) -> ssl.SSLContext | bool:
        """What an ``https`` master must prove: a certificate from the job's CA for its address."""
        if not url.startswith("https://"):
            return True  # plain HTTP: nothing to verify (a job without TLS, on loopback)
        ca = self._ca() if callable(self._ca) else self._ca
        if not ca:
            raise ControlError(
                f"the job's master at {url} serves TLS but no CA certificate of the job was given "
                "to verify it (its tls/ca.crt, or the job's TLS Secret on Kubernetes)"
            )
        from airflow_provider_primus.tls import verify_context  # cryptography: only when needed

        return verify_context(ca)

    @staticmethod
    def _transport_error(url: str, exc: httpx.TransportError) -> Exception:
        """A refused certificate is final (another job's or no job's: retrying cannot help); a
        plain-HTTP call that a TLS server hangs up on says so; anything else is worth a retry."""
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(exc.__context__, ssl.SSLCertVerificationError):
            return ControlError(
                f"the job's master at {url} presented a certificate that the job's CA did not "
                f"issue (another job's server, or not the job's CA): {text}"
            )
        if url.startswith("http://") and isinstance(exc, httpx.RemoteProtocolError):
            return Transient(
                f"the job's master at {url} is not reachable: {text} (does it serve TLS? use https "
                "and the job's CA)"
            )
        return Transient(f"the job's master at {url} is not reachable: {text}")

    @staticmethod
    def _answer(method: str, path: str, response: httpx.Response) -> Any:
        status = response.status_code
        if status == 429 or status >= 500:
            raise Transient(
                f"{method} /v1/{path}: HTTP {status}: {server_message(response)}",
                status=status,
                retry_after=retry_after_s(response.headers.get("retry-after")),
            )
        if status >= 400:
            raise ControlError(f"{method} /v1/{path}: HTTP {status}: {server_message(response)}", status)
        return response.json()

    def _once(self, method: str, path: str, body: dict[str, Any] | None, params: dict[str, Any]) -> Any:
        url, headers, verify = self._target()
        try:
            response = httpx.request(
                method,
                f"{url}/v1/{path}",
                json=body,
                params=params or None,
                headers=headers,
                timeout=self.timeout_s,
                verify=verify,
            )
        except httpx.TransportError as exc:
            raise self._transport_error(url, exc) from exc
        return self._answer(method, path, response)

    async def _aonce(
        self, method: str, path: str, body: dict[str, Any] | None, params: dict[str, Any]
    ) -> Any:
        plain = not callable(self._url) and not callable(self._token) and not callable(self._ca)
        url, headers, verify = self._target() if plain else await asyncio.to_thread(self._target)
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, verify=verify) as client:
                response = await client.request(
                    method, f"{url}/v1/{path}", json=body, params=params or None, headers=headers
                )
        except httpx.TransportError as exc:
            raise self._transport_error(url, exc) from exc
        return self._answer(method, path, response)

    def _policy(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.retries + 1),
            "wait": _Wait(self.backoff_s, self.max_backoff_s),
            "retry": retry_if_exception_type(Transient),
            "before_sleep": self._log_retry,
            "reraise": True,
        }

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        pause = state.next_action.sleep if state.next_action is not None else 0.0
        self.log.info("transient error (%s); retrying in %.1fs", exc, pause)

    def _gave_up(self, exc: Transient) -> ControlError:
        if not self.retries:
            return ControlError(str(exc), exc.status)
        return ControlError(f"gave up after {self.retries} retries: {exc}", exc.status)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
        try:
            return Retrying(**self._policy())(self._once, method, path, body, params)
        except Transient as exc:
            raise self._gave_up(exc) from exc

    async def _acall(self, method: str, path: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
        try:
            return await AsyncRetrying(**self._policy())(self._aonce, method, path, body, params)
        except Transient as exc:
            raise self._gave_up(exc) from exc

    # --- the API: each call sync and async ---------------------------------------------------------

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "status")
        return result

    async def astatus(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("GET", "status")
        return result

    def job_status(self) -> JobStatus:
        """The status as the typed model every reader shares (contracts/status.py)."""
        return JobStatus.read(self.status())

    async def ajob_status(self) -> JobStatus:
        return JobStatus.read(await self.astatus())

    def job_events(self, after: int = 0, limit: int = 1000) -> list[Event]:
        """The events as typed models (their payloads per type: ``event.payload()``)."""
        return [Event.model_validate(e) for e in self.events(after, limit)]

    def events(self, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "events", after=after, limit=limit)
        return result

    async def aevents(self, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._acall("GET", "events", after=after, limit=limit)
        return result

    def scale(self, role: str, replicas: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "scale", {"role": role, "replicas": replicas})
        return result

    async def ascale(self, role: str, replicas: int) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("POST", "scale", {"role": role, "replicas": replicas})
        return result

    def resize(self, executor: str, cpu: float | None = None, memory: int | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "POST", "resize", {"executor": executor, "cpu": cpu, "memory": memory}
        )
        return result

    async def aresize(
        self, executor: str, cpu: float | None = None, memory: int | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall(
            "POST", "resize", {"executor": executor, "cpu": cpu, "memory": memory}
        )
        return result

    def append_window(self, start: str, end: str, source: str | None = None) -> dict[str, Any]:
        """``source``: the files source the window belongs to (left out: the data's only one)."""
        body = {"start": start, "end": end, "source": source}
        result: dict[str, Any] = self._call("POST", "windows", body)
        return result

    async def aappend_window(self, start: str, end: str, source: str | None = None) -> dict[str, Any]:
        body = {"start": start, "end": end, "source": source}
        result: dict[str, Any] = await self._acall("POST", "windows", body)
        return result

    def savepoint(self, savepoint_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "savepoint", {"id": savepoint_id})
        return result

    async def asavepoint(self, savepoint_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("POST", "savepoint", {"id": savepoint_id})
        return result

    def suspend(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "suspend")
        return result

    async def asuspend(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("POST", "suspend")
        return result

    def resume(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "resume")
        return result

    async def aresume(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("POST", "resume")
        return result

    def stop(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "stop")
        return result

    async def astop(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._acall("POST", "stop")
        return result
