"""The scaling part of a job's page: allotments replayed from typed events, and the decisions.

Launches, resizes (manual and the autoscaler's) and ends are read from the events' typed payloads
(contracts/status.py), never from their messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_primus.contracts.status import (
    EventType,
    ExecutorState,
    JobStatus,
    LaunchPayload,
    ResizePayload,
    ScalePayload,
)
from airflow_provider_primus.master.store import Event
from airflow_provider_primus.plugins.charts import Mark, Series, fmt_number, line_chart, timeline
from airflow_provider_primus.plugins.history import SCALING_EVENTS
from airflow_provider_primus.plugins.html import e, fmt_time

_EVENT_COLORS = {
    "ScaleDecision": "#9467bd",
    "ScaleRequested": "#e377c2",
    "Resized": "#ff7f0e",
    "ExecutorLaunched": "#2ca02c",
    "ExecutorFailed": "#d62728",
    "ExecutorRemoved": "#7f7f7f",
    "ExecutorLost": "#d62728",
    "ExecutorAbandoned": "#8c564b",
    "MemoryPressure": "#bcbd22",
    "MemoryLimit": "#d62728",
}
_ENDED = ("ExecutorRemoved", "ExecutorFailed", "ExecutorLost", "ExecutorAbandoned", "TrainerCompleted")


@dataclass(frozen=True)
class Allotments:
    """Replayed from the event log: what each executor was allotted, and how many ran, over time."""

    cpu: list[Series]  # cores per executor
    memory: list[Series]  # GiB per executor
    running: list[Series]  # executors per role


def allotment_series(events: Sequence[Event], status: JobStatus) -> Allotments:
    """Replay launches, resizes (manual and the autoscaler's) and ends, then close every series
    with the current status (an executor that ended without an event, e.g. a data executor that
    finished the pass, drops there)."""
    live: dict[str, tuple[float, float]] = {}  # executor -> (cores, GiB) while running
    cpu: dict[str, list[tuple[float, float]]] = {}
    memory: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, list[tuple[float, float]]] = {}

    def role_of(name: str) -> str:
        return name.rsplit("-", 1)[0] if "-" in name else name

    def count(t: float, role: str) -> None:
        counts.setdefault(role, []).append((t, float(sum(1 for x in live if role_of(x) == role))))

    def record(t: float, name: str, cores: float, gib: float) -> None:
        cpu.setdefault(name, []).append((t, cores))
        memory.setdefault(name, []).append((t, gib))

    for ev in events:
        name = ev.executor or ""
        if not name:
            continue
        payload = ev.event.payload()
        before = live.get(name) or (
            (cpu[name][-1][1], memory[name][-1][1]) if cpu.get(name) and cpu[name][-1][1] else None
        )
        if ev.type in (EventType.EXECUTOR_LAUNCHED, EventType.EXECUTOR_ADOPTED):
            launched = isinstance(payload, LaunchPayload)
            cores = payload.cpu if isinstance(payload, LaunchPayload) else None
            gib = payload.memory / 2**30 if isinstance(payload, LaunchPayload) else None
            if not launched and before is not None:  # adopted: the allotment it had
                cores, gib = cores or before[0], gib or before[1]
            if cores is not None and gib is not None:
                live[name] = (cores, gib)
                record(ev.t, name, cores, gib)
                count(ev.t, role_of(name))
        elif ev.type in (EventType.RESIZED, EventType.SCALE_DECISION) and name in live:
            cores, gib = live[name]
            if isinstance(payload, ResizePayload):
                cores, gib = payload.cpu, payload.memory / 2**30
            elif isinstance(payload, ScalePayload) and payload.after is not None:
                if payload.action == "resize_cpu":
                    cores = payload.after
                elif payload.action == "resize_memory":
                    gib = payload.after / 2**30
            if (cores, gib) != live[name]:
                live[name] = (cores, gib)
                record(ev.t, name, cores, gib)
        elif ev.type in _ENDED and name in live:
            del live[name]
            record(ev.t, name, 0.0, 0.0)
            count(ev.t, role_of(name))
    updated = status.updated
    if updated is not None:
        now = max([updated, *(ev.t for ev in events)])
        running: dict[str, tuple[float, float]] = {}
        for name, ex in status.executors.items():
            if ex.state == ExecutorState.RUNNING:
                allotment = ex.handle.allotment
                running[name] = (allotment.cpu, allotment.memory / 2**30)
        for name in set(cpu) | set(running):
            record(now, name, *running.get(name, (0.0, 0.0)))
        live = running
        for role in set(counts) | {role_of(n) for n in running}:
            count(now, role)
    return Allotments(
        cpu=[Series(n, pts) for n, pts in sorted(cpu.items())],
        memory=[Series(n, pts) for n, pts in sorted(memory.items())],
        running=[Series(f"{role} executors", pts) for role, pts in sorted(counts.items())],
    )


def _event_detail(ev: Event) -> str:
    payload = ev.event.payload()
    if ev.type != EventType.SCALE_DECISION or not isinstance(payload, ScalePayload):
        return ""
    parts = [f"{k}={fmt_number(v)}" for k, v in sorted(payload.signals.items())]
    if payload.before is not None and payload.after is not None:
        head = f"{payload.action}: {fmt_number(payload.before)} → {fmt_number(payload.after)}"
    else:
        head = ""
    return "; ".join(p for p in [head, " ".join(parts)] if p)


def scaling_section(events: Sequence[Event], status: JobStatus, now: float) -> str:
    shown = [ev for ev in events if ev.type in SCALING_EVENTS]
    t_end = max(now, *(ev.t for ev in shown)) if shown else now
    t_range = (shown[0].t, t_end) if shown else None
    lanes = [k for k in SCALING_EVENTS if any(ev.type == k for ev in shown)]
    marks = [
        Mark(
            ev.t,
            ev.type,
            f"{ev.executor + ': ' if ev.executor else ''}{ev.message}",
            _EVENT_COLORS.get(ev.type, "#555"),
        )
        for ev in shown
    ]
    allotted = allotment_series(events, status)
    times = [ev.t for ev in events] + [status.updated or now]
    span = (min(times), max(times)) if events else None
    step_charts = [
        (allotted.cpu, "CPU allotted per executor (cores)", fmt_number),
        (allotted.memory, "Memory allotted per executor (GiB)", fmt_number),
        (allotted.running, "Running executors per role", fmt_number),
    ]
    charts = (
        timeline(marks, lanes, title="Scaling events", t_range=t_range)
        + "<div class='charts'>"
        + "".join(
            line_chart(
                series,
                title=title,
                step=True,
                y_min=0,
                t_range=span,
                value_format=fmt,
                empty_note="no executors launched yet",
                width=480,
                height=180,
            )
            for series, title, fmt in step_charts
        )
        + "</div>"
    )
    items = []
    for ev in reversed(shown[-100:]):
        detail = _event_detail(ev)
        note = f"<br><span class='note'>{e(detail)}</span>" if detail else ""
        items.append(
            f"<tr><td>{e(fmt_time(ev.t))}</td><td>{e(ev.type)}</td><td>{e(ev.executor or '—')}</td>"
            f"<td>{e(ev.message)}{note}</td></tr>"
        )
    listing = (
        "<table><thead><tr><th>Time</th><th>Event</th><th>Executor</th><th>Message</th></tr></thead>"
        f"<tbody>{''.join(items)}</tbody></table>"
        if items
        else ""
    )
    return charts + listing
