"""The master's control API: a small authenticated HTTP surface over the job object.

Every request needs ``Authorization: Bearer <job token>`` (compared in constant time; the token is
never logged). Writes do not act directly: they record intent in the job's ``desired`` part and the
reconcile loop carries it out, so a request that arrives while the master restarts is not lost and
the same request twice does no more than once. Bound to 127.0.0.1 unless the job says otherwise;
with the job's CA it serves HTTPS with a certificate naming the address it serves on.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_primus.contracts.base import UtcDatetime
from airflow_provider_primus.contracts.data import PrimusData, window_source
from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.data.service.auth import advertised_host
from airflow_provider_primus.master.metrics import CONTENT_TYPE
from airflow_provider_primus.master.store import JobStore, modify


class Control(Protocol):
    """What the API needs from the master."""

    def status_view(self) -> dict[str, Any]: ...
    def events_view(self, after: int, limit: int) -> list[dict[str, Any]]: ...
    def request(self, change: dict[str, Any]) -> dict[str, Any]: ...
    def window_source(self, source: str | None) -> str | None: ...


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScaleRequest(_Body):
    role: Literal["data", "trainer", "evaluator"]
    replicas: int = Field(ge=0)


class ResizeRequest(_Body):
    executor: str
    cpu: float | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, ge=16 * 2**20)


class WindowRequest(_Body):
    start: UtcDatetime
    end: UtcDatetime
    source: str | None = None  # the files source it belongs to (left out: the data's only one)


class SavepointRequest(_Body):
    id: str | None = None


def merge_request(desired: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """The job's ``desired`` with one request recorded: the loop acts on it at its next pass.
    Generations (``scale_gen``, ``resize_gen``) make a repeated request a new one; a window already
    there is not added twice."""
    desired = dict(desired)
    if "scale" in change:
        desired["scale"] = {**desired.get("scale", {}), **change["scale"]}
        desired["scale_gen"] = int(desired.get("scale_gen", 0)) + 1
    if "window" in change:
        windows = list(desired.get("windows", []))
        if change["window"] not in windows:
            windows.append(change["window"])
        desired["windows"] = windows
    if "resize" in change:
        desired["resize"] = {**desired.get("resize", {}), **change["resize"]}
        desired["resize_gen"] = int(desired.get("resize_gen", 0)) + 1
    if "savepoint" in change:
        desired["savepoints"] = [*desired.get("savepoints", []), change["savepoint"]]
    for key in ("suspend", "stop"):
        if key in change:
            desired[key] = change[key]
    return desired


class JobControl:
    """The API's side of the master: reads the job's status and events from the store and records
    requests in its ``desired`` part, waking the reconcile loop."""

    def __init__(
        self, store: JobStore, job: str, wake: threading.Event, data: PrimusData | None = None
    ) -> None:
        """``data``: the job's data document, which a window's source is checked against."""
        self.store, self.job, self.wake, self.data = store, job, wake, data

    def window_source(self, source: str | None) -> str | None:
        """The files source a window is appended for (``spec.data.window_source``); raises
        ``SpecError`` naming a source the data does not have as a files source."""
        return window_source(self.data, source) if self.data is not None else source

    def status_view(self) -> dict[str, Any]:
        status = dict(self.store.get(self.job).status)
        status.pop("data_progress", None)  # the dispatcher's bookkeeping, large and for the master only
        status.pop("history", None)  # the charts' series: the pages read it from the store
        return status

    def events_view(self, after: int, limit: int) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.store.events(self.job, after, limit)]

    def request(self, change: dict[str, Any]) -> dict[str, Any]:
        record = modify(self.store, self.job, lambda r: merge_request(r.desired, change))
        self.wake.set()
        return {"accepted": True, "request": change, "version": record.version}


def create_app(control: Control, token: str, metrics: Callable[[], bytes] | None = None) -> FastAPI:
    """``metrics``: the job's Prometheus exposition (``GET /metrics``, behind the same token: a
    scrape config names it as ``authorization: {credentials_file: …}``)."""
    app = FastAPI(title="Primus job control", docs_url=None, redoc_url=None, openapi_url=None)

    def authorized(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong job token")

    auth = [Depends(authorized)]

    @app.get("/v1/status", dependencies=auth)
    def status() -> dict[str, Any]:
        return control.status_view()

    if metrics is not None:
        scrape = metrics

        @app.get("/metrics", dependencies=auth)
        def prometheus() -> Response:
            return Response(content=scrape(), media_type=CONTENT_TYPE)

    @app.get("/v1/events", dependencies=auth)
    def events(after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return control.events_view(after, limit)

    @app.post("/v1/scale", dependencies=auth)
    def scale(body: ScaleRequest) -> dict[str, Any]:
        return control.request({"scale": {body.role: body.replicas}})

    @app.post("/v1/resize", dependencies=auth)
    def resize(body: ResizeRequest) -> dict[str, Any]:
        want = {k: v for k, v in (("cpu", body.cpu), ("memory", body.memory)) if v is not None}
        return control.request({"resize": {body.executor: want}})

    @app.post("/v1/windows", dependencies=auth)
    def append_window(body: WindowRequest) -> dict[str, Any]:
        if body.end <= body.start:
            raise HTTPException(status_code=422, detail="end must be after start")
        try:
            source = control.window_source(body.source)
        except SpecError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        window = {"start": body.start.isoformat(), "end": body.end.isoformat()}
        return control.request({"window": {**window, "source": source} if source else window})

    @app.post("/v1/savepoint", dependencies=auth)
    def savepoint(body: SavepointRequest) -> dict[str, Any]:
        # A random tail: requests without an id in the same millisecond are distinct savepoints.
        sp = body.id or f"sp-{int(time.time() * 1000)}-{secrets.token_hex(3)}"
        return control.request({"savepoint": sp})

    @app.post("/v1/suspend", dependencies=auth)
    def suspend() -> dict[str, Any]:
        return control.request({"suspend": True})

    @app.post("/v1/resume", dependencies=auth)
    def resume() -> dict[str, Any]:
        return control.request({"suspend": False})

    @app.post("/v1/stop", dependencies=auth)
    def stop() -> dict[str, Any]:
        return control.request({"stop": True})

    return app


class ApiServer:
    """uvicorn in a thread, on a socket we bind ourselves (so the port is known before serving).

    ``tls``: the certificate and key files to serve HTTPS with (uvicorn reads files, so the master
    writes its certificate 0600 beside the job's CA); ``advertise``: the address clients dial, when
    it is not the one bound (a wildcard in a pod)."""

    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: tuple[Path, Path] | None = None,
        advertise: str | None = None,
    ) -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        self.advertise = advertise or host
        self.tls = tls is not None
        certfile, keyfile = (str(tls[0]), str(tls[1])) if tls else (None, None)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="primus-control-api", daemon=True)

    @property
    def url(self) -> str:
        # Bound to every interface (a pod asked for it): the pod's IP, which clients can dial.
        advertised = advertised_host(self.advertise)
        host = f"[{advertised}]" if ":" in advertised else advertised
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def _serve(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.sock.close()
