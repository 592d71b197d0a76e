"""The command line: `kl-conformance run | cases | report | repro | selftest | modes`; also `python -m conformance`.

Exit codes (conformance/report/gate.py): 0 done (divergences are findings, not failures); 1 a gate
failed (--strict, --fail-on-new, a stale known-findings entry); 2 bad usage, a bad spec, case
file or results directory (one message naming the file, the place and the fix; nothing
written); 3 with any gate, a framework did not run, a run stopped early, or nothing was judged; and always
when a run failed (no memory, a full disk: run.json says `failed` and why, --resume continues); 130 Ctrl-C, 143
SIGTERM (run.json says `interrupted`). One command writes into one --out at a time (a lock there); a second is exit 2.

Owns the order in which each command does its work (`run`'s is in runcommand.py; the grammar of the command
line is parser.py, the arguments the commands share arguments.py); running, judging, reporting and writing
reproducers live in their own modules, never here.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import Sequence

from conformance.adapters.base import FrameworkUnavailable
from conformance.adapters.registry import get_adapter, is_known, known_adapters, unknown_framework
from conformance.arguments import (REBASELINE, case_selection, check_gate_options, gates_of, inputs_of, like_marks,
                                   no_case_matches, read_runs)
from conformance.core.defects import FRAMEWORK_NAME
from conformance.core.errors import ConformanceError, UsageError, unusable_path
from conformance.core.model import Spec
from conformance.core.rundirs import check_run_dirs, load_manifests
from conformance.core.specload import load_spec
from conformance.core.text import terminal_line
from conformance.judge.refcache import default_cache_dir
from conformance.parser import build_parser
from conformance.reference.statements import verify_formulas
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from conformance.report.provenance import check_runs
from conformance.report.writer import check_modes, check_out_outside, merge_runs
from conformance.run.outdir import OutDirLock, check_out_dir, prepare_out_dir
from conformance.run.record import Terminated
from conformance.run.pool import WorkerPool
from conformance.run.runner import RunOptions, select
from conformance.run.selection import select_cases
from conformance.runcommand import cmd_run, write_accepted_baseline

EXIT_TERMINATED = 143  # SIGTERM, as a shell reports it


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
    check_out_outside(out, [*(("one of the runs to merge", run) for run in args.runs), *read_runs(args)])
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
    _, manifests = load_manifests(args.runs, allow_missing=args.allow_missing)
    if args.write_baseline:
        unfinished = [terminal_line(str(m.get("framework", "?"))) for m in manifests if m.get("status") != "complete"]
        wrote = write_accepted_baseline(out, args.write_baseline, written.decision.code, unfinished)
        if wrote:
            print(wrote)
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
    from conformance.repro.source import CaseSource, run_manifest

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
                                 framework=args.framework, memory_budget_mb=args.memory_budget_mb,
                                 profiles_dir=Path(args.profiles) if args.profiles else None,
                                 like=_repro_like(spec, args, run_manifest(args.run_dir)))
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
    try:
        script = write_script(spec, args.framework, args.case_id, source, args.api, args.device, args.part,
                              minimize=not args.no_minimize, mode=args.mode,
                              profiles_dir=Path(args.profiles) if args.profiles else None, run_dir=args.run_dir,
                              like=_repro_like(spec, args, run_manifest(args.run_dir) if args.run_dir else None))
    except FrameworkUnavailable as exc:  # the script runs the call once to minimise it: it needs the framework
        raise UsageError(f"{args.framework} cannot be loaded here: {exc}", where="--framework",
                         fix="write the reproducer where it loads (its tox environment, or the venv it is "
                             "installed in), as `repro --all` asks") from None
    sys.stdout.write(script)
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


def _repro_like(spec: Spec, args: argparse.Namespace, manifest: dict | None) -> str | None:
    """The framework a reproducer's call is judged like: --like, checked as `run` checks it, or the --from run's.
    A --like other than the run's is refused: the row was judged beside the run's profile."""
    from conformance.arguments import like_marks

    recorded = _like_of(manifest) if manifest is not None else None
    if args.like is None:
        return recorded
    like_marks(spec, args)
    if manifest is not None and args.like != recorded:
        raise UsageError(f"the run was judged {'like ' + recorded if recorded else 'by its own profile'}, not like "
                         f"{args.like!r}", file=str(args.run_dir), where="--like",
                         fix="leave out --like: a reproducer from a run is judged as the run judged its rows")
    return args.like


def _like_of(manifest: dict) -> str | None:
    """The framework a run was judged like, where run.json names one by a plain name (its word never becomes a
    path: a profile is looked up by it, as `<name>.yaml`)."""
    like = manifest.get("like")
    return like if isinstance(like, str) and FRAMEWORK_NAME.fullmatch(like) else None


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
    except (OSError, RuntimeError) as exc:
        problem = unusable_path(exc, argv)
        if problem is not None and not debug:
            print(f"kl-conformance: {problem}", file=sys.stderr)
            return EXIT_USAGE
        if debug or not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a run has recorded it in run.json (_run_with); `report` writes each file atomically: none is half-written
        print("kl-conformance: no space left on the device" + (f" ({exc.filename})" if exc.filename else "")
              + "; free some and run the command again", file=sys.stderr)
        return EXIT_INCOMPLETE
