"""What every Primus operator shares: the hook, job naming, the job link, and deferring or polling.

Deferrable when Airflow's ``[operators] default_deferrable`` says so (as the providers that ship with
Airflow), or per task; when no triggerer is running (the API server's health report says so) a
deferrable operator polls in the worker instead of deferring into a queue nobody serves. Either way
the wait ends on the same condition with the same result: both ask ``outcome.py``. Job names are
derived from (dag_id, task_id, run_id) and stable across retries, which is what makes a retried task
reattach to the job its first try started instead of starting another.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, conf

from airflow_provider_primus.hooks.primus import JobRecord, PrimusHook
from airflow_provider_primus.links.job import JOB_XCOM_KEY, PrimusJobLink, job_url
from airflow_provider_primus.operators.outcome import (
    PrimusJobFailed,
    end_event,
    progress_line,
    stops_job_on_kill,
    task_result,
    wait_event,
)

__all__ = ["PrimusBaseOperator", "PrimusJobFailed", "job_event", "job_name_for", "triggerer_available"]


def job_name_for(*parts: str) -> str:
    """A DNS-1123 label (the job may become a Kubernetes object) unique to ``parts``."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug)[:54].rstrip("-")
    return f"{slug}-{digest}" if slug else f"job-{digest}"


def job_event(record: JobRecord) -> dict[str, Any]:
    """A job's state as the event ``PrimusJobTrigger`` would have sent for its end."""
    return end_event(record.name, record.status)


def triggerer_available() -> bool:
    """False only when the API server answers and reports no healthy triggerer."""
    import httpx
    from airflow.configuration import conf as core_conf

    base = core_conf.get("api", "base_url", fallback="") or ""
    if not base:
        return True  # nothing to ask: assume the usual deployment (and dag.test() runs triggers inline)
    try:
        health = httpx.get(f"{base.rstrip('/')}/api/v2/monitor/health", timeout=2.0).json()
    except Exception:
        return True
    return str((health.get("triggerer") or {}).get("status")) == "healthy"


class PrimusBaseOperator(BaseOperator):
    """The parameters every Primus job operator takes.

    :param primus_conn_id: the ``primus`` connection.
    :param deferrable: wait in the triggerer (default: Airflow's ``[operators] default_deferrable``);
        without a healthy triggerer the operator polls in the worker instead.
    :param poll_interval: seconds between two reads of the job while waiting.
    :param backend: ``local``, ``kubernetes`` or ``yarn`` (default: the connection's).
    :param namespace: the Kubernetes namespace (default: the connection's).
    :param kubernetes_conn_id: the cncf-kubernetes connection (default: the connection's).
    """

    operator_extra_links = (PrimusJobLink(),)
    # Whether this task's kill stops its job, and whether the job has no end of its own: the cancel
    # policy's inputs (``outcome.stops_job_on_kill``).
    owns_job = False
    long_running = False

    def __init__(
        self,
        *,
        primus_conn_id: str = PrimusHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        backend: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if backend not in (None, "local", "kubernetes", "yarn"):
            raise ValueError(f"backend must be 'local', 'kubernetes' or 'yarn', got {backend!r}")
        self.primus_conn_id = primus_conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        # None: the connection's settings (extra.backend, extra.namespace, extra.kubernetes_conn_id).
        self.backend = backend
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self._job_name: str | None = None

    @cached_property
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

    def poll(
        self, name: str, window: Mapping[str, str] | None = None, report_every_s: float = 60.0
    ) -> dict[str, Any]:
        """Wait in the worker as ``PrimusJobTrigger`` waits in the triggerer; returns the same event."""
        last = 0.0
        while True:
            record = self.hook.get_job(name)
            status = record.status if record is not None else None
            event = wait_event(name, status, window)
            if event is not None:
                return event
            assert status is not None  # a missing job is an event
            if time.monotonic() - last >= report_every_s:
                self.log.info("job %s: %s", name, progress_line(status))
                last = time.monotonic()
            time.sleep(self.poll_interval)

    def wait_for(
        self,
        context: Any,
        name: str,
        *,
        window: Mapping[str, str] | None = None,
        report_every_s: float = 60.0,
    ) -> dict[str, Any]:
        """Wait for the job's end (or ``window``'s consumption) — deferred, resuming in
        ``execute_complete``, or polling — and return what ``execute_complete`` makes of it."""
        from airflow_provider_primus.triggers.job import PrimusJobTrigger

        if self.should_defer():
            self.defer(
                trigger=PrimusJobTrigger(
                    name,
                    primus_conn_id=self.primus_conn_id,
                    wait_for="window" if window is not None else "end",
                    window=dict(window) if window is not None else None,
                    poll_interval=self.poll_interval,
                    report_every_s=report_every_s,
                    stop_on_kill=self.owns_job,
                    long_running=self.long_running,
                    hook_params=self.hook.hook_params,
                ),
                method_name="execute_complete",
            )
        return self.execute_complete(context, self.poll(name, window, report_every_s))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        return self.outcome(event)

    def outcome(self, event: dict[str, Any]) -> dict[str, Any]:
        """The wait's event as the task's result (XCom), or the job's error: ``outcome.task_result``."""
        return task_result(event, self.log, long_running=self.long_running)

    def on_kill(self) -> None:
        """Killed while polling in the worker (a deferred task's kill reaches the trigger's
        ``on_kill``): stop the job when the cancel policy says so."""
        name = self._job_name
        # The task's state is not read here (None): a batch job is stopped with its task, while the
        # streaming job runs on for the retry that reattaches to it.
        if name and stops_job_on_kill(
            owns_job=self.owns_job, long_running=self.long_running, task_state=None
        ):
            self.log.info("task killed: cancelling job %s", name)
            self.hook.cancel_job(name)
