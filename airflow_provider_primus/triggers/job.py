"""``PrimusJobTrigger``: waits in the triggerer for a job to end, or for a window to be consumed.

Async all the way: the job object is read through the hook's async methods (the store read runs in
a thread, never on the event loop). Idempotent: running it twice reads the same job and yields the
same event. While it waits it logs the job's progress and the trainer's metrics (AUC, freshness,
samples/s) every ``report_every_s``. Cancelling the task stops the job (``on_kill``); a triggerer
restart does not (``cleanup`` keeps nothing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_primus.hooks.primus import PrimusError, PrimusHook
from airflow_provider_primus.master.jobs import TERMINAL

WAIT_FOR = ("end", "window")


def progress_line(status: dict[str, Any]) -> str:
    """One log line a person reads: phase, data, trainer step and its metrics."""
    p = status.get("progress") or {}
    metrics = p.get("trainer_metrics") or {}
    auc = (metrics.get("progressive") or {}).get("window_auc")
    fresh = (metrics.get("freshness_s") or {}).get("p50")
    running = sum(1 for e in (status.get("executors") or {}).values() if e.get("state") == "running")
    quarantined = f" ({p['tasks_quarantined']} quarantined)" if p.get("tasks_quarantined") else ""
    return (
        f"{status.get('phase')}: {running} executors; data {p.get('tasks_done')}/{p.get('tasks')} tasks"
        f"{quarantined}, {p.get('acked_rows')} rows; trainer step {p.get('trainer_step')}, "
        f"AUC {auc if auc is not None else '-'}, freshness p50 {fresh if fresh is not None else '-'} s, "
        f"{metrics.get('samples_per_s') or '-'} samples/s"
    )


def quarantine_summary(progress: dict[str, Any]) -> str | None:
    """What a task's log says when a job left data out: each quarantined task's file, the rows not
    trained and the error (the first few; the job page lists all). None when nothing was."""
    count = int(progress.get("tasks_quarantined") or 0)
    if not count:
        return None
    lines = [f"{count} data task{'s' if count != 1 else ''} quarantined; their rows were not trained:"]
    shown = list(progress.get("quarantine") or [])[:5]
    for q in shown:
        start, end = (q.get("rows") or [None, None])[:2]
        where = q.get("file") or ", ".join(q.get("files") or ()) or q.get("task")
        lines.append(f"  {where} rows {start}..{end if end is not None else 'end'}: {q.get('error')}")
    if count > len(shown):
        lines.append(f"  ... and {count - len(shown)} more (see the job's TaskQuarantined events)")
    return "\n".join(lines)


def find_window(status: dict[str, Any], start: str, end: str) -> dict[str, Any] | None:
    for window in status.get("windows") or []:
        if window.get("start") == start and window.get("end") == end:
            found: dict[str, Any] = window
            return found
    return None


class PrimusJobTrigger(BaseTrigger):
    def __init__(
        self,
        job: str,
        *,
        primus_conn_id: str = PrimusHook.default_conn_name,
        wait_for: str = "end",
        window: dict[str, str] | None = None,
        poll_interval: float = 5.0,
        report_every_s: float = 60.0,
        stop_on_kill: bool = True,
        hook_params: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        if wait_for not in WAIT_FOR:
            raise ValueError(f"wait_for must be one of {WAIT_FOR}, got {wait_for!r}")
        if wait_for == "window" and not window:
            raise ValueError("wait_for='window' needs window={'start': …, 'end': …}")
        self.job = job
        self.primus_conn_id = primus_conn_id
        self.wait_for = wait_for
        self.window = window
        self.poll_interval = poll_interval
        self.report_every_s = report_every_s
        self.stop_on_kill = stop_on_kill
        self.hook_params = dict(hook_params or {})  # backend, namespace, kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job": self.job,
                "primus_conn_id": self.primus_conn_id,
                "wait_for": self.wait_for,
                "window": self.window,
                "poll_interval": self.poll_interval,
                "report_every_s": self.report_every_s,
                "stop_on_kill": self.stop_on_kill,
                "hook_params": self.hook_params,
            },
        )

    def _hook(self) -> PrimusHook:
        p = self.hook_params
        return PrimusHook(
            self.primus_conn_id,
            backend=p.get("backend"),
            namespace=p.get("namespace"),
            kubernetes_conn_id=p.get("kubernetes_conn_id"),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        last_report = 0.0
        while True:
            record = await hook.aget_job(self.job)
            if record is None:
                yield TriggerEvent(
                    {"status": "error", "job": self.job, "message": f"no job named {self.job!r}"}
                )
                return
            status = record.status
            phase = status.get("phase")
            if self.wait_for == "window" and self.window is not None:
                window = find_window(status, self.window["start"], self.window["end"])
                if window is not None and window.get("consumed"):
                    yield TriggerEvent(
                        {"status": "success", "job": self.job, "phase": phase, "window": window}
                    )
                    return
                if window is not None and window.get("state") == "refused":
                    message = f"window refused: {window.get('reason')}"
                    yield TriggerEvent(
                        {"status": "error", "job": self.job, "phase": phase, "message": message}
                    )
                    return
            if phase in TERMINAL:
                yield TriggerEvent(
                    {
                        "status": "success" if phase == "Succeeded" else "error",
                        "job": self.job,
                        "phase": phase,
                        "message": status.get("message") or "",
                        "progress": status.get("progress") or {},
                    }
                )
                return
            if time.monotonic() - last_report >= self.report_every_s:
                self.log.info("job %s: %s", self.job, progress_line(status))
                last_report = time.monotonic()
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job it waits for."""
        if not self.stop_on_kill:
            return
        hook = self._hook()
        if hook.kubernetes:  # cancelling deletes the PrimusJob (its pods follow)
            await asyncio.to_thread(hook.cancel_job, self.job)
            return
        try:
            await hook.astop_job(self.job)
        except PrimusError:  # no master answers: the stop waits in the job object for the next one
            await asyncio.to_thread(hook.request_stop_offline, self.job)
