"""What a job's state means to an Airflow task, and whether killing the task stops the job.

The one place operators, sensors and triggers ask: a wait in the triggerer and the same wait polled
in a worker must end on the same condition with the same result, and a cancel must do the same thing
wherever the task happened to be waiting. Pure functions over the job's status, read as the typed
model every reader shares (contracts/status.py) whatever form it arrives in (the store's and the control
API's JSON); no Airflow, store or network access here, so the trigger module can import it without
pulling in the operators. Trigger events stay plain JSON: they cross the triggerer's edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from airflow_provider_primus.contracts.status import JobStatus, Phase, WindowStatus, is_terminal
from airflow_provider_primus.errors import PrimusError


class PrimusJobFailed(PrimusError):
    """The job ended other than Succeeded (or the wait could not go on); its message says why."""


class _Log(Protocol):
    def warning(self, msg: str, /, *args: Any) -> Any: ...


# --- what a person reads ----------------------------------------------------------------------------


def as_status(status: JobStatus | Mapping[str, Any]) -> JobStatus:
    return status if isinstance(status, JobStatus) else JobStatus.read(status)


def progress_line(status: JobStatus | Mapping[str, Any]) -> str:
    """One log line a person reads: phase, data, trainer step and its metrics."""
    s = as_status(status)
    p, metrics = s.progress, s.progress.trainer_metrics or {}
    auc = (metrics.get("progressive") or {}).get("window_auc")
    fresh = (metrics.get("freshness_s") or {}).get("p50")
    running = sum(1 for e in s.executors.values() if e.state == "running")
    quarantined = f" ({p.tasks_quarantined} quarantined)" if p.tasks_quarantined else ""
    return (
        f"{s.phase.value}: {running} executors; data {p.tasks_done}/{p.tasks} tasks"
        f"{quarantined}, {p.acked_rows} rows; trainer step {p.trainer_step}, "
        f"AUC {auc if auc is not None else '-'}, freshness p50 {fresh if fresh is not None else '-'} s, "
        f"{metrics.get('samples_per_s') or '-'} samples/s"
    )


def tasks_quarantined(progress: Mapping[str, Any] | None) -> int:
    """The ``tasks_quarantined`` flag of a task's result: 0 for a complete pass."""
    return int((progress or {}).get("tasks_quarantined") or 0)


def quarantine_summary(progress: Mapping[str, Any] | None) -> str | None:
    """What a task's log says when a job left data out: each quarantined task's file, the rows not
    trained and the error (the first few; the job page lists all). None when nothing was."""
    progress = progress or {}
    count = tasks_quarantined(progress)
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


def warn_quarantine(log: _Log, job: Any, progress: Mapping[str, Any] | None, phase: Any = None) -> None:
    """A job that left data out still succeeds, but the task's log says so (files, rows, errors)."""
    summary = quarantine_summary(progress)
    if summary:
        if phase is None:
            log.warning("job %s: %s", job, summary)
        else:
            log.warning("job %s %s: %s", job, phase, summary)


# --- when a wait ends, and with which event -----------------------------------------------------------


def find_window(
    status: JobStatus | Mapping[str, Any], start: str, end: str, source: str | None = None
) -> WindowStatus | None:
    """The window of that span (and of ``source``, when given: a job reads several files sources)."""
    return next(
        (
            w
            for w in as_status(status).windows
            if w.start == start and w.end == end and (source is None or w.source in (None, source))
        ),
        None,
    )


def end_event(job: str, status: JobStatus | Mapping[str, Any]) -> dict[str, Any]:
    """A job's end as the event ``PrimusJobTrigger`` sends for it."""
    s = as_status(status)
    return {
        "status": "success" if s.phase == Phase.SUCCEEDED else "error",
        "job": job,
        "phase": s.phase.value,
        "message": s.message,
        "progress": s.progress.model_dump(mode="json"),
    }


def wait_event(
    job: str, status: JobStatus | Mapping[str, Any] | None, window: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The event a wait on ``job`` ends with, or None while it goes on.

    ``status`` is the job's status, None when there is no such job. Without ``window`` the wait is for
    the job's end; with one (``{"start", "end"}`` as the master records them) for every task of that
    window to be consumed: a refused window, or a job that ended first, ends it with an error."""
    if status is None:
        return {"status": "error", "job": job, "message": f"no job named {job!r}"}
    s = as_status(status)
    phase = s.phase.value
    if window is not None:
        found = find_window(s, window["start"], window["end"], window.get("source"))
        if found is not None and found.consumed:
            return {"status": "success", "job": job, "phase": phase, "window": found.model_dump(mode="json")}
        if found is not None and found.state == "refused":
            message = f"window refused: {found.reason}"
            return {"status": "error", "job": job, "phase": phase, "message": message}
        if s.phase.terminal:
            message = f"window {window['start']}..{window['end']} not consumed: {s.message}"
            return {"status": "error", "job": job, "phase": phase, "message": message.rstrip(": ")}
        return None
    if s.phase.terminal:
        return end_event(job, s)
    return None


# --- what the event means to the task -------------------------------------------------------------------


def task_result(event: Mapping[str, Any], log: _Log, *, long_running: bool = False) -> dict[str, Any]:
    """An operator's result (XCom) for the event its wait ended with; raises ``PrimusJobFailed``.

    A job that succeeded with quarantined tasks succeeds here too, with a warning and
    ``tasks_quarantined`` in the result, so a downstream task can tell a pass that left data out from a
    complete one. A long-running job that was stopped on purpose ends its task successfully: the job
    had no other way to end."""
    if long_running and event.get("phase") == "Stopped":
        return {"job": event.get("job"), "phase": "Stopped"}
    if event.get("status") != "success":
        raise PrimusJobFailed(
            f"job {event.get('job')} {event.get('phase') or 'failed'}: {event.get('message') or ''}"
        )
    result = {k: v for k, v in event.items() if k in ("job", "phase", "progress", "window")}
    if "progress" in event:
        progress = event.get("progress") or {}
        result["tasks_quarantined"] = tasks_quarantined(progress)
        warn_quarantine(log, event.get("job"), progress)
    return result


def phase_result(
    job: str,
    phase: str | None,
    message: str,
    progress: Mapping[str, Any] | None,
    *,
    target_phases: Sequence[str],
    failure_phases: Sequence[str],
    log: _Log,
) -> dict[str, Any] | None:
    """A sensor's result (XCom) once ``job`` is in a target phase, None while the wait goes on; raises
    ``PrimusJobFailed`` for a failure phase, or for an end that can never reach a target."""
    if phase in target_phases:
        warn_quarantine(log, job, progress, phase)
        quarantined = tasks_quarantined(progress)
        return {"job": job, "phase": phase, "message": message, "tasks_quarantined": quarantined}
    if phase in failure_phases:
        raise PrimusJobFailed(f"job {job!r} {phase}: {message or 'no message'}")
    if is_terminal(phase):  # ended, but not as asked: it will never get there
        raise PrimusJobFailed(
            f"job {job!r} ended {phase} without reaching {'/'.join(target_phases)}: {message or 'no message'}"
        )
    return None


# --- cancelling ------------------------------------------------------------------------------------------


def stops_job_on_kill(*, owns_job: bool, long_running: bool, task_state: str | None) -> bool:
    """Whether killing a waiting task (operator ``on_kill``, trigger ``on_kill``) stops its job.

    Only the task that owns the job stops it: a sensor or a window's task waits on someone else's.
    Airflow kills a trigger the same way when a user acts on its task (mark failed or success, clear)
    and when its triggerer loses it to another one (a late heartbeat): the task's state tells them
    apart. A moved trigger's task is still ``deferred`` (another triggerer resumes the wait) and its
    job must go on; a cancelled one's is not. When the state cannot be read (``None``: no task instance,
    or no answer) a batch job is stopped, since the task that owned it is gone, but a long-running job
    is kept: stopping the streaming trainer on a doubt is an outage, while keeping it costs nothing (a
    later try reattaches to it)."""
    if not owns_job:
        return False
    if task_state == "deferred":
        return False
    if task_state is None:
        return not long_running
    return True
