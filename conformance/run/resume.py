"""What --resume takes from an interrupted run: the rows it wrote (by call, with their verdicts), the files it
recorded writing, the output stages it recorded done and the framework version it ran; and the refusals of a
directory made otherwise (another framework, spec, profile set, framework version, or selection of cases or
calls: SELECTION_OPTIONS).

Reads the run directory, and trims from it only what a killed run may have left half-written (the rows of a case
it may not have written whole, a detail line without its row). Never decides what the resumed run sends, never calls
the worker, and never imports a framework or the reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from conformance.core.errors import ResultsError
from conformance.core.model import Spec
from conformance.core.atomicfile import write_lines_atomic
from conformance.core.details import DETAILS_FILE, iter_details
from conformance.core.manifest import MANIFEST_FILE, read_manifest
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import other_spec
from conformance.judge.profiles import default_profiles_dir
from conformance.run.record import STAGES

# run.json's `selection` fields --resume must find again, each with the option that sets it: rows of two
# selections in one directory would be gated as one run
SELECTION_OPTIONS = {"seed": "--seed", "suite": "--suite", "samples": "--samples", "case_files": "--cases",
                     "only": "--only", "shard": "--shard", "known": "--known", "reduction": "--reduction",
                     "modes": "--mode", "log_target": "--log-target", "dtype": "--dtype", "family": "--family",
                     "parts": "--part", "apis": "--api", "devices": "--device",
                     "memory_budget_mb": "--memory-budget-mb", "timeout_s": "--timeout-s"}
# compared as sets: `--api A --api B` selects what `--api B --api A` does
_UNORDERED = ("reduction", "log_target", "dtype", "family", "modes", "parts", "apis", "devices")
# files a selection records by digest: a refusal names the file, from the run.json field of its path
_FILE_FIELDS = {"case_files": "case_files", "known": "known"}

# a run.json written before the selection by meaning existed selected by none of it
_NOT_RECORDED = {"reduction": [], "log_target": [], "dtype": [], "family": [], "modes": ["eager"], "parts": [],
                 "apis": [], "devices": []}
_SINCE_0144 = ("memory_budget_mb", "timeout_s")  # recorded since 0.14.4


@dataclass
class Resumed:
    """What --resume takes from the interrupted run: the keys of its rows with their verdicts, what it recorded
    writing, the output stages it recorded done, and the framework version it ran (checked once the worker has
    loaded the framework)."""

    done: set[tuple[str, str, str, str, str]]
    written: list[str]
    framework_version: str | None
    verdicts: dict[tuple[str, str, str, str, str], str] = field(default_factory=dict)
    stages: list[str] = field(default_factory=list)
    finished: bool = False  # the run ended after a whole case (complete, or stopped): its last case is whole

    def check_version(self, out: Path, framework: str, version: str) -> None:
        """Refuse to add rows of framework `version` to those of another version."""
        if self.framework_version not in (None, str(version)):
            raise ResultsError(f"this directory holds a run of {framework} {self.framework_version}, not of "
                               f"{version}: rows of two versions would be mixed", file=str(out),
                               where="--resume", fix="resume with the framework version of that run, or start "
                                                     "again with --force or another --out")

    def counts(self) -> dict[str, int]:
        """The rows kept, by verdict: run.json counts them with those the resumed run writes."""
        counted: dict[str, int] = {}
        for call in self.done:
            counted[self.verdicts[call]] = counted.get(self.verdicts[call], 0) + 1
        return counted


def read_resumed(out: Path, spec: Spec, framework: str, run_info: dict, profiles: str,
                 profiles_dir: Path | None = None) -> Resumed:
    """Keys of the rows an interrupted run already wrote. Reads only: refuses a directory made with another
    framework, spec, profile set or selection of cases or calls (SELECTION_OPTIONS)."""
    manifest = read_manifest(out) if (out / MANIFEST_FILE).is_file() else {}
    written = [w for w in manifest.get("written", []) if isinstance(w, str)] if manifest else []
    version = manifest.get("framework_version")
    stages = manifest.get("stages") if isinstance(manifest.get("stages"), list) else []  # older: redo every stage
    has_rows = (out / RESULTS_FILE).is_file()
    if not has_rows and not manifest:
        return Resumed(set(), written, None)
    if not manifest:
        raise ResultsError("results without a run.json: how they were made is unknown", file=str(out),
                           where="--resume", fix="start again with --force or another --out")
    if manifest.get("framework") != framework:
        raise ResultsError(f"this directory holds a run of {manifest.get('framework')!r}, not {framework!r}",
                           file=str(out), where="--resume", fix="resume with the same --framework, or use another --out")
    redo = "start the run again with --force instead of --resume (or resume with the spec it used, --spec)"
    if manifest.get("spec_hash") != spec.hash:
        raise other_spec(manifest.get("spec_hash"), spec.hash, str(out / MANIFEST_FILE), "--resume", redo)
    if manifest.get("profiles_digest") != profiles:
        raise ResultsError(f"this directory was run with another set of deviation profiles than those in "
                           f"{profiles_dir or default_profiles_dir()} (or another --like): its documented flags "
                           f"would differ", file=str(out), where="--resume, --profiles",
                           fix="resume with the --profiles directory (and contents) of that run, or start again "
                               "with --force or another --out")
    problem = _changed_selection(manifest, run_info)
    if problem is not None:
        option, text = problem
        raise ResultsError(text, file=str(out), where="--resume",
                           fix=f"resume with the {option} of that run, or start again with --force or another --out")
    if not has_rows:  # stopped after its run.json, before its first row: nothing to keep
        return Resumed(set(), written, None if version is None else str(version))
    verdicts = {}
    for row in iter_results(out, complete_lines_only=True):
        if row.spec_hash != spec.hash:
            raise other_spec(row.spec_hash, spec.hash, str(out / RESULTS_FILE), f"--resume, case {row.case_id!r}",
                             redo)
        verdicts[row.call] = row.verdict.value
    return Resumed(set(verdicts), written, None if version is None else str(version), verdicts,
                   [s for s in stages if s in STAGES], manifest.get("status") in ("complete", "stopped"))


def _changed_selection(manifest: dict, run_info: dict) -> tuple[str, str] | None:
    """The first selection field (SELECTION_OPTIONS) a resumed command changes, as (option, the problem's text);
    a file recorded by digest is named by its path."""
    selection = run_info.get("selection")
    if selection is None:
        return None
    before = manifest.get("selection") or {}
    for name, option in SELECTION_OPTIONS.items():
        if name in _SINCE_0144 and name not in before:
            continue  # a run of 0.14.3 or before did not record it
        was, now = before.get(name, _NOT_RECORDED.get(name)), selection.get(name)
        if name in _UNORDERED and isinstance(was, list) and isinstance(now, list):
            was, now = sorted(map(str, was)), sorted(map(str, now))
        if was == now:
            continue
        if name in _FILE_FIELDS:
            paths_before, paths_now = manifest.get(_FILE_FIELDS[name]), run_info.get(_FILE_FIELDS[name])
            if paths_before == paths_now and paths_now:
                shown = paths_now
                if isinstance(paths_now, list) and isinstance(was, list) and len(was) == len(now) == len(paths_now):
                    shown = next(str(path) for path, a, b in zip(paths_now, was, now) if a != b)
                return option, f"this directory was run with {option} {shown} as it was then: the file has changed"
            return option, (f"this directory was run with {option} {_shown(paths_before)}, not "
                            f"{_shown(paths_now)}")
        return option, f"this directory was run with {option} {_shown(was)}, not {_shown(now)}"
    return None


def _shown(value) -> str:
    return "(none)" if value in (None, [], "") else repr(value)


def drop_unfinished_cases(out: Path, done: set[tuple[str, str, str, str, str]], finished: bool) -> None:
    """Remove from the rows, and from `done`, every row of a case the interrupted run may not have written whole,
    so that the resumed run judges it again whole, in its place: a resumed run appends what it writes, and must end
    as an uninterrupted run would, rows in the same order.

    A run writes a case's rows and their detail lines, then flushes both files, before the next case's; so only
    the last case a run wrote can be short of rows, unless the run `finished` (complete, or stopped after a whole
    case), and a divergent row whose detail line was cut off (a full disk, a kill between the two files' writes)
    leaves its case short too."""
    if not (out / RESULTS_FILE).is_file():  # stopped before its first row
        return
    have = {_detail_call(d) for d in iter_details(out)}
    redo, last = set(), None
    for row in iter_results(out):
        last = row.case_id
        if row.verdict.is_divergence and row.call not in have:
            redo.add(row.case_id)
    if last is not None and not finished:
        redo.add(last)
    if not redo:
        return
    path = out / RESULTS_FILE
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if _row_key(line)[0] not in redo]
    write_lines_atomic(path, kept)
    done -= {call for call in done if call[0] in redo}


def _row_key(line: str) -> tuple[str, str, str, str, str]:
    return _detail_call(json.loads(line))


def _detail_call(d: dict) -> tuple[str, str, str, str, str]:
    """A row's or a detail's (case id, api, device, mode, part), as `Result.call`."""
    return (d["case_id"], d["api"], d["device"], d["mode"], d["part"])


def drop_orphan_details(out: Path, done: set[tuple[str, str, str, str, str]]) -> None:
    """A resumed run writes the details of every row it writes: a detail line whose row was cut off (a kill
    or a full disk between the two writes) would be a second copy of the one written again."""
    path = out / DETAILS_FILE
    if not path.is_file():
        return
    if all(_detail_call(d) in done for d in iter_details(out)):
        return
    write_lines_atomic(path, (json.dumps(d) + "\n" for d in iter_details(out) if _detail_call(d) in done))
