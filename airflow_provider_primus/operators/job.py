"""Operators over Primus jobs: submit (or reattach), the long-running streaming trainer, appending a
planned window to it, and manual scaling. Thin: they reach jobs through the hook only, wait through
``PrimusBaseOperator.wait_for`` (deferred to ``PrimusJobTrigger``, or polling) and leave what an event
means, and what a kill does, to ``outcome.py``.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.data import Window
from airflow_provider_primus.contracts.loader import read_document
from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.hooks.primus import JobExists
from airflow_provider_primus.operators.base import PrimusBaseOperator, job_name_for
from airflow_provider_primus.operators.outcome import PrimusJobFailed, end_event


def run_labels(dag_id: str, task_id: str, run_id: str) -> dict[str, str]:
    """Labels naming the task run; values made valid Kubernetes label values (63 characters of
    ``[A-Za-z0-9._-]``, alphanumeric at both ends) with a digest when that changed them."""
    return {
        "airflow.dag_id": label_value(dag_id),
        "airflow.task_id": label_value(task_id),
        "airflow.run_id": label_value(run_id),
    }


def label_value(value: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63].strip("-_.")
    if clean == value:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{clean[:54].strip('-_.')}-{digest}".lstrip("-")


class PrimusSubmitJobOperator(PrimusBaseOperator):
    """Run a PrimusJob to its end. The job is named after (dag_id, task_id, run_id) and labelled with
    them: a retry finds the job its first try started (by those labels) and waits for it again — a
    second job is never started while one runs; a job that failed is submitted afresh. Killing the
    task stops the job (on Kubernetes: deletes the PrimusJob, whose pods follow).

    ``backend="yarn"`` runs the job's executors as containers of a YARN application (the
    ResourceManager, queue and user from the connection's extra where the document is silent); a
    retry reattaches to the application by its tags, and killing the task kills the application.

    ``backend="kubernetes"`` submits the job as a PrimusJob resource through the cncf-kubernetes
    ``KubernetesHook`` of ``kubernetes_conn_id`` (in ``namespace``) and, with ``start_master``, starts
    the job's master as a driver pod.

    :param job: the PrimusJob document's path (templated).
    :param name: the job's name (templated; default: derived from dag_id, task_id and run_id).
    :param labels: more labels for the job (templated); ``airflow.dag_id/task_id/run_id`` are always set.
    :param wait: wait for the job's end; otherwise the task ends once the job is submitted.
    :param report_every_s: seconds between two progress lines in the task's log.
    :param start_master: start the job's master (off: something else runs it).

    And the parameters of ``PrimusBaseOperator``.
    """

    template_fields: Sequence[str] = ("job", "name", "labels")
    ui_color = "#d4e3f1"
    owns_job = True

    def __init__(
        self,
        *,
        job: str,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        wait: bool = True,
        report_every_s: float = 60.0,
        start_master: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.name = name
        self.labels = dict(labels or {})
        self.wait = wait
        self.start_master = start_master
        self.report_every_s = report_every_s

    def _name(self, context: Any) -> str:
        if self.name:
            return self.name
        return job_name_for(self.dag_id, self.task_id, str(context.get("run_id") or ""))

    def execute(self, context: Any) -> dict[str, Any]:
        name = self._name(context)
        labels = {
            **run_labels(self.dag_id, self.task_id, str(context.get("run_id") or "")),
            **self.labels,
        }
        hook = self.hook
        # Reattach by labels: the job this task's earlier try started, whatever it was named.
        tried = [r for r in hook.find_jobs(labels) if r.status.get("phase") not in TERMINAL]
        if tried:
            name = tried[0].name
        self._job_name = name
        record = hook.get_job(name)
        if record is not None and record.status.get("phase") == "Succeeded":
            self.log.info("job %s already succeeded (an earlier try): not running it again", name)
            self.push_job(context, name)
            return self.outcome(end_event(name, record.status))
        if record is not None and record.status.get("phase") in TERMINAL:
            self.log.info(
                "job %s ended %s in an earlier try: submitting it again", name, record.status["phase"]
            )
            hook.delete_job(name)
            record = None
        if record is None:
            try:
                hook.submit_job(self.job, name=name, labels=labels, start=self.start_master)
                self.log.info("submitted job %s", name)
            except JobExists:
                self.log.info("job %s was just submitted by another try: reattaching", name)
        else:
            self.log.info("reattaching to running job %s", name)
            if hook.backend.restart_master_on_reattach and self.start_master:
                # A master on a worker (YARN's) may be gone with it: the backend says to start one.
                hook.start_master(name)
        self.push_job(context, name)
        if not self.wait:
            return {"job": name}
        return self.wait_for(context, name, report_every_s=self.report_every_s)


class PrimusStreamingTrainerOperator(PrimusBaseOperator):
    """Keep the long-running streaming trainer of a model alive: start it once, reattach on a retry
    or after a lost worker (the job is named after the model, never after the run), and defer for as
    long as the job lives, logging its freshness, AUC and throughput every ``report_every_s``. A job
    that ended is started again and resumes from its checkpoints. A job stopped on purpose ends the
    task successfully; a trigger merely moved to another triggerer never stops the job, a cancelled
    task does.

    :param job: the streaming PrimusJob document's path (templated).
    :param model: the job's name (templated; default: the document's ``metadata.name``).
    :param report_every_s: seconds between two progress lines in the task's log.

    And the parameters of ``PrimusBaseOperator``.
    """

    template_fields: Sequence[str] = ("job", "model")
    ui_color = "#f1e3d4"
    owns_job = True
    long_running = True

    def __init__(
        self, *, job: str, model: str | None = None, report_every_s: float = 300.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.model = model
        self.report_every_s = report_every_s

    def execute(self, context: Any) -> dict[str, Any]:
        document = read_document(Path(self.job))
        name = self.model or str(document.get("metadata", {}).get("name"))
        if not (document.get("spec") or {}).get("follow"):
            self.log.warning("job %s does not set spec.follow: it will end at the stream's current end", name)
        record = self.hook.get_job(name)
        if record is not None and record.status.get("phase") in TERMINAL:
            self.log.info(
                "streaming job %s ended %s: starting it again (it resumes from its checkpoints)",
                name,
                record.status["phase"],
            )
            self.hook.delete_job(name)
            record = None
        if record is None:
            try:
                labels = {
                    "airflow.dag_id": self.dag_id,
                    "airflow.task_id": self.task_id,
                    "primus.model": name,
                }
                self.hook.submit_job(
                    document, name=name, labels=labels, base=Path(self.job).resolve().parent, keep_files=True
                )
                self.log.info("started streaming job %s", name)
            except JobExists:
                self.log.info("streaming job %s was just started elsewhere: reattaching", name)
        else:
            self.log.info("streaming job %s is %s: reattaching", name, record.status.get("phase"))
        self._job_name = name
        self.push_job(context, name)
        return self.wait_for(context, name, report_every_s=self.report_every_s)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        result = self.outcome(event)
        if result.get("phase") == "Stopped":  # stopped on purpose: the trainer's task ends with it
            self.log.info("streaming job %s was stopped", event.get("job"))
        return result


class PrimusAppendWindowOperator(PrimusBaseOperator):
    """Join the run's historical window to a running job, optionally waiting (deferred) until every
    task of the window is consumed. Appending the same window again is a no-op: the master keeps one
    copy and task IDs are content-derived, so a re-run only waits. The job outlives the window: killing
    this task never stops it.

    :param job_name: the running job's name (templated).
    :param start: ISO 8601 start of the window (templated; default: the run's data interval start).
    :param end: ISO 8601 end, exclusive (templated; default: the run's data interval end).
    :param source: the files source the window belongs to (templated); may be left out when the
        job's data has one files source. A name that is not one of the job's files sources fails the
        task with an error naming it.
    :param wait: wait until every task of the window is consumed.
    :param job_timeout_s: how long to wait for the job to be running before failing.

    And the parameters of ``PrimusBaseOperator``.
    """

    template_fields: Sequence[str] = ("job_name", "start", "end", "source")
    ui_color = "#e8d4f1"

    def __init__(
        self,
        *,
        job_name: str,
        start: str = "{{ data_interval_start.isoformat() }}",
        end: str = "{{ data_interval_end.isoformat() }}",
        source: str | None = None,
        wait: bool = True,
        job_timeout_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.start = start
        self.end = end
        self.source = source
        self.wait = wait
        self.job_timeout_s = job_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        window = Window.model_validate({"start": self.start, "end": self.end})
        start, end = window.start.isoformat(), window.end.isoformat()  # as the master records it
        self._wait_for_job()
        result = self.hook.append_window(self.job_name, start, end, self.source or None)
        # The master names the source it appended for (the data's only files source when left out).
        sent = dict((result.get("request") or {}).get("window") or {"start": start, "end": end})
        self.log.info(
            "window %s..%s of source %s sent to job %s (version %s)",
            start,
            end,
            sent.get("source"),
            self.job_name,
            result.get("version"),
        )
        self.push_job(context, self.job_name)
        if not self.wait:
            return {"job": self.job_name, "window": sent}
        return self.wait_for(context, self.job_name, window=sent)

    def _wait_for_job(self) -> None:
        """The streaming job may still be starting (its DAG run queued a moment after this one):
        wait up to ``job_timeout_s`` for it to exist with a master, rather than fail the day."""
        deadline = time.monotonic() + self.job_timeout_s
        while True:
            record = self.hook.get_job(self.job_name)
            if record is not None and record.status.get("phase") in TERMINAL:
                raise PrimusJobFailed(f"job {self.job_name} has ended ({record.status['phase']})")
            if record is not None and (record.status.get("master") or {}).get("api"):
                return
            if time.monotonic() > deadline:
                raise PrimusJobFailed(f"job {self.job_name} is not running after {self.job_timeout_s:.0f}s")
            self.log.info("waiting for job %s to start", self.job_name)
            time.sleep(min(5.0, self.poll_interval))


class PrimusScaleOperator(PrimusBaseOperator):
    """Ask a running job for a number of executors of one role (a manual override of the autoscaler).

    :param job_name: the running job's name (templated).
    :param role: ``data``, ``trainer`` or ``evaluator`` (templated).
    :param replicas: the number of executors wanted (templated).

    And the parameters of ``PrimusBaseOperator``.
    """

    template_fields: Sequence[str] = ("job_name", "role", "replicas")

    def __init__(self, *, job_name: str, role: str = "data", replicas: int | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.role = role
        self.replicas = replicas

    def execute(self, context: Any) -> dict[str, Any]:
        result = self.hook.scale(self.job_name, self.role, int(self.replicas))
        self.log.info("asked job %s for %s %s executors", self.job_name, self.replicas, self.role)
        return result
