"""The command line: `kl-conformance run | cases | report`; also `python -m conformance`.

Exit codes: 0 done (divergences are findings, not failures); 1 with --strict when
an undocumented divergence was found; 2 bad usage, a bad spec, case file or
results directory (one message naming the file, the place and the fix).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from conformance.adapters.registry import is_known, known_adapters
from conformance.cases.generate import DEFAULT_SEED, build_case, generate_cases
from conformance.cases.ids import parse_id
from conformance.cases.userfile import load_case_file
from conformance.errors import ConformanceError, UsageError
from conformance.model import Case, Result, Spec
from conformance.refcache import default_cache_dir
from conformance.report.merge import iter_rows, load_manifests, merge_runs, write_report
from conformance.runner import DEFAULT_MEMORY_BUDGET_MB, DEFAULT_TIMEOUT_S, RunOptions, run_conformance
from conformance.specload import load_spec

EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE = 0, 1, 2
DETAIL_LIMIT = 5  # `run --only` prints full details for at most this many cases


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep our one-line shape
        self.print_usage(sys.stderr)
        raise UsageError(message, where="command line", fix=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kl-conformance", description="Spec-driven conformance harness for kl_div.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for bad input")
    parser.add_argument("--spec", help="spec file (default: the spec shipped with the harness)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_case_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"draw of the generated values (default {DEFAULT_SEED})")
        p.add_argument("--suite", choices=("default", "exhaustive", "none"), default="default",
                       help="generated suite: pairwise design plus edge families (default), the full product, or none")
        p.add_argument("--exhaustive", dest="suite", action="store_const", const="exhaustive",
                       help="same as --suite exhaustive")
        p.add_argument("--samples", type=int, default=1, metavar="N",
                       help="independent draws of every generated combination (ids end in s0 ... sN-1)")
        p.add_argument("--cases", action="append", default=[], metavar="FILE", help="user case file (repeatable)")
        p.add_argument("--only", action="append", default=[], metavar="ID",
                       help="run only case ids matching this glob (repeatable)")

    run = sub.add_parser("run", help="run cases through a framework and write results and a report")
    run.add_argument("--framework", required=True, help="adapter name, e.g. torch")
    run.add_argument("--api", action="append", default=[], help="API dotted name (repeatable; default all)")
    run.add_argument("--device", action="append", default=[], help="device (repeatable; default all present)")
    run.add_argument("--part", action="append", default=[], choices=("forward", "grad_input", "grad_target"),
                     help="forward value or a gradient (repeatable; default every part a case asks for)")
    run.add_argument("--out", default="reports/run", help="output directory (default reports/run)")
    run.add_argument("--strict", action="store_true", help="exit 1 if any undocumented divergence is found")
    run.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    run.add_argument("--no-repro", action="store_true",
                     help="do not write reproducers for the undocumented divergences into OUT/repro")
    run.add_argument("--baseline", metavar="DIR",
                     help="an earlier run directory: report what is new, fixed and changed since")
    run.add_argument("--profiles", metavar="DIR",
                     help="directory of <framework>.yaml deviation profiles (default: spec/profiles shipped)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in --out: skip every result already written")
    run.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                     help=f"time limit of one case; past it the verdict is timeout (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--cache-dir", metavar="DIR",
                     help="where computed expectations are kept for later runs and other frameworks "
                          "(default $KL_CACHE_DIR, else ~/.cache/kl-conformance)")
    run.add_argument("--no-cache", action="store_true", help="compute every expectation; read and write no cache")
    run.add_argument("--memory-budget-mb", type=float, default=DEFAULT_MEMORY_BUDGET_MB,
                     help=f"refuse a case estimated to need more memory (default {DEFAULT_MEMORY_BUDGET_MB:g})")
    add_case_options(run)

    cases = sub.add_parser("cases", help="list the case ids a run would use")
    cases.add_argument("--count", action="store_true", help="print only the number of cases")
    add_case_options(cases)

    repro = sub.add_parser("repro", help="print a standalone reproducer script for one case (stdout only)")
    repro.add_argument("case_id", metavar="CASE_ID", nargs="?", help="the case (omit with --all)")
    repro.add_argument("--framework", help="adapter name (with --all: the run's)")
    repro.add_argument("--all", metavar="OUT_DIR", dest="all_to",
                       help="write a script for every undocumented divergence of --from RUN_DIR into OUT_DIR")
    repro.add_argument("--api", help="API dotted name (default: the framework's first)")
    repro.add_argument("--device", default="cpu")
    repro.add_argument("--part", default="forward", choices=("forward", "grad_input", "grad_target", "grad2_input"))
    source = repro.add_mutually_exclusive_group()
    source.add_argument("--from", dest="run_dir", metavar="RUN_DIR", help="take the case from an earlier run's --out")
    source.add_argument("--cases", dest="case_file", metavar="FILE", help="take the case from a user case file")
    repro.add_argument("--seed", type=int, help=f"seed of a generated case (default: the run's, or {DEFAULT_SEED})")
    repro.add_argument("--no-minimize", action="store_true", help="keep the whole case")

    report = sub.add_parser("report", help="merge run directories into one report")
    report.add_argument("runs", nargs="+", metavar="DIR", help="run directories (each with results.jsonl)")
    report.add_argument("--out", required=True, help="directory for the merged report")
    report.add_argument("--strict", action="store_true", help="exit 1 if any undocumented divergence is present")
    report.add_argument("--baseline", metavar="DIR",
                        help="an earlier run or merged directory: report what is new, fixed and changed since")
    report.add_argument("--allow-missing", action="store_true",
                        help="a directory without results shows as 'not run' instead of an error")
    return parser


def select_cases(spec: Spec, args: argparse.Namespace) -> Iterator[Case]:
    """Generated and user cases, filtered by --only; user files are validated before anything runs."""
    user = [case for path in args.cases for case in load_case_file(path)]
    exact = [p for p in args.only if not any(ch in p for ch in "*?[")]
    if args.only and exact == args.only and args.suite != "none":
        # exact generated ids: rebuild them directly, whichever suite they came from
        seen_user = {c.id for c in user}
        for case_id in exact:
            if case_id in seen_user:
                continue
            try:
                key = parse_id(case_id)
            except ValueError as exc:
                raise UsageError(str(exc), where="--only", fix="copy the id from a report or `kl-conformance cases`") from None
            yield build_case(key, args.seed)
        yield from (c for c in user if c.id in exact)
        return
    generated = () if args.suite == "none" else generate_cases(spec, args.seed, exhaustive=args.suite == "exhaustive",
                                                               samples=args.samples)
    for case in _chain(generated, user):
        if not args.only or any(fnmatch.fnmatchcase(case.id, p) for p in args.only):
            yield case


def _chain(*iterables):
    for it in iterables:
        yield from it


def cmd_cases(spec: Spec, args: argparse.Namespace) -> int:
    count = 0
    for case in select_cases(spec, args):
        count += 1
        if not args.count:
            print(case.id)
    if args.count:
        print(count)
    return EXIT_OK


def _write_reproducers(args: argparse.Namespace, out: Path) -> None:
    """Reproducers for the run's undocumented divergences, written by a separate process: minimising
    them calls the framework, and a crash there must not touch the results and reports written."""
    import subprocess

    out = out.resolve()
    spec = ["--spec", str(Path(args.spec).resolve())] if args.spec else []
    command = [sys.executable, "-m", "conformance", *spec, "repro", "--all", str(out / "repro"), "--from", str(out)]
    try:
        # cwd=out: `python -m` puts the working directory first on sys.path, and a source checkout's
        # conformance/ there would shadow the installed package
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=out)
        if done.returncode != 0:
            print(f"warning: reproducers not written ({done.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
    except subprocess.TimeoutExpired:
        print("warning: writing reproducers took over 900 s; stopped (use kl-conformance repro)", file=sys.stderr)


def _check_baseline(path: str | None) -> None:
    if path is not None and not (Path(path) / "results.jsonl").is_file():
        raise UsageError("no results.jsonl in the baseline directory", file=path, where="--baseline",
                         fix="pass the --out directory of an earlier run")


def cmd_run(spec: Spec, args: argparse.Namespace) -> int:
    if not is_known(args.framework):
        raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                         fix=f"use one of {sorted(known_adapters())}, or package.module:AdapterClass")
    _check_baseline(args.baseline)
    if args.timeout_s <= 0 or args.memory_budget_mb <= 0 or args.samples < 1:
        raise UsageError("--timeout-s and --memory-budget-mb must be positive, --samples at least 1",
                         where="command line", fix="pass positive numbers")
    # One pass to validate case files and ids and to count, before any output is written;
    # the run then generates the cases again, lazily, so memory stays flat however many there are.
    total = sum(1 for _ in select_cases(spec, args))
    if not total:
        raise UsageError("no case matches the selection", where="--only / --cases / --suite",
                         fix="check the ids with `kl-conformance cases`")
    show_details = bool(args.only) and total <= DETAIL_LIMIT
    progress = _progress_bar(total) if (sys.stderr.isatty() and not args.no_progress) else None
    run_info = {"seed": args.seed, "suite": args.suite, "samples": args.samples, "case_files": args.cases,
                "only": args.only, "command": " ".join(sys.argv)}
    options = RunOptions(apis=args.api, devices=args.device, parts=args.part, timeout_s=args.timeout_s,
                         memory_budget_mb=args.memory_budget_mb, resume=args.resume,
                         profiles_dir=Path(args.profiles) if args.profiles else None,
                         cache_dir=None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir())
    summary = run_conformance(
        spec, args.framework, select_cases(spec, args), args.out, options, run_info=run_info,
        progress=progress, on_result=_progress_and_details(progress, show_details),
    )
    if progress is not None:
        sys.stderr.write("\n")
    report = write_report(summary.out_dir, [summary.out_dir], baseline=args.baseline)
    if not args.no_repro and not summary.not_run and summary.divergences:
        _write_reproducers(args, summary.out_dir)
    if summary.not_run:
        print(f"{args.framework}: not run: {summary.not_run}. Report: {report}")
        return EXIT_OK
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary.counts.items()))
    extra = (f"; {summary.skipped} cases already done" if summary.skipped else "") + \
        (f"; worker restarted {summary.restarts} times" if summary.restarts else "")
    print(f"{args.framework}: {summary.cases} cases, {sum(summary.counts.values())} results ({counts}); "
          f"{summary.divergences} divergences{extra}. Report: {report}")
    return _strict_exit(args.strict, [summary.out_dir])


def cmd_report(spec: Spec, args: argparse.Namespace) -> int:
    _check_baseline(args.baseline)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = merge_runs(args.runs, out, allow_missing=args.allow_missing, baseline=args.baseline)
    present, manifests = load_manifests(args.runs, allow_missing=args.allow_missing)
    not_run = [m["framework"] for m in manifests if m.get("status") == "not_run"]
    count = sum(1 for _ in iter_rows(present))
    print(f"merged {len(args.runs)} runs, {count} results" + (f"; not run: {', '.join(not_run)}" if not_run else "")
          + f". Report: {path}")
    return _strict_exit(args.strict, present)


def cmd_repro(spec: Spec, args: argparse.Namespace) -> int:
    from conformance.repro import write_all, write_script

    if args.all_to:
        if not args.run_dir:
            raise UsageError("--all needs --from RUN_DIR", where="--all", fix="pass the run directory with --from")
        count = write_all(args.run_dir, spec, Path(args.all_to))
        print(f"{count} reproducers in {args.all_to}")
        return EXIT_OK
    if not args.case_id or not args.framework:
        raise UsageError("repro needs CASE_ID and --framework (or --all OUT_DIR --from RUN_DIR)",
                         where="command line", fix="see `kl-conformance repro --help`")
    if not is_known(args.framework):
        raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                         fix=f"use one of {sorted(known_adapters())}")
    sys.stdout.write(write_script(args.case_id, args.framework, spec, args.api, args.device, args.part,
                                  args.run_dir, args.case_file, args.seed, minimize=not args.no_minimize))
    return EXIT_OK


def _strict_exit(strict: bool, run_dirs: Sequence[Path]) -> int:
    """1 under --strict when any undocumented divergence is in the runs (streamed)."""
    if not strict:
        return EXIT_OK
    undocumented = any(r.verdict.is_divergence and not r.documented for r in iter_rows(run_dirs))
    return EXIT_DIVERGENCE if undocumented else EXIT_OK


def _print_details(case: Case, result: Result) -> None:
    """For a rerun of a few cases: everything needed to see the divergence."""
    with np.printoptions(precision=17, threshold=64):
        print(f"case {case.id}\n  params: {case.params}\n  dtype: {case.dtype}  layout: {case.layout}")
        print(f"  input:  {case.input!r}\n  target: {case.target!r}")
        print(f"  {result.framework} / {result.api} / {result.device}: {result.verdict.value}"
              + (f" ({result.cause})" if result.cause else ""))
        if result.message:
            print(f"  {result.message}")
        if result.warnings:
            print(f"  warnings: {list(result.warnings)}")


def _progress_and_details(progress, show_details: bool):
    """The per-result callback: advance the bar once per case, print details for small reruns."""
    seen: set[str] = set()

    def on_result(case: Case, result: Result) -> None:
        if show_details:
            _print_details(case, result)
        if progress is not None and case.id not in seen:
            seen.add(case.id)
            progress(len(seen))
    return on_result


def _progress_bar(total: int):
    def show(done: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cases")
        sys.stderr.flush()
    return show


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        spec = load_spec(args.spec)
        return {"run": cmd_run, "cases": cmd_cases, "report": cmd_report, "repro": cmd_repro}[args.command](spec, args)
    except ConformanceError as exc:
        if debug:
            raise
        print(f"kl-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
