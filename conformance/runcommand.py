"""`kl-conformance run`: the order of a run's work once its arguments are checked. Cases are drawn while the
worker imports the framework, the rows stream to disk and into the report, then the reports, the
reproducers and the issue drafts are written, all under the output directory's lock. run.json records each
output stage once done (record.STAGES); a failure, Ctrl-C, SIGTERM or a kill leaves the rows, and --resume
redoes every stage not recorded."""

from __future__ import annotations

import argparse
import contextlib
import math
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

from conformance.adapters.registry import get_adapter, is_known, unknown_framework
from conformance.arguments import (cache_dir_of, case_selection, check_baseline_cases, check_gate_options, gates_of,
                                   inputs_of, like_marks, no_case_matches, read_runs)
from conformance.cases.generate import DEFAULT_SEED
from conformance.core.case import Case
from conformance.core.errors import ConformanceError, UsageError
from conformance.core.model import Result, Spec
from conformance.core.text import terminal_line
from conformance.report.baselinefile import baseline_written, write_baseline
from conformance.report.gate import EXIT_INCOMPLETE
from conformance.report.writer import ReportFeed, check_out_outside, write_report
from conformance.run.jobs import default_jobs
from conformance.run.outdir import REPORT_FILES, STAGING_PREFIX, OutDirLock, check_out_dir
from conformance.run.context import DEFAULT_TIMEOUT_S
from conformance.run.pool import WorkerPool
from conformance.run.record import (RunFailed, Terminated, add_written, failure_reason, interruption, record_end,
                                    record_stage)
from conformance.run.runner import RunOptions, run_conformance
from conformance.run.selection import (MEANING_OPTIONS, CaseSelection, file_digest, select_cases, select_lazily,
                                      selected_shard)
from conformance.version import checkout_commit, source_root

DETAIL_LIMIT = 5  # `run --only` prints full details for at most this many cases


# a selection up to this many cases is kept once drawn; a larger one is drawn as the run takes it (flat memory)
KEEP_CASES = 20_000


REPRO_TIMEOUT_S = 900  # minimising a run's reproducers stops after this long


def cmd_run(spec: Spec, args: argparse.Namespace, early_worker: WorkerPool | None = None) -> int:
    if not is_known(args.framework):
        raise unknown_framework(args.framework)
    if args.resume and args.force:
        raise UsageError("--resume and --force contradict each other", where="command line",
                         fix="--resume continues the run in --out; --force starts it again")
    shard = selected_shard(case_selection(args))
    known = check_gate_options(spec, args, seed=args.seed)
    if args.baseline is not None:  # before anything is written: the baseline must hold these cases' values
        check_baseline_cases(Path(args.baseline), spec, case_selection(args))
    port = get_adapter(args.framework) if args.like else None
    like = like_marks(spec, args, mirrors={port.name: port.mirrored()} if port is not None else None)
    check_out_outside(args.out, read_runs(args))
    check_out_dir(args.out, resume=args.resume, force=args.force, inputs=inputs_of(args))
    # conformance/entry.py may have started a worker already, from its own quick reading of the command line.
    # Use it only if that reading agrees with the arguments checked here; otherwise close it.
    early = early_worker
    if early is not None and (early.framework, early.compile_cache_dir) != (args.framework, cache_dir_of(args)):
        early.close()
        early = None
    # One worker serves the run and then the reproducers, so the framework is imported once. The output
    # directory's lock is held until the reports and reproducers are written.
    with _sigterm_as_exception(), OutDirLock() as lock, \
            early or WorkerPool(args.framework, compile_cache_dir=cache_dir_of(args)) as pool:
        pool.timeout_s = args.timeout_s
        if not pool.launched:
            pool.launch()  # the framework's import is slow: it runs while the cases are drawn and checked
        return _run_with(spec, args, known, shard, pool, lock, like)


def _run_with(spec: Spec, args: argparse.Namespace, known, shard, pool, lock: OutDirLock, like=None) -> int:
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
        raise no_case_matches()
    show_details = bool(args.only) and total <= DETAIL_LIMIT
    progress = _progress_bar(total) if (sys.stderr.isatty() and not args.no_progress) else None
    selection = selection_record(selected, known, args.part, args.api, args.device, get_adapter(args.framework).name,
                                 args.mode, args.timeout_s)
    run_info = {"seed": args.seed, "suite": args.suite, "samples": args.samples, "case_files": args.cases,
                "only": args.only, "shard": selection["shard"], "known": args.known, "selection": selection,
                "command": " ".join(sys.argv), "commit": checkout_commit(source_root()),
                "written": [*REPORT_FILES, *(["baseline.json"] if args.baseline else [])],
                **({"mirrors": get_adapter(args.framework).mirrored()} if args.like else {})}
    options = RunOptions(apis=args.api, devices=args.device, modes=args.mode, parts=args.part, timeout_s=args.timeout_s,
                         memory_budget_mb=args.memory_budget_mb, resume=args.resume, force=args.force, known=known,
                         profiles_dir=Path(args.profiles) if args.profiles else None, like=args.like,
                         cache_dir=cache_dir_of(args), inputs=inputs_of(args),
                         jobs=min(args.jobs, total) if args.jobs else default_jobs(args.mode, total))
    shown = _progress_and_details(progress, show_details)
    # While the rows are written, the report's pass reads them and the rows that will need a reproducer are
    # kept. A resumed run's earlier rows are only on disk, so then both the report and the reproducers read
    # the rows back from the file instead, as they do when the rows are marked shared or own (--like-run) once all
    # are written.
    needing: list[Result] | None = None if args.no_repro or args.resume else []
    marking = like is not None and like.marking
    feed = None if args.resume or marking else ReportFeed(Path(args.out), known, args.baseline, gates_of(args), like)
    from conformance.repro.scripts import needs_reproducer

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
        if marking:
            like.write_marks(summary.out_dir)
        written = write_report(summary.out_dir, [summary.out_dir], baseline=args.baseline, known=known, fed=feed,
                               gates=gates_of(args), drafts=False, like=like, shared_drafts=args.draft_shared)
        if "rows" in summary.stages:
            record_stage(summary.out_dir, "reports")
        # a resumed run writes the reproducers its earlier command did not record writing, from the rows on disk
        if not args.no_repro and "rows" in summary.stages and "reproducers" not in summary.stages:
            if not summary.all_divergences or _write_reproducers(
                    spec, args, summary.out_dir, pool, show_progress=progress is not None,
                    results=needing):
                record_stage(summary.out_dir, "reproducers")
        _write_drafts(summary.out_dir, known, shared=args.draft_shared, defects=written.defects)
        if "rows" in summary.stages:
            record_stage(summary.out_dir, "drafts")
        wrote_baseline = _write_baseline(args, summary, written.decision.code)
    except (KeyboardInterrupt, Terminated) as exc:  # the rows are complete; --resume writes the reports again
        record_end(summary.out_dir, "interrupted", interruption(exc) + " while writing the reports")
        raise
    except (MemoryError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        reason = "writing the reports: " + failure_reason(exc)
        record_end(summary.out_dir, "failed", reason)
        return _failed(args.out, reason, None)
    for note in summary.notes:  # the harness's own options that this release could not take
        print(f"kl-conformance: note: {terminal_line(note)}", file=sys.stderr)
    if wrote_baseline:
        print(wrote_baseline)
    if summary.not_run:
        print(f"{args.framework}: not run: {terminal_line(summary.not_run)}. Report: {written.report}")
        return written.decision.print()
    # pytest's way: the undocumented causes, largest first, then the counts as the last line
    for line in written.summary:
        print(line)
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary.counts.items()))
    extra = (f"; {summary.skipped} cases already done" if summary.skipped else "") + \
        (f"; {summary.unspoken} cases in an input space its APIs do not take (no rows)" if summary.unspoken
         else "") + \
        (f"; {summary.partless} cases with none of the selected parts (no rows)" if summary.partless else "") + \
        (f"; worker restarted {summary.restarts} times" if summary.restarts else "")
    print(f"{args.framework}: {summary.cases} cases, {sum(summary.counts.values())} results ({counts}); "
          f"{written.counts}{extra}. Report: {written.report}")
    if summary.stopped:
        print(f"kl-conformance: the run stopped before its end: {terminal_line(summary.stopped)}. The results so "
              f"far are in {summary.out_dir}; continue with --resume once the cause is fixed", file=sys.stderr)
    return written.decision.print()


def _write_baseline(args: argparse.Namespace, summary, code: int) -> str:
    """--write-baseline: the compact baseline of a run that judged every selected case (one that did not run or
    stopped early would drop rows a later gate then calls added) and that its gates passed (`code`, the decision's
    exit code: a failed gate's rows written as the baseline would pass the same build next time); returns the line
    that says it was written."""
    if not args.write_baseline:
        return ""
    unfinished = [terminal_line(args.framework)] if summary.not_run or summary.stopped else []
    return write_accepted_baseline(summary.out_dir, args.write_baseline, code, unfinished)


def write_accepted_baseline(run_dir: Path, path: str, code: int, unfinished: Sequence[str] = ()) -> str:
    """The compact baseline of `run_dir` written to `path`, where the command's gates passed (`code`, its exit
    code) and every run it holds finished (`unfinished` names those that did not); else one line saying why not.
    Returns the line that says it was written, or ""."""
    why = (f"the {unfinished[0]} run did not judge every selected case" if unfinished else
           f"a gate failed (exit {code}), and a baseline records an accepted build" if code else "")
    if why:
        print(f"kl-conformance: --write-baseline: {terminal_line(path)} not written: {why}", file=sys.stderr)
        return ""
    return baseline_written(write_baseline(run_dir, path), path)


def _write_drafts(out: Path, known, shared: bool = False, defects=None) -> None:
    """The run's issue drafts, written once its reproducers exist, so that each quotes its example's script;
    then recorded in run.json, so that --force removes them. `shared` (--draft-shared): also the defects a port
    shares with the recorded run of the framework it is judged like. `defects`: those its report gathered."""
    from conformance.core.rundirs import load_manifests
    from conformance.report.drafts import ISSUES_DIR, iter_drafts, write_drafts

    write_drafts(out, [out], load_manifests([out])[1], known, shared=shared, defects=defects)
    names = [f"{ISSUES_DIR}/{p.name}" for p in iter_drafts(out)]
    add_written(out, names + ([f"{ISSUES_DIR}/"] if names else []))


def _failed(out: str, reason: str, progress) -> int:
    """The one line of a run that could not go on; its rows so far are kept for --resume."""
    if progress is not None:
        sys.stderr.write("\n")
    print(f"kl-conformance: {out}: the run failed: {reason}", file=sys.stderr)
    return EXIT_INCOMPLETE


def _write_reproducers(spec: Spec, args: argparse.Namespace, out: Path, pool, show_progress: bool,
                       results: list[Result] | None) -> bool:
    """Reproducers for the run's undocumented divergences, minimised by the run's own worker (the framework
    is loaded once; a crash or hang there costs one call, never the results and reports written). They
    read the run's expectations from the reference cache, and their progress goes on the bar. Past
    REPRO_TIMEOUT_S the rest keep their whole case. `results`: the rows that need one, kept as the run
    wrote them (None: read them back from `out`). They are written into a temporary directory, then moved
    into OUT/repro and recorded in run.json: a run killed meanwhile leaves only a temporary directory, which
    --resume and --force remove. False where they could not be written (a warning says why)."""
    from conformance.repro.scripts import write_all
    from conformance.run.task import WorkerLost

    cache = cache_dir_of(args)
    bar = (lambda done, total: _draw_bar(done, total, "reproducers")) if show_progress else None
    staging = Path(tempfile.mkdtemp(dir=out, prefix=STAGING_PREFIX))
    try:
        try:
            _, whole = write_all(str(out), spec, staging, cache_dir=cache, progress=bar, pool=pool,
                                 deadline=time.monotonic() + REPRO_TIMEOUT_S, framework=args.framework,
                                 results=results, memory_budget_mb=args.memory_budget_mb, per_defect=True,
                                 profiles_dir=Path(args.profiles) if args.profiles else None, like=args.like)
        except (WorkerLost, ConformanceError) as exc:
            print(f"warning: reproducers not written ({exc})", file=sys.stderr)
            return False
        finally:
            if show_progress:
                sys.stderr.write("\n")
        _publish(out, staging, "repro")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if whole:
        print(f"warning: minimising reproducers took over {REPRO_TIMEOUT_S} s; {whole} keep their whole case "
              f"(kl-conformance repro minimises one)", file=sys.stderr)
    return True


def _publish(out: Path, staging: Path, folder: str) -> None:
    """Move the files written into `staging` into OUT/`folder`, recorded in run.json before they move (a run
    stopped among the moves leaves none that --resume and --force take for the user's); a file of the same name
    there that the harness did not write is kept, and the new one is not published (one warning)."""
    from conformance.run.outdir import recorded

    ours = set(recorded(out)[0])
    target = out / folder
    moving, kept = [], []
    for path in sorted(staging.iterdir()):
        name = f"{folder}/{path.name}"
        if (out / name).exists() and name not in ours:
            kept.append(name)
        else:
            moving.append(path)
    add_written(out, [f"{folder}/{path.name}" for path in moving] + ([] if target.is_dir() else [f"{folder}/"]))
    target.mkdir(exist_ok=True)
    for path in moving:
        os.replace(path, target / path.name)
    if kept:
        print(f"warning: {len(kept)} reproducers not written: {kept[0]} is a file kl-conformance did not write "
              f"there", file=sys.stderr)


def selection_record(selected: CaseSelection, known, parts: Sequence[str], apis: Sequence[str],
                     devices: Sequence[str], adapter_name: str, modes: Sequence[str] = (),
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """run.json's `selection`: what --resume must find again, and what the gates read (core/scope.py): the
    parts, APIs and devices asked for, the name the rows carry, and the options by which the run selected less
    than the whole suite. Also what the Python API's runs record (conformance/api.py)."""
    shard = selected_shard(selected)
    cut = {"--only": bool(selected.only), "--shard": bool(selected.shard), "--seed": selected.seed != DEFAULT_SEED,
           "--part": bool(parts), "--api": bool(apis), "--device": bool(devices),
           **{option: bool(getattr(selected, name)) for name, option in MEANING_OPTIONS.items()}}
    return {"seed": selected.seed, "suite": selected.suite, "samples": selected.samples,
            "case_files": [file_digest(path) for path in selected.case_files], "only": list(selected.only),
            "shard": str(shard) if shard else None, "known": known.digest if known else None,
            **{name: list(getattr(selected, name)) for name in MEANING_OPTIONS},
            "parts": list(parts), "apis": list(apis), "devices": list(devices), "adapter": adapter_name,
            "modes": list(dict.fromkeys(modes)) or ["eager"],
            # what decides verdicts beside the cases: a case refused, a call timed out ("inf": no limit)
            "memory_budget_mb": selected.memory_budget_mb, "timeout_s": "inf" if math.isinf(timeout_s) else timeout_s,
            "narrowed_by": [option for option, on in cut.items() if on]}


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


def _print_details(case: Case, result: Result) -> None:
    """For a rerun of a few cases: everything needed to see the divergence (text from the case file and the
    framework as plain lines)."""
    with np.printoptions(precision=17, threshold=64):
        print(f"case {terminal_line(case.id)}\n  params: {case.params}\n  dtype: {case.dtype}  layout: {case.layout}")
        print(f"  input:  {case.input!r}\n  target: {case.target!r}")
        print(f"  {result.framework} / {result.api} / {result.device}: {result.verdict.value}"
              + (f" ({terminal_line(result.cause)})" if result.cause else ""))
        if result.message:
            print(f"  {terminal_line(result.message)}")
        if result.warnings:
            print(f"  warnings: {terminal_line(list(result.warnings))}")


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
