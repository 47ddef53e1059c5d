"""Server-rendered HTML for the job pages: pure functions from store records to a page.

The pages read a job's status as the typed model the master writes (contracts/status.py), parsed
once per page: a field renamed in the contract is then a type error here, not a cell that quietly
goes blank. A stored status that partly fails the contract still renders what fits
(plugins/status.py's ``read_status``).

Everything that comes from the store (names, labels, messages, event text, reasons) is escaped
(plugins/html.py); the scaling section replays typed events (plugins/scaling.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from airflow_provider_primus.contracts.status import (
    TERMINAL,
    AucFigures,
    ExecutorState,
    HandleStatus,
    JobStatus,
    Progress,
    WindowStatus,
)
from airflow_provider_primus.master.history import Point
from airflow_provider_primus.master.store import Event, JobRecord
from airflow_provider_primus.plugins.charts import (
    Series,
    line_chart,
    sparkline,
)
from airflow_provider_primus.plugins.html import (
    bar,
    e,
    fmt_age,
    fmt_bytes,
    fmt_cores,
    fmt_count,
    fmt_metric,
    fmt_pct,
    fmt_time,
    job_href,
    labels_html,
    page,
    phase_badge,
)
from airflow_provider_primus.plugins.scaling import scaling_section
from airflow_provider_primus.plugins.status import read_status


def _figures(status: JobStatus) -> Progress | None:
    """The data figures, if a master wrote any: a job it has not reached yet shows them as unknown,
    not as the model's zeros."""
    return status.progress if status.given("progress") else None


# --- the list ---------------------------------------------------------------------------------------


def _running(status: JobStatus) -> tuple[int, dict[str, int]]:
    per_role: dict[str, int] = {}
    for ex in status.executors.values():
        if ex.state == ExecutorState.RUNNING:
            role = ex.handle.role or "?"
            per_role[role] = per_role.get(role, 0) + 1
    return sum(per_role.values()), per_role


def jobs_page(records: Sequence[JobRecord], *, base: str, now: float, note: str = "") -> str:
    rows = []
    statuses = [read_status(r) for r in records]
    for r, s in zip(records, statuses, strict=True):
        running, per_role = _running(s)
        figures = _figures(s)
        roles = ", ".join(f"{k}: {v}" for k, v in sorted(per_role.items()))
        rows.append(
            "<tr>"
            f'<td><a href="{e(job_href(base, r.name))}">{e(r.name)}</a></td>'
            f"<td>{phase_badge(s)}</td>"
            f"<td>{labels_html(r.labels)}</td>"
            f'<td class="num" title="{e(roles)}">{running}</td>'
            f'<td class="num">{fmt_count(figures.acked_rows if figures else None)}</td>'
            f'<td class="num">{fmt_count(s.progress.trainer_step)}</td>'
            f'<td title="{e(fmt_time(s.updated))}">{e(fmt_age(s.updated, now))}</td>'
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
    active = any(s.phase not in TERMINAL for s in statuses)
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


def _sources(names: Sequence[str]) -> str:
    """The sources a window's tasks read, as the master recorded them (none for an old master's)."""
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


def _window_order(w: WindowStatus) -> tuple[bool, float, float]:
    """By start, then end; a window whose times do not parse goes last, in its listed order."""
    a, b = _parse_time(w.start), _parse_time(w.end)
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return (True, 0.0, 0.0)
    if a.tzinfo is None:
        a, b = a.replace(tzinfo=UTC), b.replace(tzinfo=UTC)
    return (False, a.timestamp(), b.timestamp())


def data_rows(status: JobStatus) -> list[WindowRow]:
    """The data document's own window (derived from the totals) and every appended window."""
    progress = status.progress
    # The master lists windows as they were appended; parallel daily runs append out of order.
    windows = sorted(status.windows, key=_window_order)
    appended = [w for w in windows if w.state == "appended"]
    rows: list[WindowRow] = []
    total, done_total = progress.tasks, progress.tasks_done
    new = sum(w.new_tasks or 0 for w in appended)
    overlap = any((w.new_tasks or 0) < (w.tasks or 0) for w in appended)
    done_in_windows = sum(min(w.tasks_done or 0, w.new_tasks or 0) for w in appended)
    initial = max(0, total - new)
    if initial or not appended:
        done = max(0, min(initial, done_total - done_in_windows))
        rows.append(
            WindowRow(
                label="the data document's window",
                sources=_sources(progress.sources),
                state="initial",
                tasks=initial,
                tasks_done=done,
                consumed=bool(initial) and done == initial,
                rows=None,
                approximate=overlap,
            )
        )
    for w in windows:
        rows.append(
            WindowRow(
                label=window_label(w.start, w.end),
                sources=_sources(w.sources),
                state=w.state,
                tasks=w.tasks,
                tasks_done=w.tasks_done,
                consumed=w.consumed,
                rows=w.rows,
                reason=w.reason or "",
            )
        )
    return rows


def _data_table(status: JobStatus) -> str:
    rows = data_rows(status)
    out = []
    for r in rows:
        done = "—" if r.tasks_done is None else f"{'≈' if r.approximate else ''}{r.tasks_done:,}"
        progress_bar = bar(r.tasks_done or 0, r.tasks or 0) if r.tasks_done is not None else ""
        consumed = "—" if r.consumed is None else "yes" if r.consumed else "no"
        state = r.state + (f": {r.reason}" if r.reason else "")
        out.append(
            f"<tr><td>{e(r.label)}</td><td>{e(r.sources or '—')}</td><td>{e(state)}</td>"
            f'<td class="num">{fmt_count(r.tasks)}</td><td class="num">{progress_bar}{e(done)}</td>'
            f"<td>{consumed}</td><td class='num'>{fmt_count(r.rows)}</td></tr>"
        )
    p, known = status.progress, _figures(status)
    total = (
        f"{fmt_count(known.tasks_done if known else None)} of {fmt_count(known.tasks if known else None)}"
        f" tasks done, {fmt_count(known.tasks_quarantined if known else None)} quarantined, "
        f"{fmt_count(known.acked_rows if known else None)} rows acknowledged by the trainer"
        + (
            f", {fmt_count(p.rows_without_label)} rows left out for having no label"
            if p.rows_without_label
            else ""
        )
        + ("; the pass is over" if p.data_finished else "")
    )
    return (
        "<table><thead><tr><th>Window (UTC)</th><th>Source</th><th>State</th><th class='num'>Tasks</th>"
        "<th class='num'>Done</th><th>Consumed</th><th class='num'>Planned rows</th></tr></thead>"
        f"<tbody>{''.join(out)}</tbody></table><p class='note'>{e(total)}. The data document's window "
        "is the total less the appended windows' new tasks (≈ where windows overlap).</p>"
    )


def _quarantine_table(status: JobStatus) -> str:
    """Each quarantined task: the rows it left out of training, where they are and why."""
    entries = status.progress.quarantine
    if not entries:
        return ""
    rows = []
    for q in entries:
        start, end = [*q.rows, None, None][:2]
        first = "—" if start is None else start
        last = "end" if end is None else end
        where = q.file or ", ".join(q.files) or "—"
        rows.append(
            f"<tr><td><code>{e(q.task or '—')}</code></td><td>{e(q.source or '—')}</td>"
            f"<td><code>{e(where)}</code></td><td class='num'>{e(first)}..{e(last)}</td>"
            f"<td class='num'>{fmt_count(q.rows_missing)}</td><td>{e(q.error or '—')}</td></tr>"
        )
    return (
        "<h3>Quarantined tasks</h3><table class='quarantine'><thead><tr><th>Task</th><th>Source</th>"
        "<th>File</th><th class='num'>Rows</th><th class='num'>Not trained</th><th>Error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table><p class='note'>Their rows are not in the model; each "
        "is also a TaskQuarantined event.</p>"
    )


def _where(handle: HandleStatus) -> str:
    """Where the executor runs, in its backend's words: a process id, a pod, a YARN container."""
    ref = handle.ref  # each backend's own keys
    return str(ref.get("pid") or ref.get("pod") or ref.get("container") or "—")


def _executors_table(status: JobStatus, points: Sequence[Point]) -> str:
    executors = status.executors
    if not executors:
        return '<p class="muted">No executors yet.</p>'
    rows = []
    for name, ex in sorted(
        executors.items(), key=lambda item: (item[1].handle.role, item[1].handle.index, item[0])
    ):
        handle, usage = ex.handle, ex.telemetry
        memory = handle.allotment.memory
        trend = [p.executors[name]["cpu_util"] for p in points if "cpu_util" in p.executors.get(name, {})]
        spark = sparkline(trend[-60:], width=80, height=18, label=f"{name} CPU utilisation") if trend else ""
        last = ex.reason or ""
        if ex.exit_code is not None:
            last = f"{last} (exit {ex.exit_code})".strip()
        rows.append(
            "<tr>"
            f"<td>{e(name)}</td><td>{e(handle.role)}</td><td>{e(ex.state)}</td>"
            f"<td class='num'>{e(_where(handle))}</td>"
            f"<td class='num'>{e(fmt_cores(handle.allotment.cpu))}</td>"
            f"<td class='num'>{e(fmt_bytes(memory))}</td>"
            f"<td class='num'>{spark}{e(fmt_pct(usage.cpu_util if usage else None))}</td>"
            f"<td class='num'>{e(fmt_bytes(usage.rss if usage else None))} / {e(fmt_bytes(memory))}"
            f" ({e(fmt_pct(usage.mem_util if usage else None))})</td>"
            f"<td class='num'>{e(fmt_count(usage.rows_per_s if usage else None))}</td>"
            f"<td class='num'>{e(fmt_count(ex.restarts))}</td>"
            f"<td>{e(last or '—')}</td>"
            "</tr>"
        )
    return (
        "<table><thead><tr><th>Executor</th><th>Role</th><th>State</th>"
        "<th class='num'>PID / pod / container</th>"
        "<th class='num'>CPU allotted</th><th class='num'>Memory allotted</th>"
        "<th class='num'>CPU utilisation</th><th class='num'>RSS / limit</th><th class='num'>Rows/s</th>"
        "<th class='num'>Restarts</th><th>Last exit</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        "<p class='note'>Utilisation is a share of the allotment, from the master's last two samples.</p>"
    )


def _rates(points: Sequence[Point], attr: str) -> list[tuple[float, float]]:
    out = []
    for a, b in itertools.pairwise(points):
        va, vb = getattr(a, attr), getattr(b, attr)
        if va is not None and vb is not None and b.t > a.t and vb >= va:
            out.append((b.t, (vb - va) / (b.t - a.t)))
    return out


def _series(points: Sequence[Point], attr: str) -> list[tuple[float, float]]:
    return [(p.t, v) for p in points if (v := getattr(p, attr)) is not None]


def _training_section(status: JobStatus, points: Sequence[Point], sample_s: float | None) -> str:
    progress = status.progress
    m = progress.metrics()
    speed = [v for _, v in _series(points, "samples_per_s")]
    cards = [
        ("trainer step", fmt_count(progress.trainer_step), ""),
        ("rows trained", fmt_count(progress.trainer_rows), ""),
        ("window AUC", fmt_metric(m.progressive.window_auc), ""),
        ("progressive AUC", fmt_metric(m.progressive.auc), ""),
        (
            "samples/s",
            fmt_count(m.samples_per_s),
            sparkline(speed[-60:], label="samples/s") if speed else "",
        ),
        (
            "freshness p50 / p99 (s)",
            f"{fmt_metric(m.freshness_s.p50, 1)} / {fmt_metric(m.freshness_s.p99, 1)}",
            "",
        ),
        ("watermark", m.watermark or "—", ""),
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
        "These charts draw the history the job's master keeps with the job (the same for every web "
        "server, and kept across restarts), then the statuses this web server has read since its last "
        f"point (each page view, and{every} while the job runs): "
        f"{len(points)} point{'s' if len(points) != 1 else ''} so far."
    )
    return html + "<div class='charts'>" + "".join(charts) + f"</div><p class='note'>{e(note)}</p>"


def _mode(status: JobStatus) -> str:
    return status.progress.metrics().mode or "?"


def _auc(status: JobStatus) -> AucFigures:
    return status.progress.metrics().progressive


def comparison_section(
    record: JobRecord,
    points: Sequence[Point],
    baselines: Sequence[tuple[JobRecord, Sequence[Point]]],
    *,
    base: str,
    status: JobStatus | None = None,
) -> str:
    """This job's stream AUC beside its baselines' (jobs labelled ``primus.dev/baseline-for``).

    Both are progressive validation on the same stream, each row scored before the job could learn
    from it, so the difference is what training on the stream (or not) buys; ``window`` is over the
    most recent rows, where a model that stopped learning falls behind. ``status``: the record's,
    when the page has read it already."""
    if not baselines:
        return ""
    status = read_status(record) if status is None else status
    mine, mode = _auc(status), _mode(status)
    rows, series = [], [Series(f"{record.name} ({mode})", _series(points, "window_auc"))]
    for other, other_points in baselines:
        other_status = read_status(other)
        theirs, their_mode = _auc(other_status), _mode(other_status)
        cells = []
        for a, b in ((mine.window_auc, theirs.window_auc), (mine.auc, theirs.auc)):
            delta = "—" if a is None or b is None else f"{a - b:+.3f}"
            cells.append(f"<td class='num'>{fmt_metric(b)}</td><td class='num'><b>{e(delta)}</b></td>")
        rows.append(
            f'<tr><td><a href="{e(job_href(base, other.name))}">{e(other.name)}</a> '
            f"({e(their_mode)})</td>{''.join(cells)}</tr>"
        )
        series.append(
            Series(f"{other.name} ({their_mode})", _series(other_points, "window_auc"), dashed=True)
        )
    head = (
        f"<p>Stream AUC of this job ({e(mode)}): "
        f"window {fmt_metric(mine.window_auc)}, progressive {fmt_metric(mine.auc)}.</p>"
    )
    table = (
        "<table class='comparison'><thead><tr><th>Baseline</th><th class='num'>Window AUC</th>"
        "<th class='num'>This job - baseline</th><th class='num'>Progressive AUC</th>"
        f"<th class='num'>This job - baseline</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    chart = line_chart(series, title="Window AUC on the stream", width=640, height=200)
    note = (
        "Progressive validation: every stream row is scored by each model before that model may train "
        "on it. A batch-only baseline trains on the same history and only scores the stream."
    )
    return head + table + chart + f"<p class='note'>{e(note)}</p>"


def job_page(
    record: JobRecord,
    events: Sequence[Event],
    points: Sequence[Point],
    *,
    base: str,
    now: float,
    sample_s: float | None = None,
    baselines: Sequence[tuple[JobRecord, Sequence[Point]]] = (),
    stale: str | None = None,
    status: JobStatus | None = None,
) -> str:
    """``stale``: why the stored status is not current (store_health.stale_reason), shown above it.
    ``status``: the record's, when the caller has read it already (it read the history from it)."""
    s = read_status(record) if status is None else status
    master, savepoints, updated = s.master, s.savepoints, s.updated
    facts = [
        ("Phase", phase_badge(s)),
        ("Message", e(s.message or "—")),
        ("Master API", f"<code>{e((master.api if master else None) or '—')}</code>"),
        ("Master PID", e((master.pid if master else None) or "—")),
        ("Dispatcher", f"<code>{e((master.dispatcher if master else None) or '—')}</code>"),
        ("Replicas", e(", ".join(f"{k}: {v}" for k, v in sorted(s.replicas.items())) or "—")),
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
                        f"{k}: {v.state}" + (f" @ step {v.step}" if v.step is not None else "")
                        for k, v in sorted(savepoints.items())
                    )
                ),
            )
        )
    header = (
        f"<h1>{e(record.name)} {phase_badge(s)}</h1>"
        + (f"<p class='stale' role='alert'><strong>Warning:</strong> {e(stale)}</p>" if stale else "")
        + f"<p class='note'><a href=\"{e(base)}/api/jobs/{e(quote(record.name, safe=''))}\">"
        "status as JSON</a></p>"
        "<dl class='kv'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
    )
    if baselines:
        header += "<h2>Compared with its baseline</h2>" + comparison_section(
            record, points, baselines, base=base, status=s
        )
    body = (
        header
        + "<h2>Executors</h2>"
        + _executors_table(s, points)
        + "<h2>Scaling</h2>"
        + scaling_section(events, s, now)
        + "<h2>Data progress</h2>"
        + _data_table(s)
        + _quarantine_table(s)
        + "<h2>Training</h2>"
        + _training_section(s, points, sample_s)
    )
    return page(f"{record.name} · Primus", body, base=base, refresh=s.phase not in TERMINAL)
