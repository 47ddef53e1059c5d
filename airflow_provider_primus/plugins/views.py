"""Server-rendered HTML for the job pages: pure functions from store records to a page.

Everything that comes from the store (names, labels, messages, event text, reasons) is escaped
with ``html.escape``; URLs are built from quoted path segments. No JavaScript: a running job's
page refreshes itself every few seconds with ``<meta http-equiv="refresh">``.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote

from airflow_provider_primus.master.store import Event, JobRecord
from airflow_provider_primus.plugins.charts import (
    Mark,
    Series,
    fmt_number,
    line_chart,
    sparkline,
    timeline,
)
from airflow_provider_primus.plugins.history import SCALING_EVENTS, Point
from airflow_provider_primus.plugins.status import TERMINAL_PHASES, as_map, dig, num

REFRESH_S = 5

_CSS = """
:root { color-scheme: light dark; --fg: #1a1a1a; --muted: #666; --line: #ddd; --bg: #fff;
  --head: #f5f6f8; --ok: #2ca02c; --bad: #d62728; --run: #1f77b4; --wait: #999; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6e6; --muted: #9a9a9a; --line: #3a3a3a;
  --bg: #1b1d21; --head: #24272c; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); margin: 16px 24px; }
a { color: var(--run); text-decoration: none; } a:hover { text-decoration: underline; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; margin: 4px 0 8px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--head); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.muted, .note { color: var(--muted); } .note { font-size: 12px; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; color: #fff; font-size: 12px;
  background: var(--wait); }
.phase-Running { background: var(--run); } .phase-Succeeded { background: var(--ok); }
.phase-Failed { background: var(--bad); } .phase-Stopped, .phase-Suspended { background: #8c564b; }
.label { display: inline-block; border: 1px solid var(--line); border-radius: 4px; padding: 0 4px;
  margin: 0 4px 2px 0; font-size: 12px; font-family: ui-monospace, monospace; }
.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 8px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card .big { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .what { color: var(--muted); font-size: 12px; }
.bar { display: inline-block; width: 120px; height: 8px; background: var(--line); border-radius: 4px;
  vertical-align: middle; margin-right: 6px; } .bar span { display: block; height: 100%;
  background: var(--ok); border-radius: 4px; }
svg.chart { display: block; margin: 8px 0; max-width: 100%; height: auto; }
svg .chart-title { font-size: 13px; font-weight: 600; fill: var(--fg); }
svg .chart-note { font-size: 12px; fill: var(--muted); }
svg .tick, svg .legend { font-size: 11px; fill: var(--muted); }
svg .axis { stroke: var(--muted); } svg .grid { stroke: var(--line); }
.charts { display: flex; flex-wrap: wrap; gap: 0 24px; }
code { font-family: ui-monospace, monospace; font-size: 12px; }
"""

# Event kind -> timeline colour.
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
_LAUNCH = re.compile(r"(\d+(?:\.\d+)?) CPU, (\d+) MiB")
_TASK_ID = re.compile(r"^(?P<source>.+)-[0-9a-f]{16}$")


# --- formatting -------------------------------------------------------------------------------------


def e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def fmt_bytes(value: Any) -> str:
    n = num(value)
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB", "MiB") else f"{n:.1f} {unit}"
        n /= 1024
    return "—"  # unreachable


def fmt_count(value: Any) -> str:
    n = num(value)
    return "—" if n is None else f"{n:,.0f}" if n == int(n) else f"{n:,.1f}"


def fmt_cores(value: Any) -> str:
    n = num(value)
    return "—" if n is None else f"{n:g}"


def fmt_pct(value: Any) -> str:
    n = num(value)
    return "—" if n is None else f"{n * 100:.0f}%"


def fmt_metric(value: Any, digits: int = 3) -> str:
    n = num(value)
    return "—" if n is None else f"{n:.{digits}f}"


def fmt_time(value: Any) -> str:
    t = num(value)
    return "—" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def fmt_age(value: Any, now: float) -> str:
    t = num(value)
    if t is None:
        return "never"
    s = max(0.0, now - t)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} days ago"


def phase_badge(status: Mapping[str, Any]) -> str:
    phase = str(status.get("phase") or "Pending")
    if status.get("suspended") and phase == "Running":
        phase = "Suspended"
    css = re.sub(r"[^A-Za-z]", "", phase)
    return f'<span class="badge phase-{css}" title="{e(status.get("message"))}">{e(phase)}</span>'


def labels_html(labels: Mapping[str, Any]) -> str:
    if not labels:
        return '<span class="muted">—</span>'
    return "".join(f'<span class="label">{e(k)}={e(v)}</span>' for k, v in sorted(labels.items()))


def _bar(done: float, total: float) -> str:
    share = 0.0 if total <= 0 else max(0.0, min(1.0, done / total))
    return f'<span class="bar"><span style="width:{share * 100:.0f}%"></span></span>'


# --- layout -----------------------------------------------------------------------------------------


def page(title: str, body: str, *, base: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>{meta}"
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"
        f'<nav class="note"><a href="{e(base)}/jobs">Primus jobs</a></nav>{body}</body></html>'
    )


def job_href(base: str, name: str) -> str:
    return f"{base}/jobs/{quote(name, safe='')}"


def error_page(status_code: int, message: str, *, base: str) -> str:
    return page(f"{status_code}", f"<h1>{e(status_code)}</h1><p>{e(message)}</p>", base=base)


# --- the list ---------------------------------------------------------------------------------------


def _running(status: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    per_role: dict[str, int] = {}
    for ex in as_map(status.get("executors")).values():
        if dig(ex, "state") == "running":
            role = str(dig(ex, "handle", "role") or "?")
            per_role[role] = per_role.get(role, 0) + 1
    return sum(per_role.values()), per_role


def jobs_page(records: Sequence[JobRecord], *, base: str, now: float, note: str = "") -> str:
    rows = []
    for r in records:
        s = r.status
        running, per_role = _running(s)
        roles = ", ".join(f"{k}: {v}" for k, v in sorted(per_role.items()))
        rows.append(
            "<tr>"
            f'<td><a href="{e(job_href(base, r.name))}">{e(r.name)}</a></td>'
            f"<td>{phase_badge(s)}</td>"
            f"<td>{labels_html(r.labels)}</td>"
            f'<td class="num" title="{e(roles)}">{running}</td>'
            f'<td class="num">{fmt_count(dig(s, "progress", "acked_rows"))}</td>'
            f'<td class="num">{fmt_count(dig(s, "progress", "trainer_step"))}</td>'
            f'<td title="{e(fmt_time(s.get("updated")))}">{e(fmt_age(s.get("updated"), now))}</td>'
            "</tr>"
        )
    table = (
        "<table><thead><tr><th>Job</th><th>Phase</th><th>Labels</th><th class='num'>Executors running</th>"
        "<th class='num'>Acked rows</th><th class='num'>Trainer step</th><th>Last update</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else '<p class="muted">No jobs in the store.</p>'
    )
    body = f"<h1>Primus jobs</h1>{table}"
    if note:
        body += f'<p class="note">{e(note)}</p>'
    active = any(r.status.get("phase") not in TERMINAL_PHASES for r in records)
    return page("Primus jobs", body, base=base, refresh=active)


# --- one job ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRow:
    """One line of the data-progress table: the data document's window or an appended one."""

    label: str
    sources: str
    state: str
    tasks: int | None
    tasks_done: int | None
    consumed: bool | None
    rows: int | None
    reason: str = ""
    approximate: bool = False


def _sources(task_ids: Iterable[Any]) -> str:
    names = set()
    for tid in task_ids:
        m = _TASK_ID.match(str(tid))
        if m:
            names.add(m.group("source"))
    return ", ".join(sorted(names))


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def window_label(start: Any, end: Any) -> str:
    """``2026-11-01`` for a whole UTC day, else ``start → end``."""
    a, b = _parse_time(start), _parse_time(end)
    if a is not None and b is not None:
        midnight = (a.hour, a.minute, a.second, a.microsecond) == (0, 0, 0, 0)
        if midnight and b - a == timedelta(days=1):
            return a.date().isoformat()
        if midnight and (b.hour, b.minute, b.second) == (0, 0, 0) and b > a:
            return f"{a.date().isoformat()} → {(b - timedelta(days=1)).date().isoformat()}"
    return f"{start} → {end}"


def data_rows(status: Mapping[str, Any]) -> list[WindowRow]:
    """The data document's own window (derived from the totals) and every appended window."""
    progress = as_map(status.get("progress"))
    listed = status.get("windows")
    windows = [w for w in listed if isinstance(w, Mapping)] if isinstance(listed, list) else []
    appended = [w for w in windows if w.get("state") == "appended"]
    rows: list[WindowRow] = []
    total = int(num(dig(progress, "tasks")) or 0)
    done_total = int(num(dig(progress, "tasks_done")) or 0)
    new = sum(int(num(w.get("new_tasks")) or 0) for w in appended)
    overlap = any((num(w.get("new_tasks")) or 0) < (num(w.get("tasks")) or 0) for w in appended)
    done_in_windows = sum(
        min(int(num(w.get("tasks_done")) or 0), int(num(w.get("new_tasks")) or 0)) for w in appended
    )
    initial = max(0, total - new)
    if initial or not appended:
        in_windows = {str(t) for w in windows for t in w.get("task_ids") or []}
        acked = [t for t in as_map(status.get("data_progress")) if t not in in_windows]
        done = max(0, min(initial, done_total - done_in_windows))
        rows.append(
            WindowRow(
                label="the data document's window",
                sources=_sources(acked),
                state="initial",
                tasks=initial,
                tasks_done=done,
                consumed=bool(initial) and done == initial,
                rows=None,
                approximate=overlap,
            )
        )
    for w in windows:
        done_w = num(w.get("tasks_done"))
        rows.append(
            WindowRow(
                label=window_label(w.get("start"), w.get("end")),
                sources=_sources(w.get("task_ids") or []),
                state=str(w.get("state") or "—"),
                tasks=None if num(w.get("tasks")) is None else int(w["tasks"]),
                tasks_done=None if done_w is None else int(done_w),
                consumed=w.get("consumed") if isinstance(w.get("consumed"), bool) else None,
                rows=None if num(w.get("rows")) is None else int(w["rows"]),
                reason=str(w.get("reason") or ""),
            )
        )
    return rows


def _data_table(status: Mapping[str, Any]) -> str:
    rows = data_rows(status)
    out = []
    for r in rows:
        done = "—" if r.tasks_done is None else f"{'≈' if r.approximate else ''}{r.tasks_done:,}"
        bar = _bar(r.tasks_done or 0, r.tasks or 0) if r.tasks_done is not None else ""
        consumed = "—" if r.consumed is None else "yes" if r.consumed else "no"
        state = r.state + (f": {r.reason}" if r.reason else "")
        out.append(
            f"<tr><td>{e(r.label)}</td><td>{e(r.sources or '—')}</td><td>{e(state)}</td>"
            f'<td class="num">{fmt_count(r.tasks)}</td><td class="num">{bar}{e(done)}</td>'
            f"<td>{consumed}</td><td class='num'>{fmt_count(r.rows)}</td></tr>"
        )
    progress = as_map(status.get("progress"))
    total = (
        f"{fmt_count(dig(progress, 'tasks_done'))} of {fmt_count(dig(progress, 'tasks'))} tasks done, "
        f"{fmt_count(dig(progress, 'tasks_quarantined'))} quarantined, "
        f"{fmt_count(dig(progress, 'acked_rows'))} rows acknowledged by the trainer"
        + (
            f", {fmt_count(dig(progress, 'rows_without_label'))} rows left out for having no label"
            if dig(progress, "rows_without_label")
            else ""
        )
        + ("; the pass is over" if dig(progress, "data_finished") else "")
    )
    return (
        "<table><thead><tr><th>Window (UTC)</th><th>Source</th><th>State</th><th class='num'>Tasks</th>"
        "<th class='num'>Done</th><th>Consumed</th><th class='num'>Planned rows</th></tr></thead>"
        f"<tbody>{''.join(out)}</tbody></table><p class='note'>{e(total)}. The data document's window "
        "is the total less the appended windows' new tasks (≈ where windows overlap).</p>"
    )


def _quarantine_table(status: Mapping[str, Any]) -> str:
    """Each quarantined task: the rows it left out of training, where they are and why."""
    progress = as_map(status.get("progress"))
    entries = [as_map(q) for q in dig(progress, "quarantine") or [] if isinstance(q, Mapping)]
    if not entries:
        return ""
    rows = []
    for q in entries:
        span: list[Any] = list(q["rows"]) if isinstance(q.get("rows"), list) else []
        start, end = [*span, None, None][:2]
        first = "—" if start is None else start
        last = "end" if end is None else end
        where = q.get("file") or ", ".join(str(f) for f in q.get("files") or []) or "—"
        rows.append(
            f"<tr><td><code>{e(q.get('task') or '—')}</code></td><td>{e(q.get('source') or '—')}</td>"
            f"<td><code>{e(where)}</code></td><td class='num'>{e(first)}..{e(last)}</td>"
            f"<td class='num'>{fmt_count(q.get('rows_missing'))}</td><td>{e(q.get('error') or '—')}</td></tr>"
        )
    return (
        "<h3>Quarantined tasks</h3><table class='quarantine'><thead><tr><th>Task</th><th>Source</th>"
        "<th>File</th><th class='num'>Rows</th><th class='num'>Not trained</th><th>Error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table><p class='note'>Their rows are not in the model; each "
        "is also a TaskQuarantined event.</p>"
    )


def _executors_table(status: Mapping[str, Any], points: Sequence[Point]) -> str:
    executors = as_map(status.get("executors"))
    if not executors:
        return '<p class="muted">No executors yet.</p>'

    def order(item: tuple[str, Any]) -> tuple[str, float, str]:
        name, ex = item
        return (str(dig(ex, "handle", "role") or ""), num(dig(ex, "handle", "index")) or 0.0, name)

    rows = []
    for name, ex in sorted(executors.items(), key=order):
        handle = dig(ex, "handle") or {}
        telemetry = dig(ex, "telemetry") or {}
        memory = dig(handle, "allotment", "memory")
        rss = dig(telemetry, "rss")
        trend = [p.executors[name]["cpu_util"] for p in points if "cpu_util" in p.executors.get(name, {})]
        spark = sparkline(trend[-60:], width=80, height=18, label=f"{name} CPU utilisation") if trend else ""
        last = dig(ex, "reason") or ""
        if dig(ex, "exit_code") is not None:
            last = f"{last} (exit {dig(ex, 'exit_code')})".strip()
        rows.append(
            "<tr>"
            f"<td>{e(name)}</td><td>{e(dig(handle, 'role'))}</td><td>{e(dig(ex, 'state'))}</td>"
            f"<td class='num'>{e(dig(handle, 'ref', 'pid') or '—')}</td>"
            f"<td class='num'>{e(fmt_cores(dig(handle, 'allotment', 'cpu')))}</td>"
            f"<td class='num'>{e(fmt_bytes(memory))}</td>"
            f"<td class='num'>{spark}{e(fmt_pct(dig(telemetry, 'cpu_util')))}</td>"
            f"<td class='num'>{e(fmt_bytes(rss))} / {e(fmt_bytes(memory))}"
            f" ({e(fmt_pct(dig(telemetry, 'mem_util')))})</td>"
            f"<td class='num'>{e(fmt_count(dig(telemetry, 'rows_per_s')))}</td>"
            f"<td class='num'>{e(fmt_count(dig(ex, 'restarts')))}</td>"
            f"<td>{e(last or '—')}</td>"
            "</tr>"
        )
    return (
        "<table><thead><tr><th>Executor</th><th>Role</th><th>State</th><th class='num'>PID</th>"
        "<th class='num'>CPU allotted</th><th class='num'>Memory allotted</th>"
        "<th class='num'>CPU utilisation</th><th class='num'>RSS / limit</th><th class='num'>Rows/s</th>"
        "<th class='num'>Restarts</th><th>Last exit</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        "<p class='note'>Utilisation is a share of the allotment, from the master's last two samples.</p>"
    )


@dataclass(frozen=True)
class Allotments:
    """Replayed from the event log: what each executor was allotted, and how many ran, over time."""

    cpu: list[Series]  # cores per executor
    memory: list[Series]  # GiB per executor
    running: list[Series]  # executors per role


def allotment_series(events: Sequence[Event], status: Mapping[str, Any]) -> Allotments:
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
        data = ev.data or {}
        before = live.get(name) or (
            (cpu[name][-1][1], memory[name][-1][1]) if cpu.get(name) and cpu[name][-1][1] else None
        )
        if ev.type in ("ExecutorLaunched", "ExecutorAdopted"):
            cores, mem = num(data.get("cpu")), num(data.get("memory"))
            gib = None if mem is None else mem / 2**30
            if (cores is None or gib is None) and (m := _LAUNCH.search(ev.message)):
                cores, gib = cores or float(m.group(1)), gib or float(m.group(2)) / 1024
            if (cores is None or gib is None) and before is not None:
                cores, gib = cores or before[0], gib or before[1]
            if cores is not None and gib is not None:
                live[name] = (cores, gib)
                record(ev.t, name, cores, gib)
                count(ev.t, role_of(name))
        elif ev.type in ("Resized", "ScaleDecision") and name in live:
            cores, gib = live[name]
            if ev.type == "Resized":
                cores = num(data.get("cpu")) or cores
                gib = (num(data.get("memory")) or gib * 2**30) / 2**30
            elif data.get("action") == "resize_cpu":
                cores = num(data.get("after")) or cores
            elif data.get("action") == "resize_memory":
                gib = (num(data.get("after")) or gib * 2**30) / 2**30
            if (cores, gib) != live[name]:
                live[name] = (cores, gib)
                record(ev.t, name, cores, gib)
        elif ev.type in _ENDED and name in live:
            del live[name]
            record(ev.t, name, 0.0, 0.0)
            count(ev.t, role_of(name))
    updated = num(status.get("updated"))
    if updated is not None:
        now = max([updated, *(ev.t for ev in events)])
        running: dict[str, tuple[float, float]] = {}
        for name, ex in as_map(status.get("executors")).items():
            if dig(ex, "state") == "running":
                allotment = dig(ex, "handle", "allotment")
                cores, mem = num(dig(allotment, "cpu")) or 0.0, num(dig(allotment, "memory")) or 0.0
                running[str(name)] = (cores, mem / 2**30)
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
    if ev.type != "ScaleDecision":
        return ""
    signals = as_map(ev.data.get("signals"))
    parts = [f"{k}={fmt_number(v) if num(v) is not None else v}" for k, v in sorted(signals.items())]
    before, after = ev.data.get("before"), ev.data.get("after")
    head = f"{ev.data.get('action')}: {before} → {after}" if before is not None else ""
    return "; ".join(p for p in [head, " ".join(parts)] if p)


def _scaling_section(events: Sequence[Event], status: Mapping[str, Any], now: float) -> str:
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
    times = [ev.t for ev in events] + [num(status.get("updated")) or now]
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


def _rates(points: Sequence[Point], attr: str) -> list[tuple[float, float]]:
    out = []
    for a, b in itertools.pairwise(points):
        va, vb = getattr(a, attr), getattr(b, attr)
        if va is not None and vb is not None and b.t > a.t and vb >= va:
            out.append((b.t, (vb - va) / (b.t - a.t)))
    return out


def _series(points: Sequence[Point], attr: str) -> list[tuple[float, float]]:
    return [(p.t, v) for p in points if (v := getattr(p, attr)) is not None]


def _training_section(status: Mapping[str, Any], points: Sequence[Point], sample_s: float | None) -> str:
    progress = as_map(status.get("progress"))
    m = dig(progress, "trainer_metrics") or {}
    speed = [v for _, v in _series(points, "samples_per_s")]
    cards = [
        ("trainer step", fmt_count(dig(progress, "trainer_step")), ""),
        ("rows trained", fmt_count(dig(progress, "trainer_rows")), ""),
        ("window AUC", fmt_metric(dig(m, "progressive", "window_auc")), ""),
        ("progressive AUC", fmt_metric(dig(m, "progressive", "auc")), ""),
        (
            "samples/s",
            fmt_count(dig(m, "samples_per_s")),
            sparkline(speed[-60:], label="samples/s") if speed else "",
        ),
        (
            "freshness p50 / p99 (s)",
            f"{fmt_metric(dig(m, 'freshness_s', 'p50'), 1)} / {fmt_metric(dig(m, 'freshness_s', 'p99'), 1)}",
            "",
        ),
        ("watermark", str(dig(m, "watermark") or "—"), ""),
    ]
    html = (
        "<div class='cards'>"
        + "".join(
            f"<div class='card'><div class='big'>{e(v)}</div>{extra}<div class='what'>{e(k)}</div></div>"
            for k, v, extra in cards
        )
        + "</div>"
    )
    cpu_util = sorted({n for p in points for n in p.executors})
    charts = [
        line_chart(
            [
                Series("window AUC", _series(points, "window_auc")),
                Series("progressive AUC", _series(points, "auc"), dashed=True),
            ],
            title="AUC (progressive validation)",
            width=480,
            height=180,
        ),
        line_chart(
            [
                Series("trainer samples/s (average)", _series(points, "samples_per_s")),
                Series("acked rows/s", _rates(points, "acked_rows")),
            ],
            title="Throughput (rows/s)",
            y_min=0,
            width=480,
            height=180,
        ),
        line_chart(
            [
                Series("p50", _series(points, "freshness_p50")),
                Series("p99", _series(points, "freshness_p99")),
            ],
            title="Stream freshness (s)",
            y_min=0,
            width=480,
            height=180,
            unit="s",
        ),
        line_chart(
            [
                Series(
                    n,
                    [
                        (p.t, p.executors[n]["cpu_util"])
                        for p in points
                        if "cpu_util" in p.executors.get(n, {})
                    ],
                )
                for n in cpu_util
            ],
            title="CPU utilisation per executor (share of allotment)",
            width=480,
            height=180,
            y_min=0,
            value_format=lambda v: f"{v * 100:.0f}%",
        ),
    ]
    every = f" every {sample_s:g} s" if sample_s else ""
    note = (
        "The job store keeps only the latest status, so these charts are built from the statuses this "
        f"web server has read (each page view, and{every} while the job runs) since it started: "
        f"{len(points)} point{'s' if len(points) != 1 else ''} so far."
    )
    return html + "<div class='charts'>" + "".join(charts) + f"</div><p class='note'>{e(note)}</p>"


def job_page(
    record: JobRecord,
    events: Sequence[Event],
    points: Sequence[Point],
    *,
    base: str,
    now: float,
    sample_s: float | None = None,
) -> str:
    s = record.status
    master = as_map(s.get("master"))
    replicas = as_map(s.get("replicas"))
    savepoints = as_map(s.get("savepoints"))
    updated = s.get("updated")
    facts = [
        ("Phase", phase_badge(s)),
        ("Message", e(s.get("message") or "—")),
        ("Master API", f"<code>{e(dig(master, 'api') or '—')}</code>"),
        ("Master PID", e(dig(master, "pid") or "—")),
        ("Dispatcher", f"<code>{e(dig(master, 'dispatcher') or '—')}</code>"),
        ("Replicas", e(", ".join(f"{k}: {v}" for k, v in sorted(replicas.items())) or "—")),
        ("Labels", labels_html(record.labels)),
        ("Submitted", e(fmt_time(record.created))),
        ("Last update", f"{e(fmt_age(updated, now))} <span class='muted'>({e(fmt_time(updated))})</span>"),
    ]
    if savepoints:
        facts.append(
            (
                "Savepoints",
                e(
                    ", ".join(
                        f"{k}: {dig(v, 'state')}"
                        + (f" @ step {dig(v, 'step')}" if dig(v, "step") is not None else "")
                        for k, v in sorted(savepoints.items())
                    )
                ),
            )
        )
    header = (
        f"<h1>{e(record.name)} {phase_badge(s)}</h1>"
        f"<p class='note'><a href=\"{e(base)}/api/jobs/{e(quote(record.name, safe=''))}\">"
        "status as JSON</a></p>"
        "<dl class='kv'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
    )
    body = (
        header
        + "<h2>Executors</h2>"
        + _executors_table(s, points)
        + "<h2>Scaling</h2>"
        + _scaling_section(events, s, now)
        + "<h2>Data progress</h2>"
        + _data_table(s)
        + _quarantine_table(s)
        + "<h2>Training</h2>"
        + _training_section(s, points, sample_s)
    )
    return page(f"{record.name} · Primus", body, base=base, refresh=s.get("phase") not in TERMINAL_PHASES)
