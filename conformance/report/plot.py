"""Draws the "error relative to the bound" histogram as inline SVG text.

Hand-written instead of matplotlib: importing and drawing with matplotlib was a noticeable part
of every run, and SVG keeps report.html self-contained and text-diffable.
Same input, same bytes. Reads the ratios a Tally gathered; never a framework or the reference.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from conformance.report.htmlvalues import escape

BINS = [x / 2 for x in range(-26, 9)]  # edges of log10(|error| / bound); right of 0 is outside the bound
FLOOR = -12.9  # exact results (ratio clamped to 1e-12 by the tally) land in the far-left bars
BOUND_COLOUR = "#b42318"
# matplotlib's tab10 without its red, so no dtype is mistaken for the bound line
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]

PANEL_W, PANEL_H = 450, 290  # one panel per framework, side by side
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 26, 42  # plot area margins inside a panel
X_LO, X_HI = BINS[0] - 0.5, BINS[-1] + 0.5
X_TICKS = [-12.5, -10.0, -7.5, -5.0, -2.5, 0.0, 2.5]


def ratio_histogram_svg(ratios: Mapping[tuple[str, str], Sequence[float]]) -> str | None:
    """One SVG with a step histogram of log10(ratio) per dtype, one panel per framework, shared y axis.

    Parameters
    ----------
    ratios
        ``{(framework, dtype): [max|error| / bound, ...]}``, as ``Tally.ratios`` holds them.

    Returns
    -------
    The ``<svg>`` element as text, or None when there is no finite ratio to draw. Each step
    path carries ``data-framework``, ``data-dtype`` and ``data-counts`` (the bin counts).
    """
    counts = {key: _counts(values) for key, values in sorted(ratios.items())}
    counts = {key: c for key, c in counts.items() if c is not None}
    if not counts:
        return None
    frameworks = sorted({fw for fw, _ in counts})
    dtypes = sorted({dt for _, dt in counts})
    top, step = _y_axis(max(max(c) for c in counts.values()))
    width = PANEL_W * len(frameworks)
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{PANEL_H}" '
           f'viewBox="0 0 {width} {PANEL_H}" role="img" aria-label="error over bound per framework and dtype" '
           'font-family="system-ui,sans-serif" font-size="11">']
    for i, fw in enumerate(frameworks):
        series = [(dt, counts[(fw, dt)]) for dt in dtypes if (fw, dt) in counts]
        out += _panel(i * PANEL_W, fw, series, dtypes, top, step, first=i == 0)
    out.append("</svg>")
    return "\n".join(out)


def _counts(values: Sequence[float]) -> list[int] | None:
    """Bin counts of log10(values), floored at FLOOR; None when no value is finite and positive."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a) & (a > 0)]
    if not a.size:
        return None
    counts, _ = np.histogram(np.maximum(np.log10(a), FLOOR), bins=BINS)
    return [int(c) for c in counts]


def _y_axis(highest: int) -> tuple[int, int]:
    """The axis top and tick step: a 1-2-5 step giving at most 6 ticks, the top a multiple of it."""
    highest = max(highest, 1)
    magnitude = 1
    while True:
        for m in (1, 2, 5):
            step = m * magnitude
            if -(-highest // step) <= 5:
                return step * -(-highest // step), step
        magnitude *= 10


def _n(v: float) -> str:
    """A coordinate with one decimal, trailing '.0' dropped: short and byte-stable."""
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _panel(x0: float, framework: str, series, dtypes: list[str], top: int, step: int, first: bool) -> list[str]:
    left, right = x0 + LEFT, x0 + PANEL_W - RIGHT
    base, ceiling = PANEL_H - BOTTOM, TOP

    def sx(v: float) -> float:
        return left + (v - X_LO) / (X_HI - X_LO) * (right - left)

    def sy(count: float) -> float:
        return base - count / top * (base - ceiling)

    out = [f'<g class="panel" data-framework="{escape(framework)}">',
           f'<rect x="{_n(left)}" y="{_n(ceiling)}" width="{_n(right - left)}" height="{_n(base - ceiling)}" '
           'fill="none" stroke="#888"/>',
           f'<text class="title" x="{_n((left + right) / 2)}" y="{_n(ceiling - 8)}" text-anchor="middle" '
           f'font-size="13">{escape(framework)}</text>',
           f'<text class="xlabel" x="{_n((left + right) / 2)}" y="{_n(PANEL_H - 6)}" '
           'text-anchor="middle">log10(|error| / bound)</text>']
    for v in X_TICKS:
        x = _n(sx(v))
        out.append(f'<line x1="{x}" y1="{_n(base)}" x2="{x}" y2="{_n(base + 4)}" stroke="#888"/>'
                   f'<text x="{x}" y="{_n(base + 16)}" text-anchor="middle">{_n(v)}</text>')
    for count in range(0, top + 1, step):
        y = _n(sy(count))
        out.append(f'<line x1="{_n(left - 4)}" y1="{y}" x2="{_n(left)}" y2="{y}" stroke="#888"/>')
        if first:  # the y axis is shared: labels on the first panel only
            out.append(f'<text x="{_n(left - 7)}" y="{_n(sy(count) + 4)}" text-anchor="end">{count}</text>')
    if first:
        out.append(f'<text class="ylabel" x="{_n(x0 + 14)}" y="{_n((base + ceiling) / 2)}" text-anchor="middle" '
                   f'transform="rotate(-90 {_n(x0 + 14)} {_n((base + ceiling) / 2)})">results</text>')
    for dtype, counts in series:
        d = [f"M{_n(sx(BINS[0]))},{_n(base)}"]
        d += [f"V{_n(sy(c))}H{_n(sx(edge))}" for c, edge in zip(counts, BINS[1:])]
        d.append(f"V{_n(base)}")
        out.append(f'<path class="step" data-framework="{escape(framework)}" data-dtype="{escape(dtype)}" '
                   f'data-counts="{" ".join(map(str, counts))}" d="{"".join(d)}" fill="none" '
                   f'{_stroke(dtypes.index(dtype))} stroke-width="1.2"/>')
    x = _n(sx(0.0))
    out.append(f'<line class="bound" x1="{x}" y1="{_n(ceiling)}" x2="{x}" y2="{_n(base)}" '
               f'stroke="{BOUND_COLOUR}" stroke-width="1"/>')
    out += _legend(right, ceiling, [dt for dt, _ in series], dtypes)
    return out + ["</g>"]


def _stroke(index: int) -> str:
    """A dtype's colour, the same in every panel; past the palette, dashes tell repeats apart."""
    dash = "" if index < len(PALETTE) else f' stroke-dasharray="{2 + 2 * (index // len(PALETTE))} 2"'
    return f'stroke="{PALETTE[index % len(PALETTE)]}"{dash}'


def _legend(right: float, ceiling: float, shown: list[str], dtypes: list[str]) -> list[str]:
    """The dtypes of one panel, boxed in its top-right corner."""
    width = 34 + 6.5 * max(len(dt) for dt in shown)
    x, y = right - width - 6, ceiling + 6
    out = [f'<g class="legend"><rect x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" height="{_n(6 + 14 * len(shown))}" '
           'fill="#fff" fill-opacity="0.85" stroke="#ccc"/>']
    for row, dtype in enumerate(shown):
        ly = y + 10 + 14 * row
        out.append(f'<line x1="{_n(x + 6)}" y1="{_n(ly)}" x2="{_n(x + 24)}" y2="{_n(ly)}" '
                   f'{_stroke(dtypes.index(dtype))} stroke-width="1.5"/>'
                   f'<text x="{_n(x + 29)}" y="{_n(ly + 4)}">{escape(dtype)}</text>')
    return out + ["</g>"]
