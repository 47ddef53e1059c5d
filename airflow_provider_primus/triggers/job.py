"""``PrimusJobTrigger``: waits in the triggerer for a job to end, or for a window to be consumed.

Async all the way: the job object is read through the hook's async methods (the store read runs in
a thread, never on the event loop). Idempotent: running it twice reads the same job and yields the
same event. While it waits it logs the job's progress and the trainer's metrics (AUC, freshness,
samples/s) every ``report_every_s``. What an event is, and whether a kill stops the job, is decided in
``operators/outcome.py``, the same functions an operator polling in a worker calls.

Moved or cancelled: ``cleanup()`` runs on every exit (a triggerer's shutdown too) and keeps nothing.
Airflow calls ``on_kill()`` when a user acts on the task, but also when this triggerer lost the
trigger to another one; the task instance's state tells the two apart (still ``deferred``: moved),
so a moved wait never stops its job — the streaming trainer runs on under the next triggerer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.outcome import (
    find_window,
    progress_line,
    quarantine_summary,
    stops_job_on_kill,
    wait_event,
)

__all__ = ["WAIT_FOR", "PrimusJobTrigger", "find_window", "progress_line", "quarantine_summary"]

WAIT_FOR = ("end", "window")


class PrimusJobTrigger(BaseTrigger):
    """Yields one event when the job ends (``wait_for="end"``) or when every task of ``window`` is
    consumed (``wait_for="window"``; a refused window or an ended job is an error event).

    :param job: the job's name.
    :param primus_conn_id: the ``primus`` connection.
    :param wait_for: ``end`` or ``window``.
    :param window: ``{"start": …, "end": …}`` as the master records it (ISO 8601), for
        ``wait_for="window"``.
    :param poll_interval: seconds between two reads of the job.
    :param report_every_s: seconds between two progress lines in the task's log.
    :param stop_on_kill: the waiting task owns the job: killing the task stops the job.
    :param long_running: the job has no end of its own (the streaming trainer): when the task's state
        cannot be read, a kill keeps it running rather than risk stopping it for a mere move.
    :param hook_params: per-task hook overrides (``backend``, ``namespace``, ``kubernetes_conn_id``).
    """

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
        long_running: bool = False,
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
        self.long_running = long_running
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
                "long_running": self.long_running,
                "hook_params": self.hook_params,
            },
        )

    @cached_property
    def hook(self) -> PrimusHook:
        p = self.hook_params
        return PrimusHook(
            self.primus_conn_id,
            backend=p.get("backend"),
            namespace=p.get("namespace"),
            kubernetes_conn_id=p.get("kubernetes_conn_id"),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        window = self.window if self.wait_for == "window" else None
        last_report = 0.0
        while True:
            record = await self.hook.aget_job(self.job)
            status = record.status if record is not None else None
            event = wait_event(self.job, status, window)
            if event is not None:
                yield TriggerEvent(event)
                return
            assert status is not None  # a missing job is an event
            if time.monotonic() - last_report >= self.report_every_s:
                self.log.info("job %s: %s", self.job, progress_line(status))
                last_report = time.monotonic()
            await asyncio.sleep(self.poll_interval)

    async def task_state(self) -> str | None:
        """The waiting task instance's state in the metadata DB, through the triggerer's link to the
        API server (the Execution API); None when it cannot be read (no task instance: the trigger
        runs outside a triggerer, or no answer)."""
        ti = self.task_instance
        if ti is None:
            return None
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            map_index = ti.map_index if ti.map_index is not None and ti.map_index >= 0 else None
            states = await asyncio.to_thread(
                RuntimeTaskInstance.get_task_states,
                dag_id=ti.dag_id,
                task_ids=[ti.task_id],
                run_ids=[ti.run_id],
                map_index=map_index,
            )
        except Exception as exc:
            self.log.warning("job %s: cannot read the task's state (%s)", self.job, exc)
            return None
        key = ti.task_id if map_index is None else f"{ti.task_id}_{map_index}"
        state = (states.get(ti.run_id) or {}).get(key)
        return str(getattr(state, "value", state)) if state is not None else None

    async def on_kill(self) -> None:
        """The task was killed, or this triggerer lost the trigger to another: stop the job only if
        the task owns it and was really cancelled (``stops_job_on_kill``)."""
        if not self.stop_on_kill:
            return
        task_state = await self.task_state()
        if not stops_job_on_kill(owns_job=True, long_running=self.long_running, task_state=task_state):
            self.log.info(
                "job %s keeps running: its task is %s (the wait moves to another triggerer)",
                self.job,
                task_state or "in an unknown state",
            )
            return
        self.log.info("job %s: its task was cancelled (%s); stopping the job", self.job, task_state)
        await self.hook.acancel_job(self.job)
