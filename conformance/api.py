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
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

import numpy as np

from conformance.adapters.base import Adapter
from conformance.adapters.registry import get_adapter, is_known, known_adapters
from conformance.arguments import check_gate_options
from conformance.cases.generate import DEFAULT_SEED
from conformance.core.errors import ConformanceError, UsageError
from conformance.core.model import Case, Expected, Judgement, Observation, Result, Spec, Verdict
from conformance.core.results import iter_results, read_manifest
from conformance.core.rundirs import iter_rows, load_manifests
from conformance.core.specload import load_spec
from conformance.judge.casejudge import CaseJudge
from conformance.judge.known import KnownFindings, load_known
from conformance.judge.refcache import default_cache_dir
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, Decision, Gates
from conformance.report.provenance import check_runs
from conformance.report.writer import ReportFeed
from conformance.run.runner import DEFAULT_TIMEOUT_S, RunOptions, run_conformance
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
    run or the run stopped early (None when it ran to its end), and the directory the rows are in (None when
    `run` was given no `out`: its temporary directory is gone)."""

    rows: list[Result]
    manifest: dict[str, Any]
    out_dir: Path | None = None
    not_run: str | None = None
    stopped: str | None = None
    counts: dict[str, int] = field(default_factory=dict)  # verdict -> results

    @property
    def divergences(self) -> list[Result]:
        return [r for r in self.rows if r.verdict.is_divergence]

    @property
    def undocumented(self) -> list[Result]:
        """The divergences no profile documents and no known-findings entry accepts (what --strict fails on)."""
        return [r for r in self.rows if r.verdict.is_divergence and not r.is_accepted]


def framework_name(framework: FrameworkLike) -> str:
    """The name a run knows an adapter by: a registered name as given, an adapter class or instance as
    "package.module:Class". The run builds its own instance in the worker process, so the class must be
    importable by that path and take no arguments."""
    if isinstance(framework, str):
        if not is_known(framework):
            raise UsageError(f"unknown framework {framework!r}", where="framework",
                             fix=f"use one of {sorted(known_adapters())}, or package.module:AdapterClass")
        return framework
    cls = framework if isinstance(framework, type) else type(framework)
    if not issubclass(cls, Adapter):
        raise UsageError(f"{cls.__qualname__} is not an Adapter", where="framework",
                         fix="pass a framework name, or a subclass of conformance.adapters.base.Adapter")
    if cls.__module__ == "__main__" or "<" in cls.__qualname__ or "." in cls.__qualname__:
        raise UsageError(f"the adapter class {cls.__qualname__} cannot be imported by the worker process",
                         where="framework", fix="define the adapter at the top level of an importable module")
    return f"{cls.__module__}:{cls.__qualname__}"


def cases(selection: CaseSelection | None = None, *, spec: Spec | None = None) -> list[Case]:
    """The cases a run of `selection` would judge, in its order (as `kl-conformance cases` lists them)."""
    return list(select_cases(spec or load_spec(), selection or CaseSelection()))


def case(case_id: str, *, seed: int = DEFAULT_SEED, case_files: Sequence[str] = (), spec: Spec | None = None) -> Case:
    """One case by its id: a generated id (drawn with `seed`), or an id of one of `case_files`."""
    found = cases(CaseSelection(seed=seed, only=(case_id,), case_files=tuple(case_files)), spec=spec)
    if len(found) != 1:
        raise UsageError(f"no case has the id {case_id!r}", where="case",
                         fix="copy the id from a report or `kl-conformance cases`")
    return found[0]


def run(framework: FrameworkLike, *, selection: CaseSelection | None = None, out: str | Path | None = None,
        apis: Sequence[str] = (), devices: Sequence[str] = (), parts: Sequence[str] = (), modes: Sequence[str] = (),
        known: str | Path | KnownFindings | None = None, profiles: str | Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, cache: bool = True, cache_dir: str | Path | None = None,
        force: bool = False, spec: Spec | None = None) -> RunOutcome:
    """Run the selected cases through a framework and return the judged rows, as `kl-conformance run` does.

    The framework runs in the harness's worker process (a crash or a hang costs one case). With `out`, the
    rows are kept there (results.jsonl, details.jsonl, run.json; no report: `kl-conformance report OUT`
    writes one); without, in a temporary directory removed before returning. `known` marks the divergences a
    known-findings file accepts. `modes` are the modes the calls are made in (default eager; each row carries
    its mode; a mode that cannot run here is not run, and the manifest's `modes_not_run` says why). Raises
    ConformanceError (a UsageError, ...) for bad input, before anything
    is written; a framework that cannot load is no exception: `not_run` says why.
    """
    spec = spec or load_spec()
    name = framework_name(framework)
    selection = selection or CaseSelection()
    if isinstance(known, (str, Path)):
        known = load_known(known)
    chosen = list(select_cases(spec, selection))
    if not chosen:
        raise UsageError("no case matches the selection", where="selection",
                         fix="check the ids with `kl-conformance cases`")
    record = selection_record(selection, known, parts, apis, devices, get_adapter(name).name, modes)
    run_info = {key: record[key] for key in ("seed", "suite", "samples", "only", "shard")}
    run_info.update(case_files=list(selection.case_files), known=known.source if known else None,
                    selection=record, command=f"conformance.api.run({name!r})")
    where = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="kl-conformance-")) / "run"
    options = RunOptions(apis=tuple(apis), devices=tuple(devices), modes=tuple(modes), parts=tuple(parts),
                         timeout_s=timeout_s,
                         memory_budget_mb=selection.memory_budget_mb, force=force, known=known,
                         profiles_dir=Path(profiles) if profiles else None,
                         cache_dir=None if not cache else Path(cache_dir) if cache_dir else default_cache_dir())
    try:
        summary = run_conformance(spec, name, chosen, where, options, run_info=run_info)
        rows = list(iter_results(where)) if (where / "results.jsonl").is_file() else []
        manifest = read_manifest(where)
    finally:
        if out is None:
            shutil.rmtree(where.parent, ignore_errors=True)
    return RunOutcome(rows, manifest, where if out is not None else None, summary.not_run, summary.stopped,
                      dict(summary.counts))


def expected(case: Case, part: str = "forward", *, dialect: str = "canonical", spec: Spec | None = None) -> Expected:
    """What the spec predicts for one part of a case: a value with its error bound, or an error."""
    spec = spec or load_spec()
    return CaseJudge(case, spec).expected(spec, part, dialect)


def judge(case: Case, observed: Any, part: str = "forward", *, dialect: str = "canonical",
          dtype: str | None = None, warnings: Sequence[str] = (), spec: Spec | None = None) -> Judgement:
    """Judge one observation of `case` against the spec, as a run judges it: the verdict, its message, the
    worst error against its bound, and for a divergence its cause (the spec alternative it behaves as, a
    fault pattern, or "unexplained").

    `observed` is what the framework gave: an array (NumPy or anything np.asarray takes; its dtype is the
    result's dtype unless `dtype` names it, e.g. "bfloat16" for values converted to float32), an exception
    it raised, or an Observation. `dialect` is the API's dialect in the spec (dialects:), canonical for
    torch's convention. Profiles and known findings are not applied here: a run applies them.
    """
    spec = spec or load_spec()
    return CaseJudge(case, spec).judgement(part, dialect, _observation(observed, dtype, tuple(warnings)))


def _observation(observed: Any, dtype: str | None, warnings: tuple[str, ...]) -> Observation:
    if isinstance(observed, Observation):
        return observed
    if isinstance(observed, BaseException):
        return Observation(exception_type=type(observed).__name__, exception_message=str(observed),
                           warnings=warnings)
    array = np.asarray(observed)
    return Observation(value=np.asarray(array, dtype=np.float64), dtype=dtype or str(array.dtype),
                       shape=tuple(array.shape), warnings=warnings)


def gate(runs: RunLike | Iterable[RunLike], *, strict: bool = False, fail_on_new: bool = False,
         baseline: str | Path | None = None, known: str | Path | KnownFindings | None = None,
         spec: Spec | None = None) -> Decision:
    """The exit decision the CLI takes for these runs under these gates (`run` or `report` with --strict,
    --fail-on-new, --baseline, --known): `code` (EXIT_OK, EXIT_GATE, EXIT_INCOMPLETE), the `lines` that say
    why a gate failed, and the `notes` that inform without failing. `runs` are RunOutcomes or run (or
    merged) directories. Writes nothing."""
    spec = spec or load_spec()
    given = [runs] if isinstance(runs, (RunOutcome, str, Path)) else list(runs)
    dirs = [Path(r) for r in given if not isinstance(r, RunOutcome)]
    scratch = Path(tempfile.mkdtemp(prefix="kl-conformance-gate-"))
    try:
        if isinstance(known, KnownFindings):
            check_gate_options(spec, _gate_args(fail_on_new, baseline, None, dirs, scratch))
        else:
            known = check_gate_options(spec, _gate_args(fail_on_new, baseline, known, dirs, scratch))
        if dirs:
            check_runs(dirs, spec.hash, baseline=baseline)
        present, manifests = load_manifests(dirs) if dirs else ([], [])
        outcomes = [r for r in given if isinstance(r, RunOutcome)]
        manifests = [o.manifest for o in outcomes] + list(manifests)
        feed = ReportFeed(scratch, known, baseline, Gates(strict, fail_on_new, known is not None))
        for row in _chained([o.rows for o in outcomes] + [iter_rows(present)]):
            feed.add(known.mark(row) if known is not None else row)
        _, _, decision = feed.finish(manifests)
        return decision
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _gate_args(fail_on_new: bool, baseline, known, dirs: list[Path], scratch: Path) -> argparse.Namespace:
    """The gate options as the CLI's checks read them; the output a baseline must not be is the gated run."""
    return argparse.Namespace(fail_on_new=fail_on_new, baseline=None if baseline is None else str(baseline),
                              known=None if known is None else str(known), out=str(dirs[0] if dirs else scratch))


def _chained(groups):
    for group in groups:
        yield from group
