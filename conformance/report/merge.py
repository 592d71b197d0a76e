"""Builds reports from one or more run directories, including runs made on other machines.

Reads only results.jsonl and run.json files; merging N runs gives the same report
as one run that produced all of their rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from conformance.errors import ResultsError
from conformance.model import Result
from conformance.report.markdown import render_markdown
from conformance.results import MANIFEST_FILE, RESULTS_FILE, iter_results, read_manifest, write_atomic

REPORT_FILE = "report.md"


def load_runs(run_dirs: Sequence[str | Path], allow_missing: bool = False) -> tuple[list[Result], list[dict[str, Any]]]:
    """All rows and manifests of the given run directories; the spec hash must agree.

    With `allow_missing`, a directory without results counts as a framework that was not
    run (its environment could not be built), named after the directory.
    """
    rows: list[Result] = []
    manifests: list[dict[str, Any]] = []
    for run_dir in run_dirs:
        if allow_missing and not (Path(run_dir) / RESULTS_FILE).is_file():
            manifests.append({"framework": Path(run_dir).name, "status": "not_run",
                              "reason": f"no results in {run_dir}: its environment did not produce a run"})
            continue
        manifest = read_manifest(run_dir)
        if manifest:
            manifests.append(manifest)
        rows.extend(iter_results(run_dir))
    hashes = sorted({r.spec_hash for r in rows})
    if len(hashes) > 1:
        raise ResultsError(f"results come from different specs (spec hashes {hashes})",
                           file=", ".join(map(str, run_dirs)),
                           fix="rerun the older runs with the current spec, or report them separately")
    return rows, manifests


def write_report(out_dir: Path, rows: Sequence[Result], manifests: Sequence[dict[str, Any]]) -> Path:
    """Write report.md into `out_dir` atomically and return its path."""
    path = out_dir / REPORT_FILE
    write_atomic(path, render_markdown(rows, manifests))
    return path


def merge_runs(run_dirs: Sequence[str | Path], out_dir: Path, allow_missing: bool = False) -> Path:
    """Merge run directories into `out_dir`: results.jsonl, runs.json and report.md."""
    rows, manifests = load_runs(run_dirs, allow_missing)
    resolved = {Path(d).resolve() for d in run_dirs}
    if out_dir.resolve() not in resolved:
        write_atomic(out_dir / RESULTS_FILE, "".join(r.to_json() + "\n" for r in rows))
        write_atomic(out_dir / "runs.json", json.dumps(manifests, indent=2, sort_keys=True) + "\n")
    return write_report(out_dir, rows, manifests)


__all__ = ["load_runs", "write_report", "merge_runs", "MANIFEST_FILE"]
