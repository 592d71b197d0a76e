"""The worked example of a divergence in report.md: the case's input and target, and its result against the
expected one at the element the judge names as the worst (or first), from the row's line of details.jsonl.

Reads a detail line and a judge's message only; imports nothing of the project but report.md's escaping.
"""

from __future__ import annotations

import math
import re
from typing import Any

from conformance.report.mdtext import cell

MESSAGE = 400  # characters of the worked example's message
VALUES = 6  # values shown per array preview


def render_example(detail: dict[str, Any] | None, message: str) -> list[str]:
    """The worked example's inputs and its result against the expected one, from its line of details.jsonl: at
    the element the judge's `message` names as the worst (or first) where it is among the values kept, else at
    the furthest of those."""
    if detail is None:
        return ["- inputs: not in details.jsonl"]
    out = [f"- {name}: {_preview(detail[name], detail.get('dtype') if name == 'input' else None)}"
           for name in ("input", "target") if isinstance(detail.get(name), dict)]
    got, expected = detail.get("got"), detail.get("expected")
    if isinstance(got, dict) and isinstance(expected, dict):
        if got["shape"] != expected["shape"]:
            out.append(f"- got shape {_shape(got)} against expected shape {_shape(expected)}: got "
                       f"{_values_of(got)}, expected {_values_of(expected)}")
        else:
            named = _named_element(message, got["shape"], got["values"], expected["values"])
            worst = named if named is not None else _worst(got["values"], expected["values"])
            if worst is None:
                out.append(f"- got {_values_of(got)}, expected {_values_of(expected)}")
            elif not got["shape"]:
                out.append(f"- got {_exact(got['values'][0])} against expected {_exact(expected['values'][0])}")
            else:
                where = _index(worst, got["shape"])
                which = ("the one the message names" if named is not None else "the furthest "
                         + (f"of the first {len(got['values'])} elements" if got.get("truncated") else "element"))
                out.append(f"- got {_exact(got['values'][worst])} against expected "
                           f"{_exact(expected['values'][worst])} at element {where}, {which}")
    elif isinstance(expected, dict):
        out.append(f"- expected {_shape(expected)}: {_values_of(expected)}")
    elif isinstance(got, dict):
        out.append(f"- got {_shape(got)}: {_values_of(got)}")
    for name, label in (("expected_error", "expected error"), ("raised", "raised")):
        if detail.get(name):
            out.append(f"- {label}: {cell(detail[name], MESSAGE)}")
    return out


def _preview(a: dict[str, Any], dtype: Any) -> str:
    return f"shape {_shape(a)}" + (f", {cell(dtype, 40)}" if dtype else "") + f": {_values_of(a)}"


def _shape(a: dict[str, Any]) -> str:
    return "(" + ", ".join(str(n) for n in a["shape"]) + ("," if len(a["shape"]) == 1 else "") + ")"


def _values_of(a: dict[str, Any]) -> str:
    values = a["values"]
    size = math.prod(a["shape"])
    text = ", ".join(_number(v) for v in values[:VALUES])
    return f"[{text}" + (f", ... ({size} values)]" if size > VALUES else "]")


def _number(v: Any) -> str:
    """A value of details.jsonl as text: a number in short form, or nan / inf / -inf as written there."""
    return cell(v, 12) if isinstance(v, str) else f"{v:.6g}"


def _exact(v: Any) -> str:
    """A value of details.jsonl as text, every digit of it (the float64 that was recorded)."""
    return cell(v, 12) if isinstance(v, str) else repr(float(v))


def _as_float(v: Any) -> float:
    return float(v) if isinstance(v, str) else v


_NAMED = re.compile(r"\b(?:worst|first) \[([0-9, ]*)\]:")


def _named_element(message: str, shape: list[int], got: list, expected: list) -> int | None:
    """The flat index of the element the judge's message names (`worst [i, j]:`, `first [i]:`), where it is among
    the values kept and they differ there; else None."""
    found = _NAMED.search(message)
    if found is None:
        return None
    index = [int(i) for i in found[1].replace(" ", "").split(",") if i]
    if len(index) != len(shape) or not all(0 <= i < n for i, n in zip(index, shape)):
        return None
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    if flat >= min(len(got), len(expected)) or _worst([got[flat]], [expected[flat]]) is None:
        return None
    return flat


def _worst(got: list, expected: list) -> int | None:
    """The flat index of the element where `got` is furthest from `expected` (NaN or inf against anything else
    counts as furthest), or None when they agree on every element shown."""
    worst, distance = None, 0.0
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = _as_float(g), _as_float(e)
        if math.isnan(g) and math.isnan(e) or g == e:
            continue
        d = abs(g - e) if math.isfinite(g) and math.isfinite(e) else math.inf
        if worst is None or d > distance:
            worst, distance = i, d
    return worst


def _index(flat: int, shape: list[int]) -> str:
    """A flat index as an index into an array of `shape` (C order), as NumPy prints one."""
    if not shape:
        return "()"
    index = []
    for n in reversed(shape):
        index.append(flat % n if n else 0)
        flat //= n if n else 1
    return "(" + ", ".join(str(i) for i in reversed(index)) + ("," if len(shape) == 1 else "") + ")"
