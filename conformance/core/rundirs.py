"""Reads run directories: the rows and manifests of one run, or of a merge of several.

What a run directory holds is named here, so that the run wing (which writes and clears
them) and the reports (which read them) agree without importing each other. Reads only.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from conformance.core.errors import ResultsError
from conformance.core.manifest import MAX_MANIFEST_BYTES, check_manifest, read_manifest
from conformance.core.model import EAGER, FORMAT_VERSION, Result
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.runfile import check_format_version, is_present, read_json_file
from conformance.core.scope import row_framework, target_call

REPORT_FILE = "report.md"
DIVERGENCES_FILE = "divergences.md"  # every divergent row, linked from report.md
# the reports a run or a merge writes, one list: what `report` writes and what a run's directory may hold
REPORT_FILES = (REPORT_FILE, DIVERGENCES_FILE, "report.html", "junit.xml", "summary.json")
RUNS_FILE = "runs.json"
REPRO_DIR = "repro"  # a run's reproducers: one per defect (its example row), named by script_name, and its snippet
ISSUES_DIR = "issues"  # a run's issue drafts, one per undocumented defect
NAME_STEM_CHARS = 120  # of a file name made from a row's texts, before its hash: inside any file system's limit


def safe_file_name(names: Sequence[str], suffix: str) -> str:
    """A file name made from a row's texts: readable (the names joined by "__", each character outside ASCII
    letters, digits and -_=. replaced, cut short), and unique, as it ends in a digest of the whole tuple
    (`col/x` and `col_x` are two files). Never a path: it has no separator, and never starts with a dot."""
    readable = "".join(c if c.isascii() and (c.isalnum() or c in "-_=.") else "_"
                       for c in "__".join(names))[:NAME_STEM_CHARS]
    if readable.startswith("."):
        readable = "_" + readable[1:]
    whole = "\0".join(names).encode("utf-8", "surrogatepass")
    return f"{readable}__{hashlib.sha256(whole).hexdigest()[:12]}{suffix}"


def snippet_name(defect: str) -> str:
    """The file of a defect's short snippet in a run's reproducers (what its issue draft shows)."""
    return f"{defect}.snippet.py"


def script_name(case_id: str, api: str, device: str, part: str, suffix: str, mode: str = EAGER) -> str:
    """A reproducer's file name: the call's names made safe and cut short, ending in a digest of the whole call
    (safe_file_name), so that the reports (drafts.py) find a row's script by its name. The mode is among
    the names where it is not eager (an eager row's script keeps the name it had before modes)."""
    return safe_file_name((case_id, api, device, part) if mode == EAGER else (case_id, api, device, mode, part),
                          suffix)


def load_manifests(run_dirs: Sequence[str | Path], allow_missing: bool = False) -> tuple[list[Path], list[dict[str, Any]]]:
    """The run directories that hold results, and one manifest per directory.

    With `allow_missing`, a directory without results counts as a framework that was not
    run (its environment could not be built), named after the directory.
    """
    present, manifests = [], []
    for run_dir in map(Path, run_dirs):
        if not is_present(run_dir, directory=True) or not is_present(run_dir / RESULTS_FILE):
            if not allow_missing:
                raise ResultsError("no results.jsonl here", file=str(run_dir),
                                   fix="pass the --out directory of a finished `kl-conformance run` "
                                       "(or `kl-conformance report --allow-missing` to report it as not run)")
            manifests.append({"format_version": FORMAT_VERSION, "framework": run_dir.name, "status": "not_run",
                              "reason": f"no results in {run_dir}: its environment did not produce a run"})
            continue
        present.append(run_dir)
        manifests += [manifest for _, manifest in manifests_of([run_dir])]
    return present, manifests


def manifests_of(present: Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    """Each run's run.json with where it is: its directory, or a merged directory's runs.json (the manifests of
    the runs it holds) and its place there."""
    out: list[tuple[str, dict[str, Any]]] = []
    for run_dir in present:
        if is_present(run_dir / RUNS_FILE):
            out += [(f"{run_dir / RUNS_FILE} (run {k})", m) for k, m in enumerate(read_runs(run_dir), start=1)]
            continue
        manifest = read_manifest(run_dir)
        if manifest:
            out.append((str(run_dir), manifest))
    return out


def read_runs(merged_dir: Path) -> list[dict[str, Any]]:
    """The manifests a merge wrote into `merged_dir`/runs.json."""
    path = merged_dir / RUNS_FILE
    runs = read_json_file(path, MAX_MANIFEST_BYTES, "list of runs", fix="merge the runs again")
    if isinstance(runs, dict):  # {"runs": [...], "written": [...]}: the files the merge wrote there
        runs = runs.get("runs")
    if not isinstance(runs, list) or not all(isinstance(m, dict) for m in runs):
        raise ResultsError("not a list of run manifests", file=str(path), fix="merge the runs again")
    for i, manifest in enumerate(runs):
        check_format_version(manifest, str(path), f"run {i + 1}")
        check_manifest(manifest, str(path), f"run {i + 1}")
    return runs


def check_run_dirs(run_dirs: Sequence[str | Path]) -> None:
    """Refuse, naming it, a run directory given that cannot be followed (a symbolic link that loops) or read,
    before any path of it is resolved; an absent one is left to the reader (--allow-missing)."""
    for run_dir in run_dirs:
        is_present(Path(run_dir), directory=True)


def iter_rows(run_dirs: Sequence[Path]) -> Iterator[Result]:
    """Every row of the given directories, streamed; rows from different specs are refused."""
    first: str | None = None
    for run_dir in run_dirs:
        for row in iter_results(run_dir):
            if first is None:
                first = row.spec_hash
            elif row.spec_hash != first:
                raise ResultsError(f"results come from different specs (spec hashes {first} and {row.spec_hash})",
                                   file=str(run_dir), where=f"case {row.case_id!r}",
                                   fix="rerun the older runs with the current spec, or report them separately")
            yield row


def other_spec(found_hash: str, spec_hash: str, file: str, where: str, redo: str) -> ResultsError:
    """The one-line refusal of results made with another spec than the one this command reads: verdicts of
    two specs cannot be compared, resumed or merged. `redo` says how to make them again (re-baseline)."""
    return ResultsError(f"these results were made with another spec (hash {found_hash}) than this command's "
                        f"(hash {spec_hash})", file=file, where=where,
                        fix=f"{redo}; CHANGELOG.md says what changed between spec versions")


def release_order(release: str) -> tuple:
    """A sort key that orders releases as versions: by packaging's rules where it is installed and the release's
    first word is a version (optax's release names its JAX after it), else by the numbers and words in the text:
    1.13.1 before 2.13.0, 0.9 before 0.10."""
    head = release.split()[0] if release.split() else release
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        Version = None
    if Version is not None:
        try:
            return (0, Version(head), release)
        except InvalidVersion:
            pass
    pieces = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|[^\d.+\-_\s]+", release))
    return (1, pieces, release)


def released(manifests: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The frameworks of which the runs hold two releases or more on one device: the reports name a release for
    these only (a report of one release per framework reads as before releases were set side by side). Runs on
    devices of their own are not releases of one another: Keras' backends (tensorflow:cpu, jax:cpu) each give
    a version of their own, and share no call."""
    found: dict[str, dict[str, set[str]]] = {}
    for m in manifests:
        version = m.get("framework_version")
        targets = m.get("targets")
        if not (isinstance(version, str) and version):
            continue
        devices = {target_call(t)[1] for t in targets if isinstance(t, str) and t.count("/") in (2, 3)} \
            if isinstance(targets, list) else set()
        for device in devices or {""}:  # a run that names no target still counts once
            found.setdefault(row_framework(m), {}).setdefault(device, set()).add(version)
    return frozenset(name for name, by_device in found.items() if any(len(v) > 1 for v in by_device.values()))
