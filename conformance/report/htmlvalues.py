"""A divergence's values in report.html: which elements differ from the expected ones (the spec's element rule),
the worst of them for the row's header, and each array in its shape as a table, those elements highlighted.

Reads a row and its line of details.jsonl only; every value enters the page escaped.
"""

from __future__ import annotations

import html
import math
from itertools import product
from typing import Any

from conformance.core.model import Result, Verdict
from conformance.core.text import visible


def escape(text: Any) -> str:
    """Text as HTML that shows it literally, in an element or an attribute (a control character or a direction
    override as its escape)."""
    return html.escape(visible(str(text)), quote=True)


def _value(v: Any) -> float:
    """A value of details.jsonl as a float: non-finite values are stored as the text nan, inf or -inf."""
    return float(v)


def readable(a: Any) -> bool:
    """An array preview as a run writes it (details.detail_problem): a shape of sizes, values that are numbers.
    Anything else (a detail handed over unchecked) is shown as escaped text and compared with nothing."""
    if not (isinstance(a, dict) and isinstance(a.get("shape"), list) and isinstance(a.get("values"), list)):
        return False
    if not all(type(n) is int and n >= 0 for n in a["shape"]):
        return False
    try:
        list(map(_value, a["values"]))
    except (TypeError, ValueError):
        return False
    return True


def _fmt(x: float) -> str:
    """A value as a reader writes it: NaN, inf and -inf as such, others in their shortest exact form."""
    text = repr(x)  # a float's repr is already inf and -inf; only NaN is written otherwise
    return "NaN" if text == "nan" else text


def shape_text(shape: list[int]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _index_text(flat: int, shape: list[int]) -> str:
    index = []
    for n in reversed(shape):
        index.append(flat % n if n else 0)
        flat //= n if n else 1
    return "[" + ", ".join(str(i) for i in reversed(index)) + "]"


class Differing:
    """The flat positions (among the elements shown) where got differs from expected by the spec's element rule
    (tolerance.comparison): the NaN/inf pattern differs, or both are finite and further apart than the element's
    bound; the worst of them (a pattern difference first, else the largest error relative to its bound); and
    which bound was used (the run's per element, else the row's, which is its worst element's)."""

    def __init__(self, got: dict, want: dict, bound: dict | None, row_bound: float | None) -> None:
        per_element = bool(bound) and bound["shape"] == want["shape"]
        bounds = list(map(_value, bound["values"])) if per_element else []
        self.got, self.want = list(map(_value, got["values"])), list(map(_value, want["values"]))
        self.shape, self.truncated = want["shape"], got["truncated"]
        self.positions: set[int] = set()
        pattern, ratio = [], {}
        for i, (g, w) in enumerate(zip(self.got, self.want)):
            if math.isnan(g) != math.isnan(w) or ((math.isinf(g) or math.isinf(w)) and g != w):
                self.positions.add(i)
                pattern.append(i)
            elif math.isfinite(g) and math.isfinite(w):
                b = bounds[i] if per_element and i < len(bounds) else (None if per_element else row_bound)
                if b is not None and abs(g - w) > b:
                    self.positions.add(i)
                    ratio[i] = abs(g - w) / b if b > 0 else math.inf
        self.worst = pattern[0] if pattern else (max(ratio, key=ratio.__getitem__) if ratio else None)
        self.how = ("whose NaN/inf pattern differs or whose error exceeds its bound" if per_element else
                    "whose NaN/inf pattern differs" + (f", or whose error exceeds the row's bound {_fmt(row_bound)} "
                                                       "(its worst element's: the run kept no bound per element)"
                                                       if row_bound is not None else ""))


def differing(detail: dict, row_bound: float | None) -> Differing | None:
    """How got differs from expected, element by element; None where they cannot be compared so (an error,
    another shape)."""
    got, want, bound = detail.get("got"), detail.get("expected"), detail.get("bound")
    if not got or not want or not readable(got) or not readable(want) or got["shape"] != want["shape"]:
        return None
    return Differing(got, want, bound if bound and readable(bound) else None, row_bound)


def worst_text(r: Result, detail: dict | None, bad: Differing | None) -> str:
    """What the row's header shows of the values: the worst element's got against expected where the arrays
    were kept, the error against the bound, or what was raised or what shape came back."""
    error = (f"|err| {r.max_abs_err:.3g} &gt; bound {r.bound:.3g}"
             if r.max_abs_err is not None and r.bound is not None and r.verdict is Verdict.VALUE else "")
    if detail is None:
        return error
    got, want = detail.get("got"), detail.get("expected")
    if bad is not None and bad.worst is not None:
        i = bad.worst
        where = f" at {_index_text(i, bad.shape)}" if bad.shape else ""
        shown = f" (of the first {len(bad.got)} elements)" if bad.truncated else ""
        values = escape(f"got {_fmt(bad.got[i])}, expected {_fmt(bad.want[i])}{where}{shown}")
        return values + (f"; {error}" if error else "")
    if got and want and readable(got) and readable(want) and got["shape"] != want["shape"]:
        return escape(f"got shape {shape_text(got['shape'])}, expected {shape_text(want['shape'])}")
    if detail.get("raised"):
        text = detail["raised"]
        return "raised " + escape(text if len(text) <= 120 else text[:117] + "...")
    if detail.get("expected_error") and got and readable(got):
        return escape(f"got a value of shape {shape_text(got['shape'])}, expected {detail['expected_error']}")
    return error


def array_html(a: dict, marks: set[int], cls: str) -> str:
    """An array preview in its shape: a value for 0-d, a row for 1-d, a table for 2-d, and for more dimensions
    one table per index of the leading ones; the first elements only, with a note, when the run kept only those."""
    if not readable(a):
        return f"<pre>{escape(a)}</pre>"
    shape, values = a["shape"], list(map(_fmt, map(_value, a["values"])))
    size = math.prod(shape)
    if size == 0:
        return f"<p class='note'>no elements (shape {escape(shape_text(shape))})</p>"
    note = (f"<p class='note'>the first {len(values)} of {size} elements (the run keeps no more; the reproducer "
            "computes them all)</p>") if a["truncated"] or len(values) < size else ""
    # a value's text is _fmt's (digits, a sign, '.', 'e', NaN, inf): nothing in it needs escaping
    marked = f"<td class={cls}>"
    cells = [f"{marked}{v}</td>" if i in marks else f"<td>{v}</td>" for i, v in enumerate(values)]
    if len(shape) == 0:
        return f"<table class='arr'><tr>{cells[0]}</tr></table>"
    rows, cols = (1, shape[0]) if len(shape) == 1 else (shape[-2], shape[-1])
    tables, start = [], 0
    for lead in product(*(range(n) for n in shape[:-2])):
        if start >= len(values):
            break
        table = ["<table class='arr'><tr><th></th>"
                 + "".join(f"<th>{j}</th>" for j in range(min(cols, len(values) - start))) + "</tr>"]
        for i in range(rows):
            first = start + i * cols
            if first >= len(values):
                break
            table.append(f"<tr><th>{i if len(shape) > 1 else ''}</th>{''.join(cells[first:first + cols])}</tr>")
        table.append("</table>")
        label = f"<p class='note'>[{', '.join(map(str, lead))}, :, :]</p>" if lead else ""
        tables.append(f"<div class='slab'>{label}{''.join(table)}</div>" if lead else "".join(table))
        start += rows * cols
    return "".join(tables) + note
