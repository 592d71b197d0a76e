"""Refuses result sets that would mix, in one read-only pass before a report writes anything.

A merged report counts each row once and reads each case id as one case. That holds only
when every row judges a distinct (case, framework, api, device, mode, part, release), and when one case
id has one content (`case_digest`) in every run and in the baseline: a run given twice, a
merged directory beside one of its own runs, two seeds, or two versions of a user's case
file under one id would otherwise be counted, or compared, as one matrix. The pass also
reads every details.jsonl, so a damaged file stops the report before any file is written.
Memory grows with the number of case ids, not of rows.

Reads rows and manifests; writes nothing, and never imports a framework or the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from conformance.core.details import iter_details
from conformance.core.errors import ResultsError
from conformance.core.model import key_label
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import load_manifests, manifests_of, other_spec
from conformance.core.scope import row_framework
from conformance.report.baselinefile import load_baseline, one_release


def check_runs(run_dirs: Sequence[str | Path], spec_hash: str, allow_missing: bool = False,
               baseline: str | Path | None = None, redo: str = "run them again with this spec",
               rebaseline: str = "run the baseline again with this spec") -> None:
    """Raise ResultsError (one line: file, case, problem, fix) if the runs cannot be merged soundly.

    Raises
    ------
    ResultsError
        for a directory given twice, a row key seen twice, one case id with two case digests
        (in the runs, or between the runs and the baseline), rows (or a baseline) of another spec
        than `spec_hash` (the fix says how to make them again: `redo`, `rebaseline`), or a damaged
        results, details or manifest file.
    """
    resolved = [Path(d).resolve() for d in run_dirs]
    for i, path in enumerate(resolved):
        if path in resolved[:i]:
            raise ResultsError("this run directory is given twice", file=str(run_dirs[i]),
                               fix="pass each run directory once")
    present, _ = load_manifests(run_dirs, allow_missing)
    one_profile_set(manifests_of(present))
    first_digest: dict[str, tuple[str, Path]] = {}
    seen_targets: dict[str, int] = {}  # case id -> bit mask over `targets`
    first_release: dict[str, str] = {}  # framework -> the release of its first row
    # (framework, api, device, mode, part, release): two releases of one call are two results, one release twice
    # the same result
    targets: dict[tuple[str, str, str, str, str, str], int] = {}
    for run_dir in present:
        results = run_dir / RESULTS_FILE
        for row in iter_results(run_dir):
            where = f"case {row.case_id!r}, {key_label(row.key)}, release {row.framework_version}"
            if row.spec_hash != spec_hash:
                raise other_spec(row.spec_hash, spec_hash, str(results), where, redo)
            digest, origin = first_digest.setdefault(row.case_id, (row.case_digest, results))
            if digest != row.case_digest:
                raise ResultsError(f"this case holds other values than in {origin} (case digest {row.case_digest} "
                                   f"against {digest}): the runs drew it with another --seed, or from another "
                                   f"version of its case file", file=str(results), where=where,
                                   fix="merge runs made with the same --seed and case files (rerun the odd one), "
                                       "or give an edited user case a new id")
            bit = 1 << targets.setdefault((*row.key[1:], row.framework_version), len(targets))
            mask = seen_targets.get(row.case_id, 0)
            if mask & bit:
                raise ResultsError("the same result appears twice: a run given twice (under two paths), or a "
                                   "merged directory given together with one of its runs",
                                   file=str(results), where=where, fix="pass each run once")
            seen_targets[row.case_id] = mask | bit
            if baseline is not None:
                one_release(row, first_release, str(results), "--baseline",
                             "compare each release with the baseline in a report of its own (one release per "
                             "framework), or merge the releases without --baseline")
        for _ in iter_details(run_dir):
            pass
    if baseline is not None:
        _check_baseline(Path(baseline), first_digest, spec_hash, rebaseline)


def one_profile_set(runs: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """The runs of one framework release, each (where it is, its run.json), were judged with the same deviation
    profiles the user gave (run.json's `profiles`, the --profiles DIR, and `like`), or with two that hold the same
    (its profiles_digest): a merge of two would mark a behaviour documented in one run and not in the other, and print
    every row's reproduce command with one run's. Runs of two checkouts whose shipped profiles differ are merged."""
    first: dict[tuple[str, str], tuple[tuple[Any, Any], Any, str]] = {}
    for where, manifest in runs:
        if not isinstance(manifest, dict) or manifest.get("status") == "not_run":  # no row judged
            continue
        release = (row_framework(manifest), str(manifest.get("framework_version")))
        given = (manifest.get("profiles"), manifest.get("like"))
        seen, digest, origin = first.setdefault(release, (given, manifest.get("profiles_digest"), where))
        if given != seen and not (isinstance(digest, str) and digest == manifest.get("profiles_digest")):
            said = lambda g: f"--profiles {g[0] or '(shipped)'}" + (f" --like {g[1]}" if g[1] else "")  # noqa: E731
            raise ResultsError(f"{release[0]} {release[1]} was judged here with {said(given)}, in {origin} with "
                               f"{said(seen)}: a behaviour documented in one run would not be in the other",
                               file=where, where="profiles and like",
                               fix="run both with the same --profiles and --like, or report them apart")


def _check_baseline(baseline: Path, first_digest: dict[str, tuple[str, Path]], spec_hash: str,
                    rebaseline: str) -> None:
    """The baseline (a run's directory or its compact file) must be readable, of the same spec, and hold the
    same content under each shared id."""
    held = load_baseline(baseline)
    for found in sorted(held.spec_hashes):
        if found != spec_hash:
            raise other_spec(found, spec_hash, str(baseline), "--baseline", rebaseline)
    for case_id, digest in held.digests.items():
        mine = first_digest.get(case_id)
        if mine is not None and mine[0] != digest:
            raise ResultsError(f"the baseline holds other values for this case than {mine[1]} (case digest "
                               f"{digest} against {mine[0]}): another --seed or another version of its "
                               "case file", file=held.shown, where=f"case {case_id!r}",
                               fix="compare runs made with the same --seed and case files")

