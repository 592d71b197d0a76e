"""The public Python API of kl-conformance: run a suite, judge one observation, apply the CLI's gates.

Everything this module exports (``__all__``) is public and changes only with a release note; every other
module of the package is private and may change at any time. The functions here are thin: they call the
same runner, judge and gates as the command line, so a result here is the result `kl-conformance` gives.

    import conformance.api as kl

    outcome = kl.run("torch", selection=kl.Selection(reduction=("batchmean",)))
    for row in outcome.rows:              # typed rows: kl.Result, one per (case, api, device, mode, part)
        print(row.case_id, row.api, row.part, row.verdict.value, row.cause)
    decision = kl.gate(outcome, strict=True)   # what `run --strict` would exit with
    print(decision.code, decision.lines)

    case = kl.case("fwd/sum/log_target=0/4x6/float32/softmax/s0")
    judged = kl.judge(case, my_framework_result)   # an array, an exception, or an Observation
    print(judged.verdict.value, judged.cause)

Never imports a framework: a run calls the framework in the harness's worker process, as the CLI does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

from conformance.adapters.base import Adapter
from conformance.adapters.registry import get_adapter, is_known, unknown_framework
from conformance.apiargs import (RUNS_FIX, flags, given_spec, in_api_words, known_findings, listed, observation_of,
                                 path_or_none)
from conformance.arguments import check_gate_options, like_marks, resolved_or_none
from conformance.cases.generate import DEFAULT_SEED
from conformance.core.case import Case
from conformance.core.errors import ConformanceError, ResultsError, UsageError
from conformance.core.manifest import check_manifest, read_manifest
from conformance.core.model import Expected, Judgement, Observation, Result, Spec, Verdict, key_label
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.runfile import is_present
from conformance.core.rundirs import iter_rows, load_manifests, manifests_of
from conformance.core.scratch import make_scratch
from conformance.core.specload import load_spec as _load_spec
from conformance.judge.casejudge import CaseJudge
from conformance.core.known import KnownFindings
from conformance.judge.refcache import default_cache_dir
from conformance.options import API, OPTIONS, check_selection
from conformance.reference.forward import takes_input_space
from conformance.report.gate import (EXIT_GATE, EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, LISTED_IN_BASELINE_JSON,
                                     Decision, Gates)
from conformance.report.like import LikeMarks
from conformance.report.provenance import check_runs, one_profile_set
from conformance.report.writer import ReportFeed
from conformance.run.context import DEFAULT_TIMEOUT_S
from conformance.run.jobs import default_jobs
from conformance.run.runner import RunOptions, run_conformance
from conformance.run.selection import CaseSelection, select_cases
from conformance.runcommand import selection_record

__all__ = [
    "Selection", "CaseSelection", "RunOutcome", "Result", "Verdict", "Case", "Observation", "Judgement", "Expected",
    "Decision", "Spec", "ConformanceError", "EXIT_OK", "EXIT_GATE", "EXIT_USAGE", "EXIT_INCOMPLETE",
    "load_spec", "cases", "case", "framework_name", "run", "expected", "judge", "gate",
]

Selection = CaseSelection  # which cases: seed, suite, samples, case_files, only, shard, reduction, log_target, ...
FrameworkLike = Union[str, Adapter, type]
RunLike = Union["RunOutcome", str, Path]


@dataclass
class RunOutcome:
    """What `run` gives back: the judged rows, the run's record (run.json's content), why the framework did not
    run or the run stopped early (None when it ran to its end), the directory the rows are in (None when
    `run` was given no `out`: its temporary directory is gone), and the recorded run its rows' `like` marks were
    made against (`like_run`; None without one)."""

    rows: list[Result]
    manifest: dict[str, Any]
    out_dir: Path | None = None
    not_run: str | None = None
    stopped: str | None = None
    counts: dict[str, int] = field(default_factory=dict)  # verdict -> results
    like_run: Path | None = None

    @property
    def divergences(self) -> list[Result]:
        return [r for r in self.rows if r.verdict.is_divergence]

    @property
    def undocumented(self) -> list[Result]:
        """The divergences no profile documents and no known-findings entry accepts (what --strict fails on)."""
        return [r for r in self.rows if r.verdict.is_divergence and not r.is_accepted]


@in_api_words
def load_spec(path: str | Path | None = None) -> Spec:
    """The spec at `path`, read and checked as --spec reads it; the spec the harness ships without one."""
    path_or_none(path, "path")
    return _load_spec(path)


@in_api_words
def framework_name(framework: FrameworkLike) -> str:
    """The name a run knows an adapter by: a registered name as given, an adapter class or instance as
    "package.module:Class". The run builds its own instance in the worker process, so the class must be
    importable by that path and take no arguments."""
    if isinstance(framework, str):
        if not is_known(framework):
            raise unknown_framework(framework, where="framework")
        return framework
    cls = framework if isinstance(framework, type) else type(framework)
    if not issubclass(cls, Adapter):
        raise UsageError(f"{cls.__qualname__} is not an Adapter", where="framework",
                         fix="pass a framework name, or a subclass of conformance.adapters.base.Adapter")
    if cls.__module__ == "__main__" or "<" in cls.__qualname__ or "." in cls.__qualname__:
        raise UsageError(f"the adapter class {cls.__qualname__} cannot be imported by the worker process",
                         where="framework", fix="define the adapter at the top level of an importable module")
    return f"{cls.__module__}:{cls.__qualname__}"


@in_api_words
def cases(selection: CaseSelection | None = None, *, spec: Spec | None = None) -> list[Case]:
    """The cases a run of `selection` would judge, in its order (as `kl-conformance cases` lists them)."""
    return list(select_cases(given_spec(spec), check_selection(CaseSelection() if selection is None else selection)))


@in_api_words
def case(case_id: str, *, seed: int = DEFAULT_SEED, case_files: Sequence[str] = (), spec: Spec | None = None) -> Case:
    """One case by its id: a generated id (drawn with `seed`), or an id of one of `case_files`."""
    if not isinstance(case_id, str):
        raise UsageError(f"expected a case id (text), got {case_id!r}", where="case_id",
                         fix="copy the id from a report or `kl-conformance cases`")
    seed = OPTIONS["seed"].check(seed, API)
    files = OPTIONS["cases"].check_each(case_files, API)
    try:
        found = list(select_cases(given_spec(spec), CaseSelection(seed=seed, only=(case_id,), case_files=files)))
    except UsageError as exc:
        if exc.where == "--only":  # the id given, checked as --only checks it
            exc.where = "case_id"
        raise
    if len(found) != 1:
        raise UsageError(f"no case has the id {case_id!r}", where="case",
                         fix="copy the id from a report or `kl-conformance cases`")
    return found[0]


@in_api_words
def run(framework: FrameworkLike, *, selection: CaseSelection | None = None, out: str | Path | None = None,
        apis: Sequence[str] = (), devices: Sequence[str] = (), parts: Sequence[str] = (), modes: Sequence[str] = (),
        known: str | Path | KnownFindings | None = None, profiles: str | Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, cache: bool = True, cache_dir: str | Path | None = None,
        force: bool = False, like: str | None = None, like_run: str | Path | None = None,
        spec: Spec | None = None, jobs: int | None = None) -> RunOutcome:
    """Run the selected cases through a framework and return the judged rows, as `kl-conformance run` does.

    The framework runs in the harness's worker process (a crash or a hang costs one case). With `out`, the
    rows are kept there (results.jsonl, details.jsonl, run.json; no report: `kl-conformance report OUT`
    writes one); without, in a temporary directory removed before returning. `known` marks the divergences a
    known-findings file accepts. `modes` are the modes the calls are made in (default eager; each row carries
    its mode; a mode that cannot run here is not run, and the manifest's `modes_not_run` says why). `like` judges a
    port as `--like` does (the framework's documented deviations apply), and with `like_run`, a recorded run of
    that framework, each divergent row carries `like`: "shared" or "own" (`--like-run`). `jobs` worker processes
    share the cases (default: the cores this process may use), with the rows of one. Raises
    ConformanceError (a UsageError, ...) for bad input, before anything
    is written; a framework that cannot load is no exception: `not_run` says why.
    """
    spec = given_spec(spec)
    name = framework_name(framework)
    selection = check_selection(CaseSelection() if selection is None else selection)
    timeout_s = OPTIONS["timeout_s"].check(timeout_s, API)
    jobs = None if jobs is None else OPTIONS["jobs"].check(jobs, API)
    apis, devices, parts, modes = (OPTIONS[option].check_each(given, API) for option, given in
                                   (("api", apis), ("device", devices), ("part", parts), ("mode", modes)))
    flags(cache=cache, force=force)
    known = known_findings(known)
    for keyword, path in (("out", out), ("profiles", profiles), ("cache_dir", cache_dir), ("like_run", like_run)):
        path_or_none(path, keyword)
    port = get_adapter(name)
    where = Path(out) if out is not None else None
    marks = _like_marks(spec, like, like_run, where, profiles=profiles,
                        mirrors={port.name: port.mirrored()} if like is not None else None)
    chosen = list(select_cases(spec, selection))
    if not chosen:
        raise UsageError("no case matches the selection", where="selection",
                         fix="check the ids with `kl-conformance cases`")
    record = selection_record(selection, known, parts, apis, devices, get_adapter(name).name, modes, timeout_s)
    run_info = {key: record[key] for key in ("seed", "suite", "samples", "only", "shard")}
    run_info.update(case_files=list(selection.case_files), known=known.source if known else None,
                    selection=record, command=f"conformance.api.run({name!r})",
                    **({"mirrors": port.mirrored()} if like is not None else {}))
    where = where or Path(tempfile.mkdtemp(prefix="kl-conformance-")) / "run"
    options = RunOptions(apis=apis, devices=devices, modes=modes, parts=parts, timeout_s=timeout_s,
                         memory_budget_mb=selection.memory_budget_mb, budget_option=OPTIONS["memory_budget_mb"].where(API),
                         force=force, known=known,
                         profiles_dir=Path(profiles) if profiles else None, like=like,
                         cache_dir=None if not cache else Path(cache_dir) if cache_dir else default_cache_dir(),
                         jobs=default_jobs(modes, len(chosen)) if jobs is None else min(jobs, len(chosen)))
    try:
        summary = run_conformance(spec, name, chosen, where, options, run_info=run_info)
        if marks is not None:
            marks.write_marks(where)
        rows = list(iter_results(where)) if (where / "results.jsonl").is_file() else []
        manifest = read_manifest(where)
    finally:
        if out is None:
            shutil.rmtree(where.parent, ignore_errors=True)
    return RunOutcome(rows, manifest, where if out is not None else None, summary.not_run, summary.stopped,
                      dict(summary.counts), Path(like_run) if like_run is not None else None)


@in_api_words
def expected(case: Case, part: str = "forward", *, dialect: str = "canonical", spec: Spec | None = None) -> Expected:
    """What the spec predicts for one part of a case: a value with its error bound, or an error."""
    spec = given_spec(spec)
    _check_call(case, part, dialect, spec)
    return CaseJudge(case, spec).expected(spec, part, dialect)


@in_api_words
def judge(case: Case, observed: Any, part: str = "forward", *, dialect: str = "canonical",
          dtype: str | None = None, warnings: Sequence[str] = (), spec: Spec | None = None) -> Judgement:
    """Judge one observation of `case` against the spec, as a run judges it: the verdict, its message, the
    worst error against its bound, and for a divergence its cause (the spec alternative it behaves as, a
    fault pattern, or "unexplained").

    `observed` is what the framework gave: an array (NumPy or anything np.asarray takes; its dtype is the
    result's dtype unless `dtype` names it, e.g. "bfloat16" for values converted to float32), an exception
    it raised, or an Observation. `dialect` is the API's dialect in the spec (dialects:), canonical for
    torch's convention. Profiles and known findings are not applied here: a run applies them. An unexplained
    divergence's message says, as a run's does, which spec alternatives its answer lies within rounding of.
    """
    spec = given_spec(spec)
    _check_call(case, part, dialect, spec)
    if dtype is not None and not isinstance(dtype, str):
        raise UsageError(f"expected a dtype's name, got {dtype!r}", where="dtype", fix="write it as text, e.g. "
                         "dtype='bfloat16', or leave it out to take the array's own")
    if not isinstance(warnings, (list, tuple)) or not all(isinstance(w, str) for w in warnings):
        raise UsageError(f"expected a list of warning messages, got {warnings!r}", where="warnings",
                         fix="pass a list of the messages the call warned with, e.g. warnings=['...']")
    judge, observation = CaseJudge(case, spec), observation_of(observed, dtype, tuple(warnings), spec)
    judgement = judge.judgement(part, dialect, observation)
    return judge.with_within(judgement, None, "", part, dialect, observation)


def _check_call(case: Any, part: Any, dialect: Any, spec: Spec) -> None:
    """The case, part and dialect of `expected` and `judge`, refused in one line where the spec has no such."""
    if not isinstance(case, Case):
        raise UsageError(f"expected a Case, got {type(case).__name__}", where="case",
                         fix="make it with conformance.api.case(case_id)")
    OPTIONS["part"].check(part, API, where="part")
    dialects = list(spec.data["dialects"])
    if dialect not in dialects:
        raise UsageError(f"unknown dialect {dialect!r}", where="dialect", fix=f"use one of {dialects}")
    if not takes_input_space(case, dialect, spec):  # no API of the dialect can be called with it: a run has no row
        given = "probabilities" if case.params.prob_input else "log-probabilities"
        takers = [d for d in dialects if takes_input_space(case, d, spec)]
        raise UsageError(f"case {case.id!r} gives {given} as input, which dialect {dialect!r} does not take",
                         where="dialect", fix=f"judge it in a dialect that takes them ({', '.join(takers)}), or pick "
                         "a case of the dialect's input space")


@in_api_words
def gate(runs: RunLike | Iterable[RunLike], *, strict: bool = False, fail_on_new: bool = False,
         baseline: str | Path | None = None, known: str | Path | KnownFindings | None = None,
         like: str | None = None, like_run: str | Path | None = None, fail_on_own: bool = False,
         spec: Spec | None = None) -> Decision:
    """The exit decision the CLI takes for these runs under these gates (`run` or `report` with --strict,
    --fail-on-new, --baseline, --known, --like, --like-run, --fail-on-own): `code` (EXIT_OK, EXIT_GATE,
    EXIT_INCOMPLETE), the `lines` that say why a gate failed, and the `notes` that inform without failing.
    `runs` are RunOutcomes or run (or merged) directories. Writes nothing."""
    flags(strict=strict, fail_on_new=fail_on_new, fail_on_own=fail_on_own)
    spec = given_spec(spec)
    given = [runs] if isinstance(runs, (RunOutcome, str, Path)) else listed(runs)
    wrong = [r for r in given if not isinstance(r, (RunOutcome, str, Path))]
    if wrong:
        raise UsageError(f"expected RunOutcomes or run directories, got {type(wrong[0]).__name__}", where="runs",
                         fix=RUNS_FIX)
    path_or_none(baseline, "baseline")
    path_or_none(like_run, "like_run")
    dirs = [Path(r) for r in given if not isinstance(r, RunOutcome)]
    scratch = make_scratch("kl-conformance-gate-")
    try:
        check_gate_options(spec, _gate_args(fail_on_new, baseline, None, scratch))
        outcomes = [r for r in given if isinstance(r, RunOutcome)]
        for number, outcome in enumerate(outcomes, start=1):  # one made by hand is read as `run` makes them
            _check_outcome(outcome, f"RunOutcome {number}")
        for run_dir in dirs:  # as load_manifests refuses one, less the CLI's --allow-missing, which gate has not
            if not is_present(run_dir, directory=True) or not is_present(run_dir / RESULTS_FILE):
                raise ResultsError("no results.jsonl here", file=str(run_dir),
                                   fix="pass the directory of a finished run (its out, `kl-conformance run --out`)")
        marks = _like_marks(spec, like, like_run, scratch, runs=dirs, fail_on_own=fail_on_own,  # gate writes nothing
                            manifests=[o.manifest for o in outcomes])
        known = known_findings(known)  # read after the options are checked, as the CLI reads it
        if dirs:
            check_runs(dirs, spec.hash, baseline=baseline)
        present, manifests = load_manifests(dirs) if dirs else ([], [])
        # as `report` refuses runs of one release judged by two profile sets, RunOutcomes among them
        if outcomes:
            one_profile_set([*((f"RunOutcome {i + 1}", o.manifest) for i, o in enumerate(outcomes)),
                             *manifests_of(present)])
        manifests = [o.manifest for o in outcomes] + list(manifests)
        feed = ReportFeed(scratch, known, baseline, Gates(strict, fail_on_new, known is not None, fail_on_own))
        if marks is not None and marks.marking:  # the rows as a run with --like-run writes them: marked
            for row in _chained([o.rows for o in outcomes] + [iter_rows(present)]):
                marks.add(row)
            for gone in outcomes:  # no details to compare again: as its run marked them, against this recorded run
                if gone.out_dir is None and _same_path(gone.like_run, like_run):
                    marks.keep(gone.rows)
            marks.finish([*present, *(o.out_dir for o in outcomes if o.out_dir is not None)])
        seen = set()  # as `report` refuses a run given twice: a RunOutcome twice, or beside its own directory
        for row in _chained([o.rows for o in outcomes] + [iter_rows(present)]):
            if (row.key, row.framework_version) in seen:
                raise ResultsError(f"the same result appears twice (case {row.case_id!r}, {key_label(row.key)}): a "
                                   "run given twice, or a RunOutcome beside its own directory", where="runs",
                                   fix="pass each run once")
            seen.add((row.key, row.framework_version))
            row = marks.mark(row) if marks is not None else row
            feed.add(known.mark(row) if known is not None else row)
        # run directories, or several runs, are gated as `report` gates their merge; one RunOutcome as its `run`
        _, _, decision = feed.finish(manifests, merged=bool(dirs) or len(given) > 1)
        return _written_nowhere(decision)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_outcome(outcome: RunOutcome, shown: str) -> None:
    """A RunOutcome's manifest and rows of the types `run` gives, else one line (a report would crash on them)."""
    fix = "pass the RunOutcome `run` gave back, or its run's directory"
    if not isinstance(outcome.manifest, dict):
        raise UsageError(f"its manifest is a {type(outcome.manifest).__name__}, not run.json's object", where=shown,
                         fix=fix)
    check_manifest(outcome.manifest, shown)
    rows = outcome.rows
    if not isinstance(rows, (list, tuple)):
        raise UsageError(f"its rows are a {type(rows).__name__}, not a list of the Results `run` gives", where=shown,
                         fix=fix)
    wrong = next((r for r in rows if not isinstance(r, Result)), None)
    if wrong is not None:
        raise UsageError(f"its rows hold a {type(wrong).__name__}, not the Results `run` gives", where=shown, fix=fix)


def _like_marks(spec: Spec, like: Any, like_run: Any, out: Path | None, profiles: Any = None, runs: Sequence[Path] = (),
                fail_on_own: bool = False, mirrors: dict | None = None,
                manifests: Sequence[dict] = ()) -> LikeMarks | None:
    """`like` and `like_run` checked as the CLI checks --like and --like-run (before anything is written): the
    marks of a port's divergences, or None without `like`."""
    if like is not None and not isinstance(like, str):
        raise UsageError(f"expected a framework's name, got {like!r}", where="like", fix="pass e.g. like='torch'")
    args = argparse.Namespace(like=like, like_run=None if like_run is None else str(like_run), fail_on_own=fail_on_own,
                              profiles=None if profiles is None else str(profiles),
                              out=str(out) if out is not None else os.devnull)  # no output directory yet
    return like_marks(spec, args, runs=[str(r) for r in runs], mirrors=mirrors, manifests=manifests)


def _same_path(made: Path | None, given: Any) -> bool:
    """Whether the recorded run a RunOutcome's marks were made against is the one given to gate (a path that
    cannot be resolved, a loop, is no match)."""
    if made is None or given is None:
        return False
    resolved = resolved_or_none(made)
    return resolved is not None and resolved == resolved_or_none(given)


def _written_nowhere(decision: Decision) -> Decision:
    """The decision without its pointers to baseline.json: the gates here (and the plugin's) write no report;
    the lines that say what failed a gate are in `details`."""
    lines = [line.replace(LISTED_IN_BASELINE_JSON, "") for line in decision.lines]
    details = {line.replace(LISTED_IN_BASELINE_JSON, ""): more for line, more in decision.details.items()}
    names = {line.replace(LISTED_IN_BASELINE_JSON, ""): name for line, name in decision.names.items()}
    return Decision(decision.code, lines, decision.notes, details, decision.gates, decision.counts, names)


def _gate_args(fail_on_new: bool, baseline, known, scratch: Path) -> argparse.Namespace:
    """The gate options as the CLI's checks read them; gate writes nothing, so its output is its scratch folder
    (a baseline that is one of the gated runs is a merge's, as `report` takes it)."""
    return argparse.Namespace(fail_on_new=fail_on_new, baseline=None if baseline is None else str(baseline),
                              known=None if known is None else str(known), out=str(scratch))


def _chained(groups):
    for group in groups:
        yield from group
