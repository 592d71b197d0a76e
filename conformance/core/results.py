"""Reads and writes a run directory: results.jsonl (a public format), details.jsonl, run.json.

results.jsonl is append-only and flushed once per case (the runner calls `flush` after a
case's rows), so a run stopped at any moment leaves every finished case's rows readable;
a last line cut short is dropped on --resume. run.json and what is rewritten whole go through
core/atomicfile.py, so none is ever half-written.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from conformance.core.atomicfile import write_atomic
from conformance.core.errors import ResultsError
from conformance.core.defects import DEFECT_ID
from conformance.core.model import FORMAT_VERSION, PARTS, RESULT_FIELDS, STRICT_JSON, Result, Verdict

RESULTS_FILE = "results.jsonl"
DETAILS_FILE = "details.jsonl"
DETAIL_ELEMENTS = 64  # elements kept per array in details.jsonl
MANIFEST_FILE = "run.json"
DETAIL_KEYS = ("case_id", "framework", "api", "device", "mode", "part")  # a detail's row key in details.jsonl
# written after the key since releases are set side by side: which release's row a detail belongs to (a detail
# without it, written before, belongs to the one release of its framework in a report)
DETAIL_RELEASE = "framework_version"
MAX_LINE_BYTES = 4 * 2**20  # one line of results.jsonl or details.jsonl: a row's texts are cut far shorter
MAX_MANIFEST_BYTES = 64 * 2**20  # run.json, or a merge's runs.json of many runs' manifests


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
    for number, line in _lines(path, fix):
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
            return f"field {name!r} has a shape {_shown(a['shape'])} that is not a list of sizes"
        if not all(_number(v) is not None for v in a["values"]):
            return f"field {name!r} holds values that are not numbers"
    for name in ("expected_error", "raised"):
        if detail.get(name) is not None and type(detail[name]) is not str:
            return f"field {name!r} holds {_shown(detail[name])}, not a string"
    return None


def iter_results(run_dir: str | Path, complete_lines_only: bool = False) -> Iterator[Result]:
    """Rows of a run directory's results.jsonl; a bad line names the file and line.

    With `complete_lines_only`, a last line cut short by a killed run (every earlier line
    was flushed whole) is skipped instead of refused, so the run can be resumed.
    """
    path = Path(run_dir) / RESULTS_FILE
    if not is_present(Path(run_dir), directory=True) or not is_present(path):
        raise ResultsError("no results.jsonl here", file=str(run_dir),
                           fix="pass the --out directory of a finished `kl-conformance run`")
    for number, line in _lines(path, "regenerate the run, or remove the damaged line"):
        if complete_lines_only and not line.endswith(b"\n"):
            return
        if line.strip():
            yield _parse_row(line, path, number)


def is_present(path: Path, directory: bool = False) -> bool:
    """Whether a run's file (a regular file), or with `directory` a run directory, is there. One that cannot be
    followed or read (a symbolic link that loops, a directory without permission), or a file that is not a
    regular one (a FIFO, whose reading would never end), is refused naming it, never taken for absent."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path),
                           fix="pass the run directory itself, or make it readable") from None
    if directory:
        return stat.S_ISDIR(mode)
    if not stat.S_ISREG(mode):
        raise ResultsError("not a regular file", file=str(path), fix="regenerate the run")
    return True


def _os_problem(exc: OSError) -> str:
    return "a symbolic link that loops" if exc.errno == errno.ELOOP else exc.strerror or type(exc).__name__


def _lines(path: Path, fix: str) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of a run's JSON Lines file, each at most MAX_LINE_BYTES; a longer one, or a file that
    cannot be read, names the file (and the line)."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None
    with f:
        number = 0
        while line := _read(f, MAX_LINE_BYTES + 1, path, fix):
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                raise ResultsError(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB, which no run writes",
                                   file=str(path), where=f"line {number}", fix=fix)
            yield number, line


def _read(f, limit: int, path: Path, fix: str) -> bytes:
    try:
        return f.readline(limit)
    except OSError as exc:  # a directory named like the file, a read error
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None


def load_json(text: bytes | str):
    """json.loads, where a document nested deeper than Python's stack is a ValueError like any unreadable one."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_json_file(path: Path, limit: int, what: str, fix: str):
    """The JSON document in `path`, `what` a message calls it (None where there is none): an unreadable,
    unparsable or larger than `limit` one is refused naming the file."""
    if not is_present(path):
        return None
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None
    if len(data) > limit:
        raise ResultsError(f"larger than {limit // 2**20} MiB, which no run writes", file=str(path), fix=fix)
    try:
        return load_json(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultsError(f"unreadable {what} ({exc})", file=str(path), fix=fix) from None


def _parse_row(line: bytes, path: Path, number: int) -> Result:
    """One line of results.jsonl; a damaged line or another format version names file and line."""
    try:
        row = load_json(line)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultsError(f"unreadable row ({exc})", file=str(path), where=f"line {number}",
                           fix="regenerate the run, or remove the damaged line") from None
    if not isinstance(row, dict):
        raise ResultsError(f"a row must be a JSON object, got {type(row).__name__}", file=str(path),
                           where=f"line {number}", fix="regenerate the run, or remove the damaged line")
    check_format_version(row, str(path), f"line {number}")
    problem = row_problem(row)
    if problem is None:
        try:
            return Result.from_row(row)
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"unreadable row ({exc})"
    raise ResultsError(problem, file=str(path), where=f"line {number}",
                       fix="regenerate the run, or remove the damaged line")


_TEXT_FIELDS = ("case_id", "family", "reduction", "framework", "framework_version", "api", "device", "dtype", "cause",
                "message", "source", "spec_hash", "harness_version", "python_version", "numpy_version", "device_name")
_TEXT_LISTS = ("documented_by", "known_by", "warnings", "missing_warnings", "rules")
_NONFINITE = ("nan", "inf", "-inf")
CASE_DIGEST = re.compile(r"[0-9a-f]{24}")  # a row's case_digest
MODE_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")  # eager, inductor-emulated: a word a command line can hold


def _number(value: Any) -> float | None:
    """A row's number as a float (its non-finite ones written as text), or None where it is none."""
    if type(value) in (int, float):
        return float(value)
    return float(value) if value in _NONFINITE else None


def row_problem(row: dict[str, Any]) -> str | None:
    """What makes a row of results.jsonl one a run cannot have written (a field of the wrong type, a verdict
    its own numbers contradict), or None. Every field a report reads is checked, so a damaged or doctored row
    is refused in one line instead of crashing a report or passing a gate."""
    missing = [name for name in RESULT_FIELDS if name not in row]
    if missing:
        return f"missing fields {missing}"

    def bad(name: str, wanted: str) -> str:
        return f"field {name!r} holds {_shown(row[name])}, not {wanted}"
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
        if row[name] is not None and (_number(row[name]) is None or _number(row[name]) < 0):
            return bad(name, "a number >= 0, 'inf', 'nan' or null")
    verdict, err, bound = Verdict(row["verdict"]), _number(row["max_abs_err"]), _number(row["bound"])
    if (err is None) != (bound is None):
        return "max_abs_err and bound must both be numbers or both null"
    if verdict is Verdict.PASS and err is not None and not err <= bound:
        return f"a pass whose error {row['max_abs_err']} exceeds its bound {row['bound']}"
    if verdict is Verdict.VALUE and (err is None or err <= bound):
        return f"a value divergence whose error {row['max_abs_err']} is within its bound {row['bound']}"
    if type(row["defect"]) is not str or (verdict is Verdict.PASS) != (row["defect"] == "") \
            or (row["defect"] and not DEFECT_ID.fullmatch(row["defect"])):
        return bad("defect", "a defect id (\"<framework>-<10 hex digits>\") on every row but a pass, and \"\" there")
    if row["documented"] != bool(row["documented_by"]):
        return "documented must be true exactly when documented_by names a deviation"
    if (row["documented"] or row["known_by"]) and not verdict.is_divergence:
        return f"a {verdict.value} row is documented or known, but only a divergence can be"
    if (row["documented"] or row["known_by"]) and not verdict.is_finding:  # a divergence not checked (fallback)
        return f"a {verdict.value} row is documented or known, but its call was not checked, which nothing accepts"
    return None


def _shown(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: its JSON text, ASCII only, cut to `limit`."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit] + "..."


def check_format_version(document: dict[str, Any], shown: str, where: str | None = None) -> None:
    """Refuse a row or manifest of another format version (none written means version 1)."""
    version = document.get("format_version", 1)
    if version != FORMAT_VERSION:
        raise ResultsError(f"written in format version {version!r}; this harness reads version {FORMAT_VERSION}",
                           file=shown, where=where,
                           fix="re-baseline: run the frameworks again with this harness (kl-conformance run ... "
                               "--force, or tox -m conformance), or read it with the harness version that wrote it")


def manifest_text(manifest: dict[str, Any]) -> str:
    """run.json's text: the one place its serialisation is stated (write_manifest, and record.record_end's
    in-place rewrite on a full disk)."""
    return json.dumps({**manifest, "format_version": FORMAT_VERSION}, indent=2, sort_keys=True) + "\n"


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    write_atomic(out_dir / MANIFEST_FILE, manifest_text(manifest))


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """run.json of a run directory ({} when there is none); another format version is refused."""
    path = Path(run_dir) / MANIFEST_FILE
    manifest = read_json_file(path, MAX_MANIFEST_BYTES, "manifest", fix="regenerate the run")
    if manifest is None and not is_present(path):
        return {}
    if not isinstance(manifest, dict):
        raise ResultsError("a manifest must be a JSON object", file=str(path), fix="regenerate the run")
    check_format_version(manifest, str(path))
    check_manifest(manifest, str(path))
    return manifest


def _text_list(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def _text_object(value: Any) -> bool:
    return type(value) is dict and all(type(v) is str for v in value.values())


# The manifest fields reports and `repro` read, each with the test its value must pass; another field (one a
# newer harness adds) is left to the reader that knows it.
_MANIFEST_FIELDS: dict[str, tuple[str, Any]] = {
    **{name: ("a string", lambda v: type(v) is str)
       for name in ("framework", "framework_version", "status", "spec_hash", "harness_version", "python_version",
                    "numpy_version")},
    **{name: ("a string or null", lambda v: v is None or type(v) is str) for name in ("reason", "shard")},
    "seed": ("a natural number or null", lambda v: v is None or (type(v) is int and v >= 0)),
    "cases": ("a natural number or null", lambda v: v is None or (type(v) is int and v >= 0)),
    "case_files_kept": ("a list of strings", _text_list),
    "targets": ("a list of strings", _text_list),
    "counts": ("an object of counts", lambda v: type(v) is dict and all(type(n) is int for n in v.values())),
    "modes": ("a list of mode names", lambda v: _text_list(v) and all(MODE_NAME.fullmatch(m) for m in v)),
    "selection": ("an object", lambda v: type(v) is dict),
    "written": ("a list of strings", _text_list),
    "notes": ("a list of strings", _text_list),
    "like": ("a string or null", lambda v: v is None or type(v) is str),
    **{name: ("an object of strings", _text_object) for name in ("modes_not_run", "apis_not_run", "mirrors")},
}
# The fields of a manifest's `selection` that reports and gates read (core/scope.py), each with its test.
_SELECTION_FIELDS: dict[str, tuple[str, Any]] = {
    "adapter": ("a string", lambda v: type(v) is str),
    "shard": ("a string or null", lambda v: v is None or type(v) is str),
    "seed": ("an integer or null", lambda v: v is None or type(v) is int),
    **{name: ("a list of strings", _text_list) for name in ("narrowed_by", "parts", "apis", "devices")},
    "modes": ("a list of mode names", lambda v: _text_list(v) and all(MODE_NAME.fullmatch(m) for m in v)),
}


def check_manifest(manifest: dict[str, Any], shown: str, where: str | None = None) -> None:
    """Refuse a manifest (run.json, or one run of runs.json) whose fields that reports read have another type
    than a run writes: one line naming the file and field, instead of a crash in a report."""
    checks = [(name, manifest, name, test) for name, test in _MANIFEST_FIELDS.items()]
    if type(manifest.get("selection")) is dict:
        checks += [(f"selection.{name}", manifest["selection"], name, test) for name, test in _SELECTION_FIELDS.items()]
    for place, fields, name, (wanted, ok) in checks:
        if name in fields and not ok(fields[name]):
            raise ResultsError(f"field {place!r} holds {_shown(fields[name])}, not {wanted}", file=shown,
                               where=", ".join(filter(None, (where, place))), fix="regenerate the run")
