"""The command line: `kl-conformance run | cases | report`; also `python -m conformance`.

Exit codes (conformance/report/gate.py): 0 done (divergences are findings, not failures); 1 a gate
failed (--strict, --fail-on-new, a stale known-findings entry); 2 bad usage, a bad spec, case
file or results directory (one message naming the file, the place and the fix; nothing
written); 3 with any gate, a framework did not run, a run stopped early, or nothing was judged; and always
when a run failed (no memory, a full disk: run.json says `failed` and why, --resume continues); 130 Ctrl-C, 143
SIGTERM (run.json says `interrupted`). One command writes into one --out at a time (a lock there); a second is exit 2.

Owns parsing and checking the arguments and the order in which a command does its work; running, judging,
reporting and writing reproducers live in their own modules, never here.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from conformance.adapters.registry import get_adapter, is_known, known_adapters
from conformance.cases.generate import DEFAULT_SEED
from conformance.core.errors import ConformanceError, ResultsError, UsageError
from conformance.core.model import PARTS, Case, Result, Spec
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import load_manifests, other_spec
from conformance.core.specload import load_spec
from conformance.judge.known import KnownFindings, load_known
from conformance.judge.refcache import default_cache_dir
from conformance.reference.statements import verify_formulas
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Gates
from conformance.report.provenance import check_runs
from conformance.report.writer import ReportFeed, merge_runs, write_report
from conformance.run.outdir import REPORT_FILES, STAGING_PREFIX, OutDirLock, check_out_dir, prepare_out_dir
from conformance.run.runner import (DEFAULT_TIMEOUT_S, RunFailed, RunOptions, Terminated, add_written, failure_reason,
                                    interruption, record_end, run_conformance, select)
from conformance.run.selection import (DEFAULT_MEMORY_BUDGET_MB, CaseSelection, file_digest, select_cases,
                                       select_lazily, selected_shard)
from conformance.run.worker import WorkerPool

DETAIL_LIMIT = 5  # `run --only` prints full details for at most this many cases
KEEP_CASES = 20_000  # a selection up to this many cases is kept once drawn; a larger one is drawn as the run takes it (flat memory)
REBASELINE = "re-baseline: run the accepted build again with this harness (kl-conformance run ... --force --out BASELINE)"
REPRO_TIMEOUT_S = 900  # minimising a run's reproducers stops after this long
EXIT_TERMINATED = 143  # SIGTERM, as a shell reports it


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep our one-line shape (no usage block)
        raise UsageError(message, where="command line", fix=f"see `{self.prog} --help`")


def _natural(text: str) -> int:
    """An integer >= 0 (a seed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _at_least_one(text: str) -> int:
    value = _natural(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _positive(text: str) -> float:
    """A number > 0 (inf allowed: no limit); NaN is refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kl-conformance", description="Spec-driven conformance harness for kl_div.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for bad input")
    parser.add_argument("--spec", help="spec file (default: the spec shipped with the harness)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_case_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seed", type=_natural, default=DEFAULT_SEED, help=f"draw of the generated values (default {DEFAULT_SEED})")
        p.add_argument("--suite", choices=("default", "exhaustive", "none"), default="default",
                       help="generated suite: pairwise design plus edge families (default), the full product, or none")
        p.add_argument("--exhaustive", dest="suite", action="store_const", const="exhaustive",
                       help="same as --suite exhaustive")
        p.add_argument("--samples", type=_at_least_one, default=1, metavar="N",
                       help="independent draws of every generated combination (ids end in s0 ... sN-1)")
        p.add_argument("--cases", action="append", default=[], metavar="FILE", help="user case file (repeatable)")
        p.add_argument("--only", action="append", default=[], metavar="ID",
                       help="run only case ids matching this glob (repeatable)")
        p.add_argument("--shard", metavar="K/N",
                       help="only the K-th of N disjoint shards of the cases (by a hash of the case id), for CI "
                            "matrices; merge the N runs with `report`")

    def add_gate_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--strict", action="store_true",
                       help="exit 1 if a divergence is neither documented nor known; exit 3 (with any gate) if a "
                            "framework did not run, a run stopped early, or nothing was judged")
        p.add_argument("--baseline", metavar="DIR",
                       help="an earlier run or merged directory: report what is new, fixed and changed since")
        p.add_argument("--fail-on-new", action="store_true",
                       help="with --baseline: exit 1 if a divergence is new or changed since the baseline "
                            "(and neither documented nor known), or a result it judged is lost (unsupported, "
                            "crashed or missing now)")
        p.add_argument("--known", metavar="FILE",
                       help="known-findings file (YAML): divergences it matches are accepted; an entry that "
                            "matches nothing is stale and fails the command")
        p.add_argument("--force", action="store_true",
                       help="remove the files an earlier run or report recorded writing into --out (run.json or "
                            "runs.json: `written`), and nothing else; refused where no such record is, or where "
                            "an input of this command would be removed; without it a non-empty --out is refused")

    run = sub.add_parser("run", help="run cases through a framework and write results and a report")
    run.add_argument("--framework", required=True, help="adapter name, e.g. torch")
    run.add_argument("--api", action="append", default=[], help="API dotted name (repeatable; default all)")
    run.add_argument("--device", action="append", default=[], help="device (repeatable; default all present)")
    run.add_argument("--part", action="append", default=[], choices=PARTS,
                     help="forward value or a gradient (repeatable; default every part a case asks for)")
    run.add_argument("--out", default="reports/run", help="output directory (default reports/run)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    run.add_argument("--no-repro", action="store_true",
                     help="do not write reproducers for the undocumented divergences into OUT/repro")
    run.add_argument("--profiles", metavar="DIR",
                     help="directory of <framework>.yaml deviation profiles (default: spec/profiles shipped)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in --out: skip every result already written (refused if "
                          "that run had another seed, suite, samples, case files, --only, --shard, --known, spec, "
                          "profile set or framework version)")
    run.add_argument("--timeout-s", type=_positive, default=DEFAULT_TIMEOUT_S,
                     help=f"time limit of one case; past it the verdict is timeout (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--cache-dir", metavar="DIR",
                     help="where computed expectations are kept for later runs and other frameworks, and JAX's "
                          "compiled kernels (default $KL_CACHE_DIR, else ~/.cache/kl-conformance)")
    run.add_argument("--no-cache", action="store_true",
                     help="compute every expectation and compile every kernel; read and write no cache")
    run.add_argument("--memory-budget-mb", type=_positive, default=DEFAULT_MEMORY_BUDGET_MB,
                     help=f"refuse a case estimated to need more memory (default {DEFAULT_MEMORY_BUDGET_MB:g})")
    add_case_options(run)
    add_gate_options(run)

    cases = sub.add_parser("cases", help="list the case ids a run would use")
    cases.add_argument("--count", action="store_true", help="print only the number of cases")
    add_case_options(cases)

    repro = sub.add_parser("repro", help="print a standalone reproducer script for one case (stdout only)")
    repro.add_argument("case_id", metavar="CASE_ID", nargs="?", help="the case (omit with --all)")
    repro.add_argument("--framework", help="adapter name or module:Class (with --all: by default the run's, "
                                           "if it is a registered adapter)")
    repro.add_argument("--all", metavar="OUT_DIR", dest="all_to",
                       help="write a script for every undocumented divergence of --from RUN_DIR into OUT_DIR")
    repro.add_argument("--api", help="API dotted name (default: the framework's first)")
    repro.add_argument("--device", default="cpu")
    repro.add_argument("--part", default="forward", choices=PARTS)
    source = repro.add_mutually_exclusive_group()
    source.add_argument("--from", dest="run_dir", metavar="RUN_DIR", help="take the case from an earlier run's --out")
    source.add_argument("--cases", dest="case_file", metavar="FILE", help="take the case from a user case file")
    repro.add_argument("--seed", type=_natural, help=f"seed of a generated case (default: the run's, or {DEFAULT_SEED})")
    repro.add_argument("--no-minimize", action="store_true", help="keep the whole case")
    repro.add_argument("--memory-budget-mb", type=_positive, default=DEFAULT_MEMORY_BUDGET_MB,
                       help=f"refuse a case estimated to need more memory (default {DEFAULT_MEMORY_BUDGET_MB:g})")
    repro.add_argument("--cache-dir", metavar="DIR", help="with --all: read and store expectations in this reference cache")
    repro.add_argument("--progress", action="store_true", help="with --all: print 'progress DONE TOTAL' lines on stdout")

    selftest = sub.add_parser("selftest", help="plant bugs into a real adapter and check that every planted "
                                               "fault is flagged and every gate fails on a broken build (exit 1 "
                                               "if one is not)")
    selftest.add_argument("--framework", required=True, help="adapter name, e.g. torch")
    selftest.add_argument("--variant", action="append", default=[], metavar="NAME",
                          help="run only this planted variant (repeatable; default all)")
    selftest.add_argument("--api", action="append", default=[], help="API dotted name (repeatable; default all)")
    selftest.add_argument("--device", action="append", default=[],
                          help="device (repeatable; default all present), e.g. cuda to check the verdicts on a GPU")
    selftest.add_argument("--out", default="reports/selftest", help="output directory (default reports/selftest)")
    selftest.add_argument("--timeout-s", type=_positive, default=DEFAULT_TIMEOUT_S, help="time limit of one case")
    selftest.add_argument("--no-cache", action="store_true", help="compute every expectation")
    selftest.add_argument("--force", action="store_true",
                          help="replace what an earlier self-test wrote into --out; without it a non-empty --out "
                               "is refused")
    add_case_options(selftest)

    report = sub.add_parser("report", help="merge run directories into one report")
    report.add_argument("runs", nargs="+", metavar="DIR", help="run directories (each with results.jsonl)")
    report.add_argument("--out", required=True, help="directory for the merged report (not one of the runs)")
    report.add_argument("--allow-missing", action="store_true",
                        help="a directory without results shows as 'not run' instead of an error")
    add_gate_options(report)
    return parser


def case_selection(args: argparse.Namespace) -> CaseSelection:
    """The selection options of `run`, `cases` and `selftest` as a CaseSelection."""
    return CaseSelection(seed=args.seed, suite=args.suite, samples=args.samples, case_files=tuple(args.cases),
                         only=tuple(args.only), shard=args.shard,
                         memory_budget_mb=getattr(args, "memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB))


def cmd_cases(spec: Spec, args: argparse.Namespace) -> int:
    count = 0
    for case in select_cases(spec, case_selection(args)):
        count += 1
        if not args.count:
            print(case.id)
    if args.count:
        print(count)
    return EXIT_OK


def _cache_dir(args: argparse.Namespace) -> Path | None:
    """The reference cache's directory (also where a framework keeps its compiled kernels); None with --no-cache."""
    return None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def _write_reproducers(spec: Spec, args: argparse.Namespace, out: Path, pool, show_progress: bool,
                       results: list[Result] | None) -> None:
    """Reproducers for the run's undocumented divergences, minimised by the run's own worker (the framework
    is loaded once; a crash or hang there costs one call, never the results and reports written). They
    read the run's expectations from the reference cache, and their progress goes on the bar. Past
    REPRO_TIMEOUT_S the rest keep their whole case. `results`: the rows that need one, kept as the run
    wrote them (None: read them back from `out`). They are written into a temporary directory, then moved
    into OUT/repro and recorded in run.json: a run killed meanwhile leaves only a temporary directory, which
    --resume and --force remove."""
    from conformance.repro import write_all
    from conformance.run.worker import WorkerLost

    cache = _cache_dir(args)
    bar = (lambda done, total: _draw_bar(done, total, "reproducers")) if show_progress else None
    staging = Path(tempfile.mkdtemp(dir=out, prefix=STAGING_PREFIX))
    try:
        try:
            _, whole = write_all(str(out), spec, staging, cache_dir=cache, progress=bar, pool=pool,
                                 deadline=time.monotonic() + REPRO_TIMEOUT_S, framework=args.framework,
                                 results=results, memory_budget_mb=args.memory_budget_mb)
        except (WorkerLost, ConformanceError) as exc:
            print(f"warning: reproducers not written ({exc})", file=sys.stderr)
            return
        finally:
            if show_progress:
                sys.stderr.write("\n")
        _publish(out, staging, "repro")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if whole:
        print(f"warning: minimising reproducers took over {REPRO_TIMEOUT_S} s; {whole} keep their whole case "
              f"(kl-conformance repro minimises one)", file=sys.stderr)


def _publish(out: Path, staging: Path, folder: str) -> None:
    """Move the files written into `staging` into OUT/`folder` and record them in run.json; a file of the same
    name there that the harness did not write is kept, and the new one is not published (one warning)."""
    from conformance.run.outdir import recorded

    ours = set(recorded(out)[0])
    target = out / folder
    made = not target.is_dir()
    target.mkdir(exist_ok=True)
    moved, kept = [], []
    for path in sorted(staging.iterdir()):
        name = f"{folder}/{path.name}"
        if (out / name).exists() and name not in ours:
            kept.append(name)
            continue
        os.replace(path, out / name)
        moved.append(name)
    add_written(out, moved + ([f"{folder}/"] if made else []))
    if kept:
        print(f"warning: {len(kept)} reproducers not written: {kept[0]} is a file kl-conformance did not write "
              f"there", file=sys.stderr)


def _check_gate_options(spec: Spec, args: argparse.Namespace, seed: int | None = None) -> KnownFindings | None:
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


def narrowing(args: argparse.Namespace, adapter_name: str) -> dict:
    """What run.json's selection adds for the gates (core/scope.py): the parts, APIs and devices asked for, the
    name the rows carry, and the options by which the run selected less than the whole suite."""
    cut = {"--only": bool(args.only), "--shard": bool(args.shard), "--seed": args.seed != DEFAULT_SEED,
           "--part": bool(args.part), "--api": bool(args.api), "--device": bool(args.device)}
    return {"parts": list(args.part), "apis": list(args.api), "devices": list(args.device), "adapter": adapter_name,
            "narrowed_by": [option for option, on in cut.items() if on]}


def _gates(args: argparse.Namespace) -> Gates:
    return Gates(strict=args.strict, fail_on_new=args.fail_on_new, known=args.known is not None)


def _inputs(args: argparse.Namespace, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """The command's input files and directories, as (option, path): --force must not remove one."""
    given = [("--cases", path) for path in getattr(args, "cases", [])] + list(more)
    given += [("--known", args.known), ("--baseline", args.baseline), ("--spec", args.spec),
              ("--profiles", getattr(args, "profiles", None))]
    return tuple((option, path) for option, path in given if path)


@contextlib.contextmanager
def _sigterm_as_exception():
    """SIGTERM ends the command as Ctrl-C does (worker stopped, temporary files removed, run.json recorded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise Terminated()
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_run(spec: Spec, args: argparse.Namespace, early_worker: WorkerPool | None = None) -> int:
    if not is_known(args.framework):
        raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                         fix=f"use one of {sorted(known_adapters())}, or package.module:AdapterClass")
    if args.resume and args.force:
        raise UsageError("--resume and --force contradict each other", where="command line",
                         fix="--resume continues the run in --out; --force starts it again")
    shard = selected_shard(case_selection(args))
    known = _check_gate_options(spec, args, seed=args.seed)
    check_out_dir(args.out, resume=args.resume, force=args.force, inputs=_inputs(args))
    # conformance/entry.py may have started a worker already, from its own quick reading of the command line.
    # Use it only if that reading agrees with the arguments checked here; otherwise close it.
    early = early_worker
    if early is not None and (early.framework, early.compile_cache_dir) != (args.framework, _cache_dir(args)):
        early.close()
        early = None
    # One worker serves the run and then the reproducers, so the framework is imported once. The output
    # directory's lock is held until the reports and reproducers are written.
    with _sigterm_as_exception(), OutDirLock() as lock, early or WorkerPool(args.framework,
                                                                           compile_cache_dir=_cache_dir(args)) as pool:
        pool.timeout_s = args.timeout_s
        if not pool.launched:
            pool.launch()  # the framework's import is slow: it runs while the cases are drawn and checked
        return _run_with(spec, args, known, shard, pool, lock)


def _run_with(spec: Spec, args: argparse.Namespace, known, shard, pool, lock: OutDirLock) -> int:
    """The run, once its worker is importing the framework: cases, results, reports, reproducers."""
    # One pass over the ids validates case files and ids and counts, before any output is written or any value
    # drawn. A selection of up to KEEP_CASES is then made and kept; a larger one is made lazily, as the run
    # takes it, so memory stays flat however many.
    makers: list[Callable[[], Case]] | None = []
    total = 0
    selected = case_selection(args)
    for _, make in select_lazily(spec, selected):
        total += 1
        if makers is not None:
            makers.append(make)
            makers = makers if len(makers) <= KEEP_CASES else None
    kept = [make() for make in makers] if makers is not None else None
    if not total:
        raise UsageError("no case matches the selection", where="--only / --cases / --suite / --shard",
                         fix="check the ids with `kl-conformance cases`")
    show_details = bool(args.only) and total <= DETAIL_LIMIT
    progress = _progress_bar(total) if (sys.stderr.isatty() and not args.no_progress) else None
    selection = {"seed": args.seed, "suite": args.suite, "samples": args.samples,
                 "case_files": [file_digest(path) for path in args.cases], "only": args.only,
                 "shard": str(shard) if shard else None, "known": known.digest if known else None,
                 **narrowing(args, get_adapter(args.framework).name)}
    run_info = {"seed": args.seed, "suite": args.suite, "samples": args.samples, "case_files": args.cases,
                "only": args.only, "shard": selection["shard"], "known": args.known, "selection": selection,
                "command": " ".join(sys.argv),
                "written": [*REPORT_FILES, *(["baseline.json"] if args.baseline else [])]}
    options = RunOptions(apis=args.api, devices=args.device, parts=args.part, timeout_s=args.timeout_s,
                         memory_budget_mb=args.memory_budget_mb, resume=args.resume, force=args.force, known=known,
                         profiles_dir=Path(args.profiles) if args.profiles else None,
                         cache_dir=_cache_dir(args), inputs=_inputs(args))
    shown = _progress_and_details(progress, show_details)
    # While the rows are written, the report's pass reads them and the rows that will need a reproducer are
    # kept. A resumed run's earlier rows are only on disk, so then both the report and the reproducers read
    # the rows back from the file instead.
    needing: list[Result] | None = None if args.no_repro or args.resume else []
    feed = None if args.resume else ReportFeed(Path(args.out), known, args.baseline, _gates(args))
    from conformance.repro import needs_reproducer

    def on_result(case: Case, result: Result) -> None:
        shown(case, result)
        if feed is not None:
            feed.add(result)
        if needing is not None and needs_reproducer(result):
            needing.append(result)
    try:
        summary = run_conformance(
            spec, args.framework, kept if kept is not None else select_cases(spec, selected), args.out, options,
            run_info=run_info, progress=progress, on_result=on_result, pool=pool, lock=lock,
        )
    except BaseException as exc:
        if feed is not None:
            try:
                feed.discard()
            except OSError:  # a full disk fails its last flush too; --resume and --force remove its parts
                pass
        if isinstance(exc, RunFailed):
            return _failed(args.out, str(exc), progress)
        if isinstance(exc, (MemoryError, OSError)) and not isinstance(exc, BrokenPipeError):  # its last record
            reason = failure_reason(exc)
            return _failed(args.out, reason + ("" if record_end(Path(args.out), "failed", reason) else
                                               "; run.json could not record it either"), progress)
        raise
    if progress is not None:
        sys.stderr.write("\n")
    try:
        written = write_report(summary.out_dir, [summary.out_dir], baseline=args.baseline, known=known, fed=feed,
                               gates=_gates(args))
        if not args.no_repro and not summary.not_run and not summary.stopped and summary.divergences:
            _write_reproducers(spec, args, summary.out_dir, pool, show_progress=progress is not None, results=needing)
    except (KeyboardInterrupt, Terminated) as exc:  # the rows are complete; --resume writes the reports again
        record_end(summary.out_dir, "interrupted", interruption(exc) + " while writing the reports")
        raise
    except (MemoryError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        reason = "writing the reports: " + failure_reason(exc)
        record_end(summary.out_dir, "failed", reason)
        return _failed(args.out, reason, None)
    if summary.not_run:
        print(f"{args.framework}: not run: {summary.not_run}. Report: {written.report}")
    else:
        counts = ", ".join(f"{n} {v}" for v, n in sorted(summary.counts.items()))
        extra = (f"; {summary.skipped} cases already done" if summary.skipped else "") + \
            (f"; worker restarted {summary.restarts} times" if summary.restarts else "")
        print(f"{args.framework}: {summary.cases} cases, {sum(summary.counts.values())} results ({counts}); "
              f"{summary.divergences} divergences{extra}. Report: {written.report}")
        if summary.stopped:
            print(f"kl-conformance: the run stopped before its end: {summary.stopped}. The results so far are in "
                  f"{summary.out_dir}; continue with --resume once the cause is fixed", file=sys.stderr)
    return written.decision.print()


def _failed(out: str, reason: str, progress) -> int:
    """The one line of a run that could not go on; its rows so far are kept for --resume."""
    if progress is not None:
        sys.stderr.write("\n")
    print(f"kl-conformance: {out}: the run failed: {reason}", file=sys.stderr)
    return EXIT_INCOMPLETE


def cmd_report(spec: Spec, args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.resolve() in {Path(r).resolve() for r in args.runs}:
        raise UsageError("the output directory is one of the runs to merge", file=args.out, where="--out",
                         fix="write the merged report into another directory")
    known = _check_gate_options(spec, args)
    inputs = _inputs(args, *(("a run to merge", run) for run in args.runs))
    check_out_dir(out, force=args.force, inputs=inputs)
    check_runs(args.runs, spec.hash, allow_missing=args.allow_missing, baseline=args.baseline,
               redo="run them again with this harness (kl-conformance run ... --force), or report them with "
                    "the spec they used (--spec)", rebaseline=REBASELINE)  # reads only
    with OutDirLock() as lock:
        prepare_out_dir(out, force=args.force, lock=lock, inputs=inputs)
        written = merge_runs(args.runs, out, allow_missing=args.allow_missing, baseline=args.baseline, known=known,
                             gates=_gates(args))
    _, manifests = load_manifests(args.runs, allow_missing=args.allow_missing)
    not_run = [m.get("framework", "?") for m in manifests if m.get("status") == "not_run"]
    print(f"merged {len(args.runs)} runs, {written.results} results"
          + (f"; not run: {', '.join(not_run)}" if not_run else "") + f". Report: {written.report}")
    return written.decision.print()


def cmd_repro(spec: Spec, args: argparse.Namespace) -> int:
    from conformance.repro import CaseSource, write_all, write_script

    if args.all_to:
        if not args.run_dir:
            raise UsageError("--all needs --from RUN_DIR", where="--all", fix="pass the run directory with --from")
        progress = (lambda done, total: print(f"progress {done} {total}", flush=True)) if args.progress else None
        if args.framework and not is_known(args.framework):
            raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                             fix=f"use one of {sorted(known_adapters())}, or package.module:AdapterClass")
        count, _ = write_all(args.run_dir, spec, Path(args.all_to),
                             cache_dir=Path(args.cache_dir) if args.cache_dir else None, progress=progress,
                             framework=args.framework, memory_budget_mb=args.memory_budget_mb)
        print(f"{count} reproducers in {args.all_to}")
        return EXIT_OK
    if not args.case_id or not args.framework:
        raise UsageError("repro needs CASE_ID and --framework (or --all OUT_DIR --from RUN_DIR)",
                         where="command line", fix="see `kl-conformance repro --help`")
    if not is_known(args.framework):
        raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                         fix=f"use one of {sorted(known_adapters())}")
    source = CaseSource(args.run_dir, args.case_file, args.seed, memory_budget_mb=args.memory_budget_mb)
    sys.stdout.write(write_script(spec, args.framework, args.case_id, source, args.api, args.device, args.part,
                                  minimize=not args.no_minimize))
    return EXIT_OK


def cmd_selftest(spec: Spec, args: argparse.Namespace) -> int:
    from conformance.report.selftest import render_selftest, selftest_json
    from conformance.selftest import GATE_VARIANTS, VARIANTS, NotRun, run_selftest

    if not is_known(args.framework):
        raise UsageError(f"unknown framework {args.framework!r}", where="--framework",
                         fix=f"use one of {sorted(known_adapters())}")
    unknown = [v for v in args.variant if v not in VARIANTS and v not in GATE_VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {unknown[0]!r}", where="--variant",
                         fix=f"use one of {sorted([*VARIANTS, *GATE_VARIANTS])}")
    adapter = get_adapter(args.framework)  # unknown --api and --device names are refused before --out exists
    select(args.framework, [a.name for a in adapter.apis], adapter.known_devices, adapter.known_devices,
           args.api, args.device)
    cases = list(select_cases(spec, case_selection(args)))
    if not cases:
        raise UsageError("no case matches the selection", where="--only / --cases / --suite / --shard",
                         fix="check the ids with `kl-conformance cases`")
    # its own parts are replaced (each run's by that run's record); nothing else there is removed
    out = check_out_dir(args.out, force=args.force, record_required=False)
    # the self-test owns its output directory: each of its runs replaces that run's earlier output
    options = RunOptions(apis=tuple(args.api), devices=tuple(args.device), timeout_s=args.timeout_s, force=True,
                         cache_dir=None if args.no_cache else default_cache_dir())
    show = (lambda name: print(f"selftest: {name}", file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    try:
        control, reports = run_selftest(spec, args.framework, cases, out, args.variant, options, progress=show)
    except NotRun as exc:
        print(f"kl-conformance: selftest: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    text = render_selftest(args.framework, control, reports)
    (out / "selftest.md").write_text(text, encoding="utf-8")
    (out / "selftest.json").write_text(selftest_json(args.framework, control, reports), encoding="utf-8")
    print(text, end="")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_GATE


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
    return lambda done: _draw_bar(done, total, "cases")


def _draw_bar(done: int, total: int, what: str) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None, early_worker: WorkerPool | None = None) -> int:
    """The command line. `early_worker`: a worker conformance/entry.py launched for `run` from its own
    reading of `argv`; `run` uses it only if it matches the checked arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        spec = load_spec(args.spec)
        verify_formulas(spec)  # before anything is written: the spec's formulas must be the reference's
        if args.command == "run":
            return cmd_run(spec, args, early_worker)
        commands = {"cases": cmd_cases, "report": cmd_report, "repro": cmd_repro, "selftest": cmd_selftest}
        return commands[args.command](spec, args)
    except ConformanceError as exc:
        if debug:
            raise
        print(f"kl-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, Terminated) as exc:
        if debug:
            raise
        # every finished case's rows are already on disk (flushed per case)
        print(f"kl-conformance: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}. Continue a run "
              f"with the same command and --resume", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except MemoryError:  # a run records it in run.json first (runner.py); any other command has written nothing
        print("kl-conformance: out of memory (lower --memory-budget-mb, or free memory)", file=sys.stderr)
        return EXIT_INCOMPLETE
    except BrokenPipeError:  # `kl-conformance cases | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit must not fail
        return EXIT_OK
    except OSError as exc:
        if debug or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a run has recorded it in run.json (_run_with); `report` writes each file atomically: none is half-written
        print("kl-conformance: no space left on the device" + (f" ({exc.filename})" if exc.filename else "")
              + "; free some and run the command again", file=sys.stderr)
        return EXIT_INCOMPLETE
