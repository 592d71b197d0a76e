"""The checked command-line arguments as the layers below take them: the case selection, the cache directory,
the gates asked for, and the inputs that --force must never remove. Shared by `run`, `report` and `selftest`."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.core.errors import ResultsError, UsageError
from conformance.core.model import Spec
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import other_spec
from conformance.judge.known import KnownFindings, load_known
from conformance.judge.refcache import default_cache_dir
from conformance.report.gate import Gates
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, CaseSelection

REBASELINE = ("re-baseline: run the accepted build again with this harness "
              "(kl-conformance run ... --force --out BASELINE)")


def case_selection(args: argparse.Namespace) -> CaseSelection:
    """The selection options of `run`, `cases` and `selftest` as a CaseSelection."""
    return CaseSelection(seed=args.seed, suite=args.suite, samples=args.samples, case_files=tuple(args.cases),
                         only=tuple(args.only), shard=args.shard,
                         memory_budget_mb=getattr(args, "memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB),
                         reduction=tuple(args.reduction), log_target=tuple(args.log_target), dtype=tuple(args.dtype),
                         family=tuple(args.family))


def cache_dir_of(args: argparse.Namespace) -> Path | None:
    """The reference cache's directory (also where a framework keeps its compiled kernels); None with --no-cache."""
    return None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def check_gate_options(spec: Spec, args: argparse.Namespace, seed: int | None = None) -> KnownFindings | None:
    """--baseline, --fail-on-new and --known, checked before anything is written; returns the known findings."""
    if args.fail_on_new and args.baseline is None:
        raise UsageError("--fail-on-new needs --baseline DIR", where="--fail-on-new",
                         fix="pass the accepted run's directory with --baseline")
    if args.baseline is not None:
        baseline = Path(args.baseline)
        if not (baseline / RESULTS_FILE).is_file():
            raise UsageError("no results.jsonl in the baseline directory", file=args.baseline, where="--baseline",
                             fix="pass the --out directory of an earlier run")
        if baseline.resolve() == Path(args.out).resolve():
            raise UsageError("the baseline is the output directory, which this command rewrites",
                             file=args.baseline, where="--baseline",
                             fix="copy the accepted run elsewhere and pass that copy with --baseline")
        if seed is not None:
            check_baseline_draw(baseline, spec.hash, seed)
    return load_known(args.known) if args.known else None


def check_baseline_draw(baseline: Path, spec_hash: str, seed: int) -> None:
    """A baseline of another spec or another --seed would compare other cases under the same ids."""
    for row in iter_results(baseline):
        if row.spec_hash != spec_hash:
            raise other_spec(row.spec_hash, spec_hash, str(baseline), "--baseline", REBASELINE)
        if row.source == "generated" and row.seed != seed:
            raise ResultsError(f"the baseline drew its cases with --seed {row.seed}, this run with --seed {seed}",
                               file=str(baseline), where="--baseline",
                               fix=f"run with --seed {row.seed}, or take a baseline made with --seed {seed}")


def gates_of(args: argparse.Namespace) -> Gates:
    return Gates(strict=args.strict, fail_on_new=args.fail_on_new, known=args.known is not None)


def inputs_of(args: argparse.Namespace, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """The command's input files and directories, as (option, path): --force must not remove one."""
    given = [("--cases", path) for path in getattr(args, "cases", [])] + list(more)
    given += [("--known", args.known), ("--baseline", args.baseline), ("--spec", args.spec),
              ("--profiles", getattr(args, "profiles", None))]
    return tuple((option, path) for option, path in given if path)
