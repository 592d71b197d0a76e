"""results.jsonl (a public format): writes a run's rows as they are judged, with their details (core/details.py),
and reads them back, refusing a row no run writes.

results.jsonl is append-only and flushed once per case (the runner calls `flush` after a
case's rows), so a run stopped at any moment leaves every finished case's rows readable;
a last line cut short is dropped on --resume. run.json is core/manifest.py's; the bounded reading every file of
a run goes through is core/runfile.py's.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from conformance.core.defects import DEFECT_ID
from conformance.core.details import DETAIL_KEYS, DETAIL_RELEASE, DETAILS_FILE, encoded_fields
from conformance.core.errors import ResultsError
from conformance.core.model import PARTS, RESULT_FIELDS, Result, Verdict, is_refusal
from conformance.core.runfile import check_format_version, excerpt, is_present, load_json, numbered_lines, to_float

RESULTS_FILE = "results.jsonl"


class ResultsWriter:
    """Writes Result rows to results.jsonl, one line each (appending, to resume a run), and, for
    divergences, their inputs and values to details.jsonl for the HTML report. `flush` puts what
    was written on disk; closing flushes too."""

    def __init__(self, out_dir: Path, append: bool = False) -> None:
        self.path = out_dir / RESULTS_FILE
        self._file = self.path.open("a" if append else "w", encoding="utf-8")
        self._details = (out_dir / DETAILS_FILE).open("a" if append else "w", encoding="utf-8")

    def write(self, result: Result, detail: Sequence[str] | None = None) -> None:
        """One row; with `detail` (the divergence's further fields, each group made by `encoded_fields`), its
        line in details.jsonl: the row's DETAIL_KEYS, then those fields."""
        self._file.write(result.to_json() + "\n")
        if detail is not None:
            key = encoded_fields(**{k: getattr(result, k) for k in (*DETAIL_KEYS, DETAIL_RELEASE)})
            self._details.write("{" + ", ".join((key, *detail)) + "}\n")

    def flush(self) -> None:
        """Put every row written so far on disk (the runner calls it after each case)."""
        self._file.flush()
        self._details.flush()

    def close(self) -> None:
        self._file.close()
        self._details.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def iter_results(run_dir: str | Path, complete_lines_only: bool = False) -> Iterator[Result]:
    """Rows of a run directory's results.jsonl; a bad line names the file and line.

    With `complete_lines_only`, a last line cut short by a killed run (every earlier line
    was flushed whole) is skipped instead of refused, so the run can be resumed.
    """
    path = Path(run_dir) / RESULTS_FILE
    if not is_present(Path(run_dir), directory=True) or not is_present(path):
        raise ResultsError("no results.jsonl here", file=str(run_dir),
                           fix="pass the --out directory of a finished `kl-conformance run`")
    for number, line in numbered_lines(path, _DAMAGED):
        cut = not line.endswith(b"\n")  # the last line only: every line a run writes ends in one
        if complete_lines_only and cut:
            return
        if line.strip():
            yield _parse_row(line, path, number, _CUT if cut else _DAMAGED)


_DAMAGED = "regenerate the run, or remove the damaged line"
# a last line without its newline was being written when the run was killed: --resume writes it again
_CUT = ("the run was stopped while writing its last line: continue it with the same `kl-conformance run` command "
        "and --resume, which writes that line again, or regenerate the run")


def _parse_row(line: bytes, path: Path, number: int, fix: str = _DAMAGED) -> Result:
    """One line of results.jsonl; a damaged line or another format version names file and line."""
    try:
        row = load_json(line)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultsError(f"unreadable row ({exc})", file=str(path), where=f"line {number}", fix=fix) from None
    if not isinstance(row, dict):
        raise ResultsError(f"a row must be a JSON object, got {type(row).__name__}", file=str(path),
                           where=f"line {number}", fix=fix)
    check_format_version(row, str(path), f"line {number}")
    problem = row_problem(row)
    if problem is None:
        try:
            return Result.from_row(row)
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"unreadable row ({exc})"
    raise ResultsError(problem, file=str(path), where=f"line {number}", fix=fix)


_TEXT_FIELDS = ("case_id", "family", "reduction", "framework", "framework_version", "api", "device", "dtype", "cause",
                "message", "source", "spec_hash", "harness_version", "python_version", "numpy_version", "device_name")
_TEXT_LISTS = ("documented_by", "known_by", "warnings", "missing_warnings", "rules")
CASE_DIGEST = re.compile(r"[0-9a-f]{24}")  # a row's case_digest
MODE_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")  # eager, inductor-emulated: a word a command line can hold


def row_problem(row: dict[str, Any]) -> str | None:
    """What makes a row of results.jsonl one a run cannot have written (a field of the wrong type, a verdict
    its own numbers contradict), or None. Every field a report reads is checked, so a damaged or doctored row
    is refused in one line instead of crashing a report or passing a gate."""
    missing = [name for name in RESULT_FIELDS if name not in row]
    if missing:
        return f"missing fields {missing}"

    def bad(name: str, wanted: str) -> str:
        return f"field {name!r} holds {excerpt(row[name])}, not {wanted}"
    for name in _TEXT_FIELDS:
        if type(row[name]) is not str:
            return bad(name, "a string")
    if not row["case_id"].strip():  # as a case file refuses it: every report names a row by its case
        return bad("case_id", "a case id (a non-empty string)")
    for name in _TEXT_LISTS:
        if type(row[name]) is not list or not all(type(v) is str for v in row[name]):
            return bad(name, "a list of strings")
    for name in ("log_target", "documented"):
        if type(row[name]) is not bool:
            return bad(name, "true or false")
    if type(row["case_digest"]) is not str or not CASE_DIGEST.fullmatch(row["case_digest"]):
        return bad("case_digest", "24 hex digits")
    if row["seed"] is not None and (type(row["seed"]) is not int or row["seed"] < 0):
        return bad("seed", "a natural number or null")
    if type(row["part"]) is not str or row["part"] not in PARTS:
        return bad("part", f"one of {list(PARTS)}")
    if type(row["mode"]) is not str or not MODE_NAME.fullmatch(row["mode"]):
        return bad("mode", "a mode name (lower-case words joined by '-')")
    if type(row["verdict"]) is not str or row["verdict"] not in {v.value for v in Verdict}:
        return bad("verdict", f"one of {[v.value for v in Verdict]}")
    if row["like"] not in (None, "shared", "own") or type(row["like"]) not in (type(None), str):
        return bad("like", "'shared', 'own' or null")
    elapsed = row["elapsed_s"]
    if type(elapsed) not in (int, float) or not 0 <= elapsed < math.inf:
        return bad("elapsed_s", "a finite number of seconds")
    for name in ("max_abs_err", "bound"):
        if row[name] is not None and (to_float(row[name]) is None or to_float(row[name]) < 0):
            return bad(name, "a number >= 0, 'inf', 'nan' or null")
    verdict, err, bound = Verdict(row["verdict"]), to_float(row["max_abs_err"]), to_float(row["bound"])
    if (err is None) != (bound is None):
        return "max_abs_err and bound must both be numbers or both null"
    if verdict is Verdict.PASS and err is not None and not err <= bound:
        return f"a pass whose error {row['max_abs_err']} exceeds its bound {row['bound']}"
    if verdict is Verdict.VALUE and (err is None or err <= bound):
        return f"a value divergence whose error {row['max_abs_err']} is within its bound {row['bound']}"
    # a call the harness refused has no defect; a run of 0.14.2 or older gave it one, which is read as it is
    refused = type(row["message"]) is str and is_refusal(verdict, row["message"])
    if type(row["defect"]) is not str or (not refused and (verdict is Verdict.PASS) != (row["defect"] == "")) \
            or (row["defect"] and not DEFECT_ID.fullmatch(row["defect"])):
        return bad("defect", "a defect id (\"<framework>-<10 hex digits>\") on every row but a pass or a call the "
                   "harness refused, and \"\" there")
    if row["documented"] != bool(row["documented_by"]):
        return "documented must be true exactly when documented_by names a deviation"
    if (row["documented"] or row["known_by"]) and not verdict.is_divergence:
        return f"a {verdict.value} row is documented or known, but only a divergence can be"
    if (row["documented"] or row["known_by"]) and not verdict.is_finding:  # a divergence not checked (fallback)
        return f"a {verdict.value} row is documented or known, but its call was not checked, which nothing accepts"
    return None
