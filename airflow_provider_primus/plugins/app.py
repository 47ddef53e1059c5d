"""The Primus jobs web app, mounted by Airflow's API server under ``/primus`` (see ``plugin.py``).

Read-only views over the job store (``$PRIMUS_HOME/jobs.sqlite``, or ``store_path``; the
PrimusJob resources of a namespace when the ``primus_default`` connection says
``backend: kubernetes``, or any ``JobStore`` passed as ``store``):

* ``GET /jobs`` — every job: phase, labels, running executors, acknowledged rows, trainer step;
* ``GET /jobs/{name}`` — one job: its stream AUC beside its baselines' (jobs labelled
  ``primus.dev/baseline-for: <name>``), executors with allotments and telemetry, scaling events
  (timeline, allotment and replica charts replayed from the event log), data progress per window in
  time order, training metrics with charts over the statuses this server has seen;
* ``GET /api/jobs`` and ``GET /api/jobs/{name}`` — the same as JSON: a summary per job, and one job's
  status without ``data_progress`` (as ``primus status --json`` and the control API give it).

Every route depends on Airflow's authentication (``auth.py``). The store is opened read-only in
spirit: nothing here writes to it, and a missing store file is reported rather than created.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_primus.master.store import (
    JobNotFound,
    JobRecord,
    JobStore,
    SqliteJobStore,
    default_store_path,
)
from airflow_provider_primus.master.store_health import read_note, stale_reason
from airflow_provider_primus.plugins import html, views
from airflow_provider_primus.plugins.auth import airflow_access_dependency, login_url
from airflow_provider_primus.plugins.history import History, Sampler
from airflow_provider_primus.plugins.status import BASELINE_LABEL, as_map, read_status

DEFAULT_SAMPLE_S = 5.0


class _Stores:
    """The given store, or one ``SqliteJobStore`` per path, opened on first use, and only once the
    file exists."""

    def __init__(self, path: Path | None, store: JobStore | None = None) -> None:
        self.configured = path
        self.fixed = store
        self._store: SqliteJobStore | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path | str:
        if self.fixed is not None:
            return f"namespace {getattr(self.fixed, 'namespace', '?')}"
        return self.configured or default_store_path()

    def get(self) -> JobStore | None:
        if self.fixed is not None:
            return self.fixed
        path = self.configured or default_store_path()
        with self._lock:
            if self._store is None or self._store.path != path:
                self._store = SqliteJobStore(path) if path.exists() else None
            return self._store


def connection_store() -> JobStore | None:
    """The Kubernetes store when the ``primus_default`` connection selects that backend."""
    try:
        from airflow_provider_primus.hooks.primus import PrimusHook

        hook = PrimusHook()
        return hook.store if hook.kubernetes else None
    except Exception:  # no Airflow context or connection: the local store
        return None


def _base(request: Request) -> str:
    """The prefix the app is mounted under (``/primus``), for links that work behind any mount."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _wants_html(request: Request) -> bool:
    path = request.url.path.removeprefix(_base(request))
    return not path.startswith("/api/")


def job_summary(record: JobRecord) -> dict[str, Any]:
    status = record.status
    progress = as_map(status.get("progress"))
    executors = as_map(status.get("executors"))
    return {
        "name": record.name,
        "phase": status.get("phase", "Pending"),
        "message": status.get("message", ""),
        "labels": record.labels,
        "executors_running": sum(1 for ex in executors.values() if as_map(ex).get("state") == "running"),
        "acked_rows": progress.get("acked_rows"),
        "trainer_step": progress.get("trainer_step"),
        "created": record.created,
        "updated": status.get("updated"),
    }


def create_app(
    store_path: Path | None = None,
    *,
    store: JobStore | None = None,
    sample_s: float | None = DEFAULT_SAMPLE_S,
) -> FastAPI:
    """The app. ``store_path`` defaults to ``$PRIMUS_HOME/jobs.sqlite`` (resolved per request, so
    the environment of the API server decides). ``sample_s``: how often a background thread reads
    the running jobs' statuses into the chart history once the app has served a request (None:
    only page views feed it)."""
    app = FastAPI(title="Primus jobs", docs_url=None, redoc_url=None, openapi_url=None)
    stores = _Stores(store_path, store)
    history = History()
    sampler = Sampler(history, stores.get, sample_s) if sample_s else None
    app.state.history, app.state.sampler, app.state.stores = history, sampler, stores
    auth = [Depends(airflow_access_dependency())]

    def store_or_none() -> JobStore | None:
        if sampler is not None:
            sampler.ensure_started()
        return stores.get()

    def record_or_404(name: str) -> tuple[JobStore, JobRecord]:
        store = store_or_none()
        if store is None:
            raise HTTPException(
                status_code=404, detail=f"no job named {name!r} (no job store at {stores.path})"
            )
        try:
            return store, store.get(name)
        except JobNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not _wants_html(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        if exc.status_code == 401 and (target := login_url(request)) is not None:
            return RedirectResponse(target, status_code=303)
        body = html.error_page(exc.status_code, str(exc.detail), base=_base(request))
        return HTMLResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.get("/", dependencies=auth, include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        return RedirectResponse(f"{_base(request)}/jobs", status_code=303)

    @app.get("/jobs", dependencies=auth, response_class=HTMLResponse)
    def jobs(request: Request) -> HTMLResponse:
        store = store_or_none()
        records = store.find() if store is not None else []
        note = "" if store is not None else f"No job store at {stores.path} yet."
        return HTMLResponse(views.jobs_page(records, base=_base(request), now=time.time(), note=note))

    @app.get("/jobs/{name}", dependencies=auth, response_class=HTMLResponse)
    def job(request: Request, name: str) -> HTMLResponse:
        store, record = record_or_404(name)
        status = read_status(record)  # once: the history and the page draw the same
        points = history.observe(record, status)
        events = history.events(store, record)
        baselines = [(b, history.observe(b)) for b in store.find({BASELINE_LABEL: record.name})]
        now = time.time()
        html = views.job_page(
            record,
            events,
            points,
            base=_base(request),
            now=now,
            sample_s=sample_s,
            baselines=baselines,
            stale=stale_reason(record.status, read_note(store, name), now),
            status=status,
        )
        return HTMLResponse(html)

    @app.get("/api/jobs", dependencies=auth)
    def api_jobs() -> list[dict[str, Any]]:
        store = store_or_none()
        return [job_summary(r) for r in (store.find() if store is not None else [])]

    @app.get("/api/jobs/{name}", dependencies=auth)
    def api_job(name: str) -> dict[str, Any]:
        store, record = record_or_404(name)
        history.observe(record)
        view = {k: v for k, v in record.status.items() if k != "data_progress"}
        if stale := stale_reason(record.status, read_note(store, name), time.time()):
            view["stale"] = stale
        return view

    return app
