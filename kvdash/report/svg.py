"""Horizontal bar, stacked-bar and strip charts written as SVG text directly (no plotting library).

The charts of a report are simple: one row per label, bars or dots along one x axis, a legend on top.
Writing the elements by hand keeps ``kvdash sweep`` from importing a plotting library (about a second of
start-up) and makes every byte deterministic.  Every label is XML-escaped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape as _html_escape

from kvdash.units import RATIO_DECIMALS

FONT = 11  # px
CHAR_W = 6.3  # average glyph width at FONT px (sans-serif), for the left margin
ROW = 22  # px per label row
WIDTH = 760  # px, whole chart
Series = tuple[str, str, Sequence[float]]  # legend name, colour, one value per label


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(s: str) -> str:
    """XML-escaped text that stays valid XML 1.0: characters XML forbids (C0 controls, surrogates) and
    those that hide or reorder text (bidi, zero-width) written as visible escapes."""
    from kvdash.errors import visible

    return _html_escape(_NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", visible(s)))


def _num(x: float) -> str:
    """A coordinate with at most 1 decimal (stable text)."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _tick_text(x: float) -> str:
    if x >= 1_000_000 and x % 1_000_000 == 0:
        return f"{int(x // 1_000_000):,}M"
    if x >= 1000 and x % 1000 == 0:
        return f"{int(x // 1000):,}k"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


def nice_ticks(hi: float, count: int = 6) -> list[float]:
    """0 and round steps (1, 2 or 5 x 10^k) up to at least ``hi``.

    >>> nice_ticks(47)
    [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    >>> nice_ticks(0)
    [0.0, 1.0]
    """
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(hi / step - 1e-9)
    return [float(i * step) for i in range(n + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten covering [lo, hi] (lo > 0).

    >>> log_ticks(3, 2000)
    [1.0, 10.0, 100.0, 1000.0, 10000.0]
    """
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0 ** k for k in range(a, max(b, a + 1) + 1)]


class _Chart:
    def __init__(self, labels: Sequence[str], legend: Sequence[tuple[str, str]], xlabel: str, title: str) -> None:
        self.labels = list(labels)
        self.left = min(360, int(max((len(s) for s in self.labels), default=4) * CHAR_W) + 12)
        self.plot_w = WIDTH - self.left - 24
        self.top = 26 + (18 if title else 0)
        self.height = self.top + ROW * len(self.labels) + 44
        self.parts: list[str] = []
        self.title = title
        self.legend = legend
        self.xlabel = xlabel

    def y(self, i: int) -> float:
        return self.top + ROW * i

    def text(self, x: float, y: float, s: str, anchor: str = "start", size: int = FONT, fill: str = "#222") -> None:
        self.parts.append(f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" font-size="{size}" '
                          f'fill="{fill}">{escape(s)}</text>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str, tip: str = "") -> None:
        title = f"<title>{escape(tip)}</title>" if tip else ""
        self.parts.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0))}" height="{_num(h)}" '
                          f'fill="{fill}">{title}</rect>' if title else
                          f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0))}" height="{_num(h)}" '
                          f'fill="{fill}"/>')

    def axis(self, ticks: Sequence[float], pos: object) -> None:
        bottom = self.y(len(self.labels))
        for t in ticks:
            x = pos(t)  # type: ignore[operator]
            self.parts.append(f'<path d="M{_num(x)} {self.top - 2}V{_num(bottom)}" stroke="#e2e8f0"/>')
            self.text(x, bottom + 14, _tick_text(t), "middle", 10, "#555")
        self.parts.append(f'<path d="M{self.left} {_num(bottom)}H{self.left + self.plot_w}" stroke="#888"/>')
        self.text(self.left + self.plot_w / 2, bottom + 32, self.xlabel, "middle", 11, "#333")
        for i, label in enumerate(self.labels):
            self.text(self.left - 6, self.y(i) + ROW / 2 + 4, label, "end")

    def svg(self) -> str:
        head = []
        if self.title:
            head.append(f'<text x="4" y="14" font-size="12" font-weight="bold" fill="#222">{escape(self.title)}</text>')
        x = self.left
        ly = self.top - 12
        for name, colour in self.legend:
            head.append(f'<rect x="{x}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
            head.append(f'<text x="{x + 14}" y="{ly}" font-size="10" fill="#333">{escape(name)}</text>')
            x += 24 + int(len(name) * 5.8)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{self.height}" '
                f'viewBox="0 0 {WIDTH} {self.height}" font-family="DejaVu Sans, Arial, sans-serif">\n'
                + "\n".join(head + self.parts) + "\n</svg>\n")


def bar_chart(labels: Sequence[str], series: Sequence[Series], xlabel: str, title: str = "",
              log: bool = False) -> str:
    """Grouped horizontal bars: one row per label, one bar per series (first label on top)."""
    c = _Chart(labels, [(n, col) for n, col, _ in series], xlabel, title)
    values = [v for _, _, vals in series for v in vals]
    positive = [v for v in values if v > 0]
    if log and positive:
        ticks = log_ticks(min(positive), max(positive))
        lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])

        def pos(v: float) -> float:
            return c.left + (0 if v <= 0 else max(0.0, math.log10(v) - lo) / (hi - lo) * c.plot_w)
    else:
        ticks = nice_ticks(max(values, default=0))

        def pos(v: float) -> float:
            return c.left + v / ticks[-1] * c.plot_w
    c.axis(ticks, pos)
    bar_h = (ROW - 6) / max(len(series), 1)
    for i in range(len(labels)):
        for k, (name, colour, vals) in enumerate(series):
            v = vals[i]
            c.rect(c.left, c.y(i) + 3 + k * bar_h, pos(v) - c.left, bar_h - 1, colour, f"{name}: {v:,}")
    return c.svg()


def stacked_chart(labels: Sequence[str], parts: Sequence[Series], xlabel: str, title: str = "") -> str:
    """Horizontal bars of shares stacked to 100 (first label on top)."""
    c = _Chart(labels, [(n, col) for n, col, _ in parts], xlabel, title)

    def pos(v: float) -> float:
        return c.left + v / 100 * c.plot_w
    c.axis([0, 20, 40, 60, 80, 100], pos)
    for i in range(len(labels)):
        left = 0.0
        for name, colour, vals in parts:
            v = vals[i]
            c.rect(pos(left), c.y(i) + 4, pos(left + v) - pos(left), ROW - 8, colour, f"{name}: {v:.1f} %")
            left += v
    return c.svg()


def strip_chart(labels: Sequence[str], points: Sequence[Sequence[float]], xlabel: str, band: tuple[float, float],
                band_name: str, title: str = "") -> str:
    """Dots along x per label row, over a shaded band (a claimed range)."""
    c = _Chart(labels, [(band_name, "#e2e8f0"), ("computed", "#2b6cb0")], xlabel, title)
    ticks = nice_ticks(max([band[1], *(v for row in points for v in row)]))

    def pos(v: float) -> float:
        return c.left + v / ticks[-1] * c.plot_w
    bottom = c.y(len(labels))
    c.rect(pos(band[0]), c.top - 2, pos(band[1]) - pos(band[0]), bottom - c.top + 2, "#e2e8f0")
    c.axis(ticks, pos)
    # thousands of dots on a large grid: pos(), _num() and ratio_text() written out in the loop (the same
    # arithmetic and text), the row's y once per row
    left, top, width, decimals = c.left, ticks[-1], c.plot_w, RATIO_DECIMALS
    parts = c.parts
    for i, row in enumerate(points):
        cy = _num(c.y(i) + ROW / 2)
        for v in row:
            cx = f"{left + v / top * width:.1f}".rstrip("0").rstrip(".")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3.5" fill="#2b6cb0"><title>{v:.{decimals}f}</title></circle>')
    return c.svg()


def line_chart(xs: Sequence[float], series: Sequence[tuple[str, str, Sequence[float | None]]], xlabel: str,
               ylabel: str, hline: tuple[float, str] | None = None, title: str = "") -> str:
    """Lines over a shared x axis (linear), y on a log scale (values > 0; None or <= 0 is a gap), with an
    optional dashed horizontal reference line ``(y, name)``."""
    height, left, right, top = 300, 64, 24, 26 + (18 if title else 0)
    plot_w, plot_h = WIDTH - left - right, height - top - 48
    ys = [v for _, _, vals in series for v in vals if v is not None and v > 0] + ([hline[0]] if hline else [])
    yt = log_ticks(min(ys), max(ys)) if ys else [1.0, 10.0]
    ylo, yhi = math.log10(yt[0]), math.log10(yt[-1])
    xt = nice_ticks(max(xs, default=0))

    def px(x: float) -> float:
        return left + x / xt[-1] * plot_w

    def py(y: float) -> float:
        return top + plot_h - (math.log10(y) - ylo) / (yhi - ylo) * plot_h

    parts: list[str] = []
    if title:
        parts.append(f'<text x="4" y="14" font-size="12" font-weight="bold" fill="#222">{escape(title)}</text>')
    for t in xt:
        parts.append(f'<path d="M{_num(px(t))} {top}V{top + plot_h}" stroke="#e2e8f0"/>')
        parts.append(f'<text x="{_num(px(t))}" y="{top + plot_h + 14}" text-anchor="middle" font-size="10" '
                     f'fill="#555">{escape(f"{t:g}")}</text>')
    for t in yt:
        parts.append(f'<path d="M{left} {_num(py(t))}H{left + plot_w}" stroke="#e2e8f0"/>')
        parts.append(f'<text x="{left - 6}" y="{_num(py(t) + 4)}" text-anchor="end" font-size="10" '
                     f'fill="#555">{escape(f"{t:g}")}</text>')
    parts.append(f'<text x="{_num(left + plot_w / 2)}" y="{height - 8}" text-anchor="middle" font-size="11" '
                 f'fill="#333">{escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{_num(top + plot_h / 2)}" text-anchor="middle" font-size="11" fill="#333" '
                 f'transform="rotate(-90 12 {_num(top + plot_h / 2)})">{escape(ylabel)} (log scale)</text>')
    legend = [(n, col) for n, col, _ in series]
    if hline:
        y = py(hline[0])
        parts.append(f'<path d="M{left} {_num(y)}H{left + plot_w}" stroke="#718096" stroke-dasharray="5 4"/>')
        legend.append((hline[1], "#718096"))
    for name, colour, vals in series:
        runs: list[list[str]] = [[]]
        for x, v in zip(xs, vals, strict=True):
            if v is None or v <= 0:
                runs.append([])
                continue
            runs[-1].append(f"{_num(px(x))} {_num(py(v))}")
            parts.append(f'<circle cx="{_num(px(x))}" cy="{_num(py(v))}" r="2.5" fill="{colour}">'
                         f'<title>{escape(f"{name}: {v:.4g} at {x:g}")}</title></circle>')
        for run in runs:
            if len(run) > 1:
                parts.append(f'<path d="M{"L".join(run)}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    x = left
    for name, colour in legend:
        parts.insert(0, f'<rect x="{x}" y="{top - 21}" width="10" height="10" fill="{colour}"/>'
                        f'<text x="{x + 14}" y="{top - 12}" font-size="10" fill="#333">{escape(name)}</text>')
        x += 24 + int(len(name) * 5.8)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, sans-serif">\n'
            + "\n".join(parts) + "\n</svg>\n")
