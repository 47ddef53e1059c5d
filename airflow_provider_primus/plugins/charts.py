"""Inline SVG charts rendered in Python: no JavaScript, no CDN (the UI may be offline).

Every string that reaches the SVG goes through ``html.escape``; colours and geometry are ours.
Times are seconds since the epoch and are labelled in UTC.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (time, value), in time order
    color: str | None = None
    dashed: bool = False


@dataclass(frozen=True)
class Mark:
    """One event on a timeline: a dot in its lane with a tooltip."""

    t: float
    lane: str
    text: str
    color: str = "#555"


@dataclass(frozen=True)
class _Frame:
    width: int
    height: int
    left: int = 60
    right: int = 12
    top: int = 26
    bottom: int = 22
    t0: float = 0.0
    t1: float = 1.0
    y0: float = 0.0
    y1: float = 1.0

    def x(self, t: float) -> float:
        span = self.t1 - self.t0 or 1.0
        return self.left + (t - self.t0) / span * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.height - self.bottom - (v - self.y0) / span * (self.height - self.top - self.bottom)


def fmt_number(v: float) -> str:
    """Compact: 1234567 -> 1.23M, 5000 -> 5k, 0.8123 -> 0.812."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3g}G"
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def fmt_clock(t: float, span: float) -> str:
    tm = time.gmtime(t)
    return time.strftime("%m-%d %H:%M" if span > 86400 else "%H:%M:%S", tm)


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _legend_layout(labels: Sequence[str], left: int, right: int) -> list[tuple[float, int]]:
    """(x, row) of each legend entry, flowed left to right and wrapped (text width estimated)."""
    out: list[tuple[float, int]] = []
    x, row = float(left), 0
    for label in labels:
        w = 14 + 6.2 * len(label) + 16
        if x > left and x + w > right:
            x, row = float(left), row + 1
        out.append((x, row))
        x += w
    return out


def _svg_open(width: int, height: int, title: str) -> str:
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f'<text x="4" y="14" class="chart-title">{escape(title)}</text>'
    )


def empty_chart(title: str, note: str, width: int = 640, height: int = 80) -> str:
    return (
        _svg_open(width, height, title)
        + f'<text x="{width // 2}" y="{height // 2 + 8}" text-anchor="middle" class="chart-note">'
        + f"{escape(note)}</text></svg>"
    )


def _time_axis(f: _Frame, label_y: float) -> list[str]:
    out = [
        f'<line x1="{f.left}" y1="{f.height - f.bottom}" x2="{f.width - f.right}" '
        f'y2="{f.height - f.bottom}" class="axis"/>'
    ]
    span = f.t1 - f.t0
    seen = set()
    for i in range(5):
        t = f.t0 + span * i / 4
        label = fmt_clock(t, span)
        if label in seen:  # a span of a few seconds: label each second once
            continue
        seen.add(label)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<text x="{f.x(t):.1f}" y="{label_y:.1f}" text-anchor="{anchor}" class="tick">'
            f"{escape(label)}</text>"
        )
    return out


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    unit: str = "",
    width: int = 640,
    height: int = 200,
    step: bool = False,
    y_min: float | None = None,
    y_max: float | None = None,
    t_range: tuple[float, float] | None = None,
    value_format: Callable[[float], str] = fmt_number,
    empty_note: str = "no data yet",
) -> str:
    """A time-series chart; ``step`` draws each value until the next one (allotments, counts) and
    carries the last one to the end of ``t_range``."""
    drawn = [s for s in series if s.points]
    if not drawn:
        return empty_chart(title, empty_note, width)
    ts = [t for s in drawn for t, _ in s.points]
    vs = [v for s in drawn for _, v in s.points]
    t0, t1 = t_range if t_range is not None else (min(ts), max(ts))
    if t1 <= t0:
        t0, t1 = t0 - 30.0, t0 + 30.0
    lo = min(vs) if y_min is None else y_min
    hi = max(vs) if y_max is None else y_max
    if y_min is None and lo > 0 and lo < 0.4 * hi:
        lo = 0.0  # a zero baseline unless the values sit far from it (AUC near 0.8)
    if hi <= lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    ticks = nice_ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    legend = _legend_layout([s.label for s in drawn], left=60, right=width - 12)
    legend_rows = 1 + max(row for _, row in legend)
    f = _Frame(
        width, height + 14 * (legend_rows - 1), t0=t0, t1=t1, y0=lo, y1=hi, bottom=22 + 14 * legend_rows
    )
    out = [_svg_open(f.width, f.height, title)]
    for v in ticks:
        y = f.y(v)
        out.append(f'<line x1="{f.left}" y1="{y:.1f}" x2="{f.width - f.right}" y2="{y:.1f}" class="grid"/>')
        label = value_format(v) + (f" {unit}" if unit and v == ticks[-1] else "")
        out.append(
            f'<text x="{f.left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">{escape(label)}</text>'
        )
    out += _time_axis(f, f.height - f.bottom + 14)
    for i, s in enumerate(drawn):
        color = s.color or PALETTE[i % len(PALETTE)]
        pts = sorted((t, v) for t, v in s.points if t0 <= t <= t1) or [sorted(s.points)[-1]]
        if step:
            d = f"M{f.x(max(pts[0][0], t0)):.1f},{f.y(pts[0][1]):.1f}"
            for t, v in pts[1:]:
                d += f" H{f.x(t):.1f} V{f.y(v):.1f}"
            d += f" H{f.x(t1):.1f}"
        else:
            d = "M" + " L".join(f"{f.x(t):.1f},{f.y(v):.1f}" for t, v in pts)
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>')
        # A dot per point carries its tooltip; past a few dozen points the dots are invisible
        # (still hoverable) so the line stays readable.
        opacity = "" if len(pts) <= 24 else ' fill-opacity="0"'
        for t, v in pts:
            out.append(
                f'<circle cx="{f.x(t):.1f}" cy="{f.y(v):.1f}" r="2.5" fill="{color}"{opacity}>'
                f"<title>{escape(s.label)}: {escape(value_format(v))}{escape(' ' + unit if unit else '')}"
                f" at {escape(fmt_clock(t, 0))} UTC</title></circle>"
            )
        lx, row = legend[i]
        ly = f.height - f.bottom + 30 + row * 14
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="3" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly - 4}" class="legend">{escape(s.label)}</text>')
    out.append("</svg>")
    return "".join(out)


def sparkline(values: Sequence[float], *, width: int = 160, height: int = 36, label: str = "") -> str:
    """A tiny trend line with no axes; fewer than two values draw nothing but the frame."""
    out = [
        f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
    ]
    if len(values) >= 2:
        lo, hi = min(values), max(values)
        span = hi - lo or 1.0
        step = (width - 4) / (len(values) - 1)
        pts = " ".join(
            f"{2 + i * step:.1f},{height - 3 - (v - lo) / span * (height - 6):.1f}"
            for i, v in enumerate(values)
        )
        out.append(f'<polyline points="{pts}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>')
    out.append("</svg>")
    return "".join(out)


def timeline(
    marks: Sequence[Mark],
    lanes: Sequence[str],
    *,
    title: str,
    width: int = 640,
    t_range: tuple[float, float] | None = None,
) -> str:
    """Events as dots in one lane per kind, across time; each dot's tooltip is its message."""
    if not marks:
        return empty_chart(title, "no scaling events yet", width)
    ts = [m.t for m in marks]
    t0, t1 = t_range if t_range is not None else (min(ts), max(ts))
    if t1 <= t0:
        t0, t1 = t0 - 30.0, t0 + 30.0
    lane_h = 22
    f = _Frame(width, 26 + lane_h * len(lanes) + 24, left=130, t0=t0, t1=t1)
    out = [_svg_open(f.width, f.height, title)]
    index = {lane: i for i, lane in enumerate(lanes)}
    for lane, i in index.items():
        y = f.top + lane_h * i + lane_h / 2
        out.append(f'<line x1="{f.left}" y1="{y}" x2="{f.width - f.right}" y2="{y}" class="grid"/>')
        out.append(f'<text x="{f.left - 6}" y="{y + 4}" text-anchor="end" class="tick">{escape(lane)}</text>')
    out += _time_axis(f, f.height - 6)
    for m in marks:
        if m.lane not in index:
            continue
        y = f.top + lane_h * index[m.lane] + lane_h / 2
        out.append(
            f'<circle cx="{f.x(m.t):.1f}" cy="{y}" r="5" fill="{m.color}" fill-opacity="0.8">'
            f"<title>{escape(fmt_clock(m.t, 0))} UTC: {escape(m.text)}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)
