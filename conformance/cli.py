"""The command line: `kl-conformance run | cases | report | repro | selftest | modes`; also `python -m conformance`.

Exit codes (conformance/report/gate.py): 0 done (divergences are findings, not failures); 1 a gate
failed (--strict, --fail-on-new, a stale known-findings entry); 2 bad usage, a bad spec, case
file or results directory (one message naming the file, the place and the fix; nothing
written); 3 with any gate, a framework did not run, a run stopped early, or nothing was judged; and always
when a run failed (no memory, a full disk: run.json says `failed` and why, --resume continues); 130 Ctrl-C, 143
SIGTERM (run.json says `interrupted`). One command writes into one --out at a time (a lock there); a second is exit 2.

Owns parsing the arguments and the order in which each command does its work (`run`'s is in runcommand.py,
the arguments the commands share in arguments.py); running, judging, reporting and writing reproducers live
in their own modules, never here.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import Sequence

from conformance.adapters.registry import get_adapter, is_known, known_adapters, unknown_framework
from conformance.arguments import (REBASELINE, case_selection, check_gate_options, gates_of, inputs_of, like_marks,
                                   no_case_matches)
from conformance.cases.generate import DEFAULT_SEED
from conformance.core.errors import ConformanceError, UsageError
from conformance.core.model import Spec
from conformance.core.rundirs import check_run_dirs, load_manifests
from conformance.core.specload import load_spec
from conformance.core.text import terminal_line
from conformance.judge.refcache import default_cache_dir
from conformance.options import OPTIONS
from conformance.reference.statements import verify_formulas
from conformance.report.baselinefile import baseline_written, write_baseline
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from conformance.report.provenance import check_runs
from conformance.report.writer import check_modes, check_out_outside, merge_runs
from conformance.run.context import DEFAULT_TIMEOUT_S
from conformance.run.outdir import OutDirLock, check_out_dir, prepare_out_dir
from conformance.run.record import Terminated
from conformance.run.runner import RunOptions, select
from conformance.run.pool import WorkerPool
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, select_cases
from conformance.runcommand import cmd_run
from conformance.version import VersionAction

EXIT_TERMINATED = 143  # SIGTERM, as a shell reports it


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 too; keep our one-line shape (no usage block)
        raise UsageError(message, where="command line", fix=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kl-conformance", description="Spec-driven conformance harness for kl_div.")
    parser.add_argument("--version", action=VersionAction,
                        help="print the harness's version (the one run.json records as harness_version), and the "
                             "commit where it runs from a git checkout, and exit")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for bad input")
    parser.add_argument("--spec", help="spec file (default: the spec shipped with the harness)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_case_options(p: argparse.ArgumentParser) -> None:
        OPTIONS["seed"].add_to(p, default=DEFAULT_SEED, metavar=None,
                               help=f"draw of the generated values (default {DEFAULT_SEED})")
        OPTIONS["suite"].add_to(p, default="default")
        p.add_argument("--exhaustive", dest="suite", action="store_const", const="exhaustive",
                       help="same as --suite exhaustive")
        OPTIONS["samples"].add_to(p, default=1)
        OPTIONS["cases"].add_to(p, help="user case file (repeatable)")
        OPTIONS["only"].add_to(p, help="run only case ids matching this glob (repeatable)")
        OPTIONS["shard"].add_to(p)
        # selection by meaning (run/selection.py): each repeatable, combined with each other and with --only
        for name in ("reduction", "log_target", "dtype", "family"):
            OPTIONS[name].add_to(p, help=OPTIONS[name].help + " (repeatable)")

    def add_gate_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--strict", action="store_true",
                       help="exit 1 if a divergence is neither documented nor known; exit 3 (with any gate) if a "
                            "framework did not run, a run stopped early, or nothing was judged")
        p.add_argument("--baseline", metavar="DIR|FILE",
                       help="an earlier run or merged directory, or the file its --write-baseline wrote: report "
                            "what is new, fixed and changed since")
        p.add_argument("--write-baseline", metavar="FILE",
                       help="also write these results as a compact baseline file (gzip'd JSON lines, the same "
                            "bytes for the same results) that --baseline reads: the file a CI job commits")
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

    def add_port_options(p: argparse.ArgumentParser) -> None:  # a port judged like a framework (docs/guide/ports.md)
        OPTIONS["like"].add_to(p)
        OPTIONS["like_run"].add_to(p)
        p.add_argument("--fail-on-own", action="store_true",
                       help="with --like-run: exit 1 if a divergence neither documented nor known is the port's "
                            "own (not shared with FRAMEWORK's recorded run); with --strict, --strict on those only")
        p.add_argument("--draft-shared", action="store_true",
                       help="with --like-run: write issue drafts for the defects the port shares with FRAMEWORK's "
                            "recorded run too (by default only for its own)")

    run = sub.add_parser("run", help="run cases through a framework and write results and a report")
    run.add_argument("--framework", required=True, metavar="NAME",
                     help="a registered adapter name (e.g. torch, or one an installed package registers by entry "
                          "point), package.module:Class for an adapter class importable from here (a port, a "
                          "private build), or package.module:function for a kl_div of torch's signature on NumPy "
                          "arrays (forward only; docs/guide/ports.md)")
    OPTIONS["api"].add_to(run, metavar=None, help="API dotted name (repeatable; default all)")
    OPTIONS["device"].add_to(run, metavar=None, help="device (repeatable; default all present)")
    OPTIONS["mode"].add_to(run, help="how the calls are made: eager, or a compiled or graph mode the adapter "
                                     "offers (repeatable; default eager; `kl-conformance modes` lists them)")
    OPTIONS["part"].add_to(run, help="forward value or a gradient (repeatable; default every part a case asks for)")
    run.add_argument("--out", default="reports/run", help="output directory (default reports/run)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    run.add_argument("--no-repro", action="store_true",
                     help="do not write reproducers for the undocumented divergences into OUT/repro")
    run.add_argument("--profiles", metavar="DIR",
                     help="directory of <framework>.yaml deviation profiles (default: spec/profiles shipped)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in --out: skip every result already written and redo every "
                          "output stage run.json does not record as done (refused if that run had another seed, "
                          "suite, samples, case files, --only, --shard, --part, --api, --device, --mode, selection "
                          "by meaning, --known, spec, profile set or framework version)")
    OPTIONS["timeout_s"].add_to(run, default=DEFAULT_TIMEOUT_S, metavar=None,
                                help=f"{OPTIONS['timeout_s'].help} (default {DEFAULT_TIMEOUT_S:g})")
    OPTIONS["jobs"].add_to(run)
    run.add_argument("--cache-dir", metavar="DIR",
                     help="where computed expectations are kept for later runs and other frameworks, and JAX's "
                          "compiled kernels (default $KL_CACHE_DIR, else ~/.cache/kl-conformance)")
    run.add_argument("--no-cache", action="store_true",
                     help="compute every expectation and compile every kernel; read and write no cache")
    budget_help = f"{OPTIONS['memory_budget_mb'].help} (default {DEFAULT_MEMORY_BUDGET_MB:g})"
    OPTIONS["memory_budget_mb"].add_to(run, default=DEFAULT_MEMORY_BUDGET_MB, metavar=None, help=budget_help)
    add_case_options(run)
    add_gate_options(run)
    add_port_options(run)

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
    OPTIONS["part"].add_to(repro, action="store", default="forward", help=None)
    repro.add_argument("--mode", default="eager", metavar="NAME",
                       help="make the call in this mode (default eager; `kl-conformance modes` lists them); with "
                            "--all each script is made in its row's mode")
    source = repro.add_mutually_exclusive_group()
    source.add_argument("--from", dest="run_dir", metavar="RUN_DIR", help="take the case from an earlier run's --out")
    source.add_argument("--cases", dest="case_file", metavar="FILE", help="take the case from a user case file")
    OPTIONS["seed"].add_to(repro, metavar=None, help=f"seed of a generated case (default: the run's, or {DEFAULT_SEED})")
    repro.add_argument("--no-minimize", action="store_true", help="keep the whole case")
    OPTIONS["memory_budget_mb"].add_to(repro, default=DEFAULT_MEMORY_BUDGET_MB, metavar=None, help=budget_help)
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
    selftest.add_argument("--mode", action="append", default=[], metavar="NAME",
                          help="plant the faults into the calls of this mode, e.g. inductor, to check the verdicts "
                               "of a compiled mode (repeatable; default eager; `kl-conformance modes` lists them)")
    selftest.add_argument("--out", default="reports/selftest", help="output directory (default reports/selftest)")
    OPTIONS["timeout_s"].add_to(selftest, default=DEFAULT_TIMEOUT_S, metavar=None, help="time limit of one case")
    selftest.add_argument("--no-cache", action="store_true", help="compute every expectation")
    selftest.add_argument("--force", action="store_true",
                          help="replace what an earlier self-test wrote into --out; without it a non-empty --out "
                               "is refused")
    add_case_options(selftest)

    modes = sub.add_parser("modes", help="list each adapter's modes (eager and its compiled or graph modes) and "
                                         "whether each can run here, and why not")
    modes.add_argument("--framework", metavar="NAME",
                       help="only this adapter (a registered name or package.module:Class; default every "
                            "registered one)")

    report = sub.add_parser("report", help="merge run directories into one report")
    report.add_argument("runs", nargs="+", metavar="DIR", help="run directories (each with results.jsonl)")
    report.add_argument("--out", required=True, help="directory for the merged report (not one of the runs)")
    report.add_argument("--allow-missing", action="store_true",
                        help="a directory without results shows as 'not run' instead of an error")
    report.add_argument("--mode", action="append", dest="modes", default=[], metavar="NAME",
                        help="report only the rows of this mode (repeatable; default every mode the runs hold)")
    add_gate_options(report)
    add_port_options(report)
    return parser


def cmd_cases(spec: Spec, args: argparse.Namespace) -> int:
    count = 0
    for case in select_cases(spec, case_selection(args)):
        count += 1
        if not args.count:
            print(case.id)
    if args.count:
        print(count)
    return EXIT_OK


def cmd_modes(spec: Spec, args: argparse.Namespace) -> int:
    """Each adapter's modes, eager first, each with what it wraps the call in and whether it is usable here.
    Every framework is loaded in a worker process of its own (none is imported here), all at once: a framework
    that cannot be loaded makes each of its modes unusable with its reason."""
    from conformance.core.model import EAGER
    from conformance.judge.profiles import older_than, oldest_release
    from conformance.run.task import WorkerUnavailable

    if args.framework is not None and not is_known(args.framework):
        raise unknown_framework(args.framework)
    names = [args.framework] if args.framework is not None else sorted(known_adapters())
    adapters = {name: get_adapter(name) for name in names}
    pools = {name: WorkerPool(name) for name in names}
    try:
        for pool in pools.values():
            pool.launch()  # the imports run side by side
        for name, adapter in adapters.items():
            try:
                info = pools[name].wait_ready()
                version, unusable, not_loaded = info.version, info.unusable_modes, None
            except WorkerUnavailable as exc:
                version, unusable, not_loaded = None, {}, terminal_line(exc)
            oldest = oldest_release(adapter.name, None, adapter.carried_profile())
            older = version is not None and oldest is not None and older_than(str(version), oldest)
            print(f"{name}" + (f" {terminal_line(version)}" if version else " (not loaded here)")
                  + (f"; oldest release supported: {terminal_line(oldest)}" if oldest else "")
                  + (" (this one is older: what it lacks may show as findings)" if older else ""))
            about = {EAGER: "each call made as a user types it, nothing compiled",
                     **{m.name: m.about for m in adapter.modes}}
            width = max(map(len, about))
            for mode, text in about.items():
                why = not_loaded or (terminal_line(unusable[mode]) if mode in unusable else None)
                state = "usable" if why is None else f"not usable here: {why}"
                print(f"  {mode:<{width}}  {terminal_line(text)}; {state}")
    finally:
        for pool in pools.values():
            pool.close()
    return EXIT_OK


def cmd_report(spec: Spec, args: argparse.Namespace) -> int:
    out = Path(args.out)
    known = check_gate_options(spec, args)
    check_run_dirs(args.runs)  # before any path of theirs is resolved: a symlink loop is one line
    like = like_marks(spec, args, runs=args.runs)
    read_dirs = [("one of the runs to merge", run) for run in args.runs]
    if getattr(args, "like_run", None):
        read_dirs.append(("the run --like-run reads", args.like_run))
    check_out_outside(out, read_dirs)
    inputs = inputs_of(args, *(("a run to merge", run) for run in args.runs))
    check_out_dir(out, force=args.force, inputs=inputs)
    check_runs(args.runs, spec.hash, allow_missing=args.allow_missing, baseline=args.baseline,
               redo="run them again with this harness (kl-conformance run ... --force), or report them with "
                    "the spec they used (--spec)", rebaseline=REBASELINE)  # reads only
    check_modes(load_manifests(args.runs, allow_missing=args.allow_missing)[1], args.modes)
    with OutDirLock() as lock:
        prepare_out_dir(out, force=args.force, lock=lock, inputs=inputs)
        written = merge_runs(args.runs, out, allow_missing=args.allow_missing, baseline=args.baseline, known=known,
                             gates=gates_of(args), like=like, modes=args.modes, shared_drafts=args.draft_shared)
    if args.write_baseline:
        print(baseline_written(write_baseline(out, args.write_baseline), args.write_baseline))
    _, manifests = load_manifests(args.runs, allow_missing=args.allow_missing)
    not_run = [m.get("framework", "?") for m in manifests if m.get("status") == "not_run"]
    for line in written.summary:  # the undocumented causes, largest first, then the counts as the last line
        print(line)
    print(f"merged {len(args.runs)} runs, {written.results} results; {written.counts}"
          + (f"; not run: {terminal_line(', '.join(map(str, not_run)))}" if not_run else "")
          + f". Report: {written.report}")
    return written.decision.print()


def cmd_repro(spec: Spec, args: argparse.Namespace) -> int:
    from conformance.core.generated import GeneratedFolder, WriteFailed
    from conformance.repro.scripts import write_all, write_script
    from conformance.repro.source import CaseSource

    if args.all_to:
        if not args.run_dir:
            raise UsageError("--all needs --from RUN_DIR", where="--all", fix="pass the run directory with --from")
        progress = (lambda done, total: print(f"progress {done} {total}", flush=True)) if args.progress else None
        if args.framework and not is_known(args.framework):
            raise unknown_framework(args.framework)
        folder = GeneratedFolder(args.all_to, "kl-conformance repro --all", option="--all")
        try:
            count, _ = write_all(args.run_dir, spec, folder,
                                 cache_dir=Path(args.cache_dir) if args.cache_dir else None, progress=progress,
                                 framework=args.framework, memory_budget_mb=args.memory_budget_mb)
        except WriteFailed as exc:
            print(f"kl-conformance: {exc}", file=sys.stderr)
            return EXIT_INCOMPLETE
        print(f"{count} reproducers in {args.all_to}")
        return EXIT_OK
    if not args.case_id or not args.framework:
        raise UsageError("repro needs CASE_ID and --framework (or --all OUT_DIR --from RUN_DIR)",
                         where="command line", fix="see `kl-conformance repro --help`")
    if not is_known(args.framework):
        raise unknown_framework(args.framework)
    source = CaseSource(args.run_dir, args.case_file, args.seed, memory_budget_mb=args.memory_budget_mb)
    sys.stdout.write(write_script(spec, args.framework, args.case_id, source, args.api, args.device, args.part,
                                  minimize=not args.no_minimize, mode=args.mode))
    return EXIT_OK


def cmd_selftest(spec: Spec, args: argparse.Namespace) -> int:
    from conformance.report.selftest import render_selftest, selftest_json
    from conformance.selftest.command import NotRun, run_selftest
    from conformance.selftest.gates import GATE_VARIANTS
    from conformance.selftest.variants import VARIANTS

    if not is_known(args.framework):
        raise unknown_framework(args.framework)
    unknown = [v for v in args.variant if v not in VARIANTS and v not in GATE_VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {unknown[0]!r}", where="--variant",
                         fix=f"use one of {sorted([*VARIANTS, *GATE_VARIANTS])}")
    adapter = get_adapter(args.framework)  # unknown --api and --device names are refused before --out exists
    select(args.framework, [a.name for a in adapter.apis], adapter.known_devices, adapter.known_devices,
           args.api, args.device, args.mode, adapter.mode_names())
    cases = list(select_cases(spec, case_selection(args)))
    if not cases:
        raise no_case_matches()
    # its own parts are replaced (each run's by that run's record); nothing else there is removed
    out = check_out_dir(args.out, force=args.force, record_required=False)
    # the self-test owns its output directory: each of its runs replaces that run's earlier output
    options = RunOptions(apis=tuple(args.api), devices=tuple(args.device), modes=tuple(args.mode),
                         timeout_s=args.timeout_s, force=True,
                         cache_dir=None if args.no_cache else default_cache_dir())
    show = (lambda name: print(f"selftest: {name}", file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    try:
        control, reports = run_selftest(spec, args.framework, cases, out, args.variant, options, progress=show)
    except NotRun as exc:
        print(f"kl-conformance: selftest: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    modes = [m for m in dict.fromkeys(args.mode) if m != "eager"]
    text = render_selftest(args.framework + (f" in mode {', '.join(modes)}" if modes else ""), control, reports)
    (out / "selftest.md").write_text(text, encoding="utf-8")
    (out / "selftest.json").write_text(selftest_json(args.framework, control, reports), encoding="utf-8")
    print(text, end="")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_GATE


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
        commands = {"cases": cmd_cases, "report": cmd_report, "repro": cmd_repro, "selftest": cmd_selftest,
                    "modes": cmd_modes}
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
