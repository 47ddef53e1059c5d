"""What every Primus operator shares: the hook, job naming, the job link, and deferring or polling.

Deferrable by default; when no triggerer is running (the API server's health report says so) an
operator polls in the worker instead of deferring into a queue nobody serves. Job names are derived
from (dag_id, task_id, run_id) and stable across retries, which is what makes a retried task
reattach to the job its first try started instead of starting another.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.links.job import JOB_XCOM_KEY, PrimusJobLink, job_url
from airflow_provider_primus.master.jobs import TERMINAL
from airflow_provider_primus.master.store import JobRecord


class PrimusJobFailed(RuntimeError):
    """The job ended other than Succeeded; its message says why."""


def job_name_for(*parts: str) -> str:
    """A DNS-1123 label (the job may become a Kubernetes object) unique to ``parts``."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug)[:54].rstrip("-")
    return f"{slug}-{digest}" if slug else f"job-{digest}"


def job_event(record: JobRecord) -> dict[str, Any]:
    """A job's state as the event ``PrimusJobTrigger`` would have sent for it."""
    status = record.status
    phase = status.get("phase")
    return {
        "status": "success" if phase == "Succeeded" else "error",
        "job": record.name,
        "phase": phase,
        "message": status.get("message") or "",
        "progress": status.get("progress") or {},
    }


def triggerer_available() -> bool:
    """False only when the API server answers and reports no healthy triggerer."""
    import httpx
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    if not base:
        return True  # nothing to ask: assume the usual deployment (and dag.test() runs triggers inline)
    try:
        health = httpx.get(f"{base.rstrip('/')}/api/v2/monitor/health", timeout=2.0).json()
    except Exception:
        return True
    return str((health.get("triggerer") or {}).get("status")) == "healthy"


class PrimusBaseOperator(BaseOperator):
    operator_extra_links = (PrimusJobLink(),)

    def __init__(
        self,
        *,
        primus_conn_id: str = PrimusHook.default_conn_name,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        backend: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if backend not in (None, "local", "kubernetes"):
            raise ValueError(f"backend must be 'local' or 'kubernetes', got {backend!r}")
        self.primus_conn_id = primus_conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        # None: the connection's settings (extra.backend, extra.namespace, extra.kubernetes_conn_id).
        self.backend = backend
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id

    @property
    def hook(self) -> PrimusHook:
        return PrimusHook(
            self.primus_conn_id,
            backend=self.backend,
            namespace=self.namespace,
            kubernetes_conn_id=self.kubernetes_conn_id,
        )

    def should_defer(self) -> bool:
        if not self.deferrable:
            return False
        if triggerer_available():
            return True
        self.log.warning("no healthy triggerer: polling in the worker instead of deferring")
        return False

    def push_job(self, context: Any, name: str) -> None:
        """As soon as the job exists: the task's "Primus job" link and downstream tasks find it."""
        context["ti"].xcom_push(key=JOB_XCOM_KEY, value=name)
        context["ti"].xcom_push(key=PrimusJobLink().xcom_key, value=job_url(name))

    def poll(self, name: str, done: Callable[[JobRecord], bool], report_every_s: float = 60.0) -> JobRecord:
        from airflow_provider_primus.triggers.job import progress_line

        last = 0.0
        while True:
            record = self.hook.get_job(name)
            if record is None:
                raise PrimusJobFailed(f"no job named {name!r}")
            if done(record) or record.status.get("phase") in TERMINAL:
                return record
            if time.monotonic() - last >= report_every_s:
                self.log.info("job %s: %s", name, progress_line(record.status))
                last = time.monotonic()
            time.sleep(self.poll_interval)

    def until_end(self, context: Any, name: str, report_every_s: float) -> dict[str, Any]:
        """Wait for the job's end — deferred (resuming in ``execute_complete``) or polling — and
        return what ``execute_complete`` makes of it."""
        from airflow_provider_primus.triggers.job import PrimusJobTrigger

        if self.should_defer():
            self.defer(
                trigger=PrimusJobTrigger(
                    name,
                    primus_conn_id=self.primus_conn_id,
                    poll_interval=self.poll_interval,
                    report_every_s=report_every_s,
                    hook_params=self.hook.hook_params,
                ),
                method_name="execute_complete",
            )
        event = job_event(self.poll(name, lambda _r: False, report_every_s))
        result: dict[str, Any] = self.execute_complete(context, event)  # type: ignore[attr-defined]
        return result

    def outcome(self, event: dict[str, Any]) -> dict[str, Any]:
        """The trigger's event as the task's result, or the job's error. A job that succeeded with
        quarantined tasks succeeds here too, with a warning and ``tasks_quarantined`` in the result
        (XCom), so a downstream task can tell a pass that left data out from a complete one."""
        from airflow_provider_primus.triggers.job import quarantine_summary

        if event.get("status") != "success":
            raise PrimusJobFailed(
                f"job {event.get('job')} {event.get('phase') or 'failed'}: {event.get('message') or ''}"
            )
        result = {k: v for k, v in event.items() if k in ("job", "phase", "progress", "window")}
        if "progress" in event:
            progress = event.get("progress") or {}
            result["tasks_quarantined"] = int(progress.get("tasks_quarantined") or 0)
            summary = quarantine_summary(progress)
            if summary:
                self.log.warning("job %s: %s", event.get("job"), summary)
        return result
