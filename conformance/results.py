"""Reads and writes a run directory: results.jsonl (a public format), run.json, atomic files.

results.jsonl is append-only and flushed per line, so a run stopped at any moment
leaves every finished row readable. Reports and other files are written to a
temporary file and renamed into place, so none is ever half-written.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from conformance.errors import ResultsError, UsageError
from conformance.model import Result

RESULTS_FILE = "results.jsonl"
DETAILS_FILE = "details.jsonl"
DETAIL_ELEMENTS = 64  # elements kept per array in details.jsonl
MANIFEST_FILE = "run.json"


def prepare_out_dir(path: str | Path) -> Path:
    """Create the output directory and prove it writable before any work starts."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to the output directory ({exc.strerror})", file=str(out), where="--out",
                         fix="choose a directory you can write to") from None
    return out


class ResultsWriter:
    """Writes Result rows to results.jsonl, one flushed line each (appending, to resume a run),
    and, for divergences, their inputs and values to details.jsonl for the HTML report."""

    def __init__(self, out_dir: Path, append: bool = False) -> None:
        self.path = out_dir / RESULTS_FILE
        self._file = self.path.open("a" if append else "w", encoding="utf-8")
        self._details = (out_dir / DETAILS_FILE).open("a" if append else "w", encoding="utf-8")

    def write(self, result: Result, detail: dict[str, Any] | None = None) -> None:
        self._file.write(result.to_json() + "\n")
        self._file.flush()
        if detail is not None:
            key = {k: getattr(result, k) for k in ("case_id", "framework", "api", "device", "part")}
            self._details.write(json.dumps({**key, **detail}, allow_nan=False) + "\n")
            self._details.flush()

    def close(self) -> None:
        self._file.close()
        self._details.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def array_detail(values) -> dict[str, Any] | None:
    """A JSON-safe preview of an array: shape and up to DETAIL_ELEMENTS values (non-finite as strings)."""
    import numpy as np

    if values is None:
        return None
    a = np.asarray(values, dtype=np.float64)
    flat = a.reshape(-1)[:DETAIL_ELEMENTS]
    as_json = [float(v) if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")) for v in flat]
    return {"shape": list(a.shape), "values": as_json, "truncated": bool(a.size > DETAIL_ELEMENTS)}


def iter_details(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of details.jsonl (absent for runs made before it existed)."""
    path = Path(run_dir) / DETAILS_FILE
    if path.is_file():
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def iter_results(run_dir: str | Path, repair_tail: bool = False) -> Iterator[Result]:
    """Rows of a run directory's results.jsonl; a bad line names the file and line.

    With `repair_tail`, a last line cut short by a killed run is removed from the file
    (every earlier line was flushed whole), so the run can be resumed.
    """
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        raise ResultsError("no results.jsonl here", file=str(run_dir),
                           fix="pass the --out directory of a finished `kl-conformance run`")
    if repair_tail:
        _drop_partial_last_line(path)
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield Result.from_json(line)
            except (ValueError, KeyError, TypeError) as exc:
                raise ResultsError(f"unreadable row ({exc})", file=str(path), where=f"line {number}",
                                   fix="regenerate the run, or remove the damaged line") from None


def _drop_partial_last_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    write_atomic(out_dir / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ResultsError(f"unreadable manifest ({exc})", file=str(path), fix="regenerate the run") from None


def write_rows_atomic(path: Path, rows: Iterator[Result]) -> None:
    """Stream rows into a temporary file beside `path`, then rename it into place."""
    write_lines_atomic(path, (row.to_json() + "\n" for row in rows))


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Stream lines into a temporary file beside `path`, then rename it into place; memory stays flat."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place."""
    write_lines_atomic(path, (text,))
