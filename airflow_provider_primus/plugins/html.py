"""HTML building blocks for the Primus pages: escaping, number formats, the page frame.

Everything that comes from the store is escaped with ``html.escape`` here; URLs are built from quoted
path segments. No JavaScript: a running job's page refreshes itself with ``<meta http-equiv="refresh">``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from airflow_provider_primus.contracts.status import JobStatus, Phase
from airflow_provider_primus.plugins.status import num

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
.stale { border-left: 4px solid var(--bad); padding: 4px 8px; background: var(--head); }
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


def phase_badge(status: JobStatus) -> str:
    phase = "Suspended" if status.suspended and status.phase is Phase.RUNNING else status.phase.value
    css = re.sub(r"[^A-Za-z]", "", phase)
    return f'<span class="badge phase-{css}" title="{e(status.message)}">{e(phase)}</span>'


def labels_html(labels: Mapping[str, Any]) -> str:
    if not labels:
        return '<span class="muted">—</span>'
    return "".join(f'<span class="label">{e(k)}={e(v)}</span>' for k, v in sorted(labels.items()))


def bar(done: float, total: float) -> str:
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
