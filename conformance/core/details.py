"""details.jsonl: for each divergence, what the HTML report shows of it (its case's parameters, inputs, expected
and observed values, cut to DETAIL_ELEMENTS per array), one line keyed by its row.

Writes the lines' fields for core/results.py's ResultsWriter, and reads them back, refusing a line no run writes.
Knows only the fields the HTML report reads; never judges or computes a value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from conformance.core.errors import ResultsError
from conformance.core.model import STRICT_JSON
from conformance.core.runfile import excerpt, is_present, load_json, numbered_lines, to_float

DETAILS_FILE = "details.jsonl"
DETAIL_ELEMENTS = 64  # elements kept per array in details.jsonl
DETAIL_KEYS = ("case_id", "framework", "api", "device", "mode", "part")  # a detail's row key in details.jsonl
# written after the key since releases are set side by side: which release's row a detail belongs to (a detail
# without it, written before, belongs to the one release of its framework in a report)
DETAIL_RELEASE = "framework_version"


def detail_matcher(wanted: Iterable[tuple]) -> "Callable[[dict[str, Any]], tuple | None]":
    """For `wanted` rows (each its DETAIL_KEYS values, then its framework_version), a function giving the wanted
    row a detail is of, or None. A detail of a run made before details named their release matches the first
    wanted row of any release under its key."""
    wanted = set(wanted)
    by_key: dict[tuple, tuple] = {}
    for full in sorted(wanted):
        by_key.setdefault(full[:-1], full)

    def match(d: dict[str, Any]) -> tuple | None:
        key = tuple(d[k] for k in DETAIL_KEYS)
        release = d.get(DETAIL_RELEASE)
        if isinstance(release, str):
            return key + (release,) if key + (release,) in wanted else None
        return by_key.get(key)
    return match


def encoded_fields(**fields: Any) -> str:
    """`fields` as the inside of a JSON object: the text between its braces. Encoded once, a group of fields
    is joined into many lines ("{" + ", ".join(groups) + "}" is the JSON of the groups' fields in order)."""
    return STRICT_JSON.encode(fields)[1:-1]


def array_detail(values) -> dict[str, Any] | None:
    """A JSON-safe preview of an array: shape and up to DETAIL_ELEMENTS values (non-finite as strings)."""
    import numpy as np

    if values is None:
        return None
    a = np.asarray(values, dtype=np.float64)
    flat = a.reshape(-1)[:DETAIL_ELEMENTS]
    as_json = flat.tolist()
    for i in np.flatnonzero(~np.isfinite(flat)).tolist():
        as_json[i] = "nan" if np.isnan(flat[i]) else ("inf" if flat[i] > 0 else "-inf")
    return {"shape": list(a.shape), "values": as_json, "truncated": bool(a.size > DETAIL_ELEMENTS)}


def iter_details(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of details.jsonl (absent for runs made before it existed); a damaged line names file and line."""
    path = Path(run_dir) / DETAILS_FILE
    if not is_present(path):
        return
    fix = "regenerate the run, or delete details.jsonl (the HTML report then shows no arrays)"
    for number, line in numbered_lines(path, fix):
        if not line.strip():
            continue
        try:
            detail = load_json(line)
        except ValueError as exc:  # UnicodeDecodeError included
            detail = exc
        problem = f"unreadable detail ({detail})" if isinstance(detail, Exception) else detail_problem(detail)
        if problem is not None:
            raise ResultsError(problem, file=str(path), where=f"line {number}", fix=fix)
        yield detail


def detail_problem(detail: Any) -> str | None:
    """What makes a line of details.jsonl one a run cannot have written, or None: each field the HTML report
    shows is checked for its type (an array's shape a list of sizes, its values numbers)."""
    if not isinstance(detail, dict) or not all(type(detail.get(k)) is str for k in DETAIL_KEYS):
        return f"a detail must be a JSON object with the string fields {list(DETAIL_KEYS)}"
    if type(detail.get("params")) is not dict or type(detail.get("dtype")) is not str \
            or type(detail.get("layout")) is not str:
        return "a detail must hold its case's params (an object), dtype and layout (strings)"
    for name in ("input", "target", "expected", "bound", "got"):
        a = detail.get(name)
        if a is None:
            continue
        if type(a) is not dict or type(a.get("shape")) is not list or type(a.get("values")) is not list \
                or type(a.get("truncated")) is not bool:
            return f"field {name!r} must be an array preview (shape, values, truncated)"
        if not all(type(n) is int and n >= 0 for n in a["shape"]):
            return f"field {name!r} has a shape {excerpt(a['shape'])} that is not a list of sizes"
        if not all(to_float(v) is not None for v in a["values"]):
            return f"field {name!r} holds values that are not numbers"
    for name in ("expected_error", "raised"):
        if detail.get(name) is not None and type(detail[name]) is not str:
            return f"field {name!r} holds {excerpt(detail[name])}, not a string"
    return None
