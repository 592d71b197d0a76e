"""Runs cases through one framework's adapter and writes judged rows as they finish.

Composes the pipeline: cases -> reference (Expected, once per case, shared by every
API and device) -> adapter in a worker process (Observation) -> compare (verdict)
-> results.jsonl. The parent computes references and verdicts while the worker
calls the framework. A crash or a timeout costs one case; --resume skips every
(case, api, device, mode, part) already in results.jsonl (resume.py). run.json's `stages` records each output
stage once it is done (record.STAGES); --resume redoes every stage it does not record.

run_conformance is a sequence of named steps over one RunContext: check the names and build the ledger, check
the output directory and read what --resume finds there (_context); launch the worker pool and learn what the
release offers (_launch), or record that nothing could run (_record_not_run); select the targets, leave out
the modes this machine cannot run, and prepare the output directory and run.json (_select_targets, _prepare);
judge the cases and write their rows (_write_rows); close what the run owns (_release); record how the run
ended (_record_failure, _record_complete).

Owns the order of those steps, what each writes and when, and which of them own the pool and the lock. The
run's values are context.py's (RunOptions, RunSummary, RunContext; RunOptions is imported from here too), each
case's calls and their judging judging.py's, what --resume reads resume.py's, run.json's record record.py's.
Never imports a framework in the parent process (the worker's adapter does), and never imports the
reports.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import conformance
from conformance.adapters.base import Adapter
from conformance.adapters.registry import get_adapter
from conformance.core.case import Case
from conformance.core.defects import release_of
from conformance.core.errors import ConformanceError, UsageError
from conformance.core.manifest import write_manifest
from conformance.core.model import EAGER, Result, Spec, Target
from conformance.core.results import ResultsWriter
from conformance.judge.casejudge import CaseJudge
from conformance.judge.profiles import DeviationLedger, older_than, oldest_release
from conformance.judge.refcache import ReferenceCache
from conformance.run.context import RunContext, RunOptions, RunSummary
from conformance.run.judging import judged_cases, prefetch
from conformance.run.outdir import (RUN_FILES, OutDirLock, check_out_dir, clear_temporary_files, prepare_out_dir,
                                    repair_appended_files)
from conformance.run.pool import WorkerPool
from conformance.run.record import (RunFailed, Terminated, failure_reason, interruption, profiles_digest, provenance,
                                    record_end)
from conformance.run.resume import drop_orphan_details, drop_unfinished_cases, read_resumed
from conformance.run.selection import check_modes
from conformance.run.task import WorkerLost, WorkerUnavailable
from conformance.run.worker import WorkerInfo


def select(framework: str, api_names: Sequence[str], known_devices: Sequence[str], present: Sequence[str],
           apis: Sequence[str], devices: Sequence[str], modes: Sequence[str] = (), mode_names: Sequence[str] = (EAGER,),
           release: str = "") -> list[Target]:
    """The targets to run, mode by mode, then API, then device; unknown names list the valid ones."""
    check_modes(framework, modes, mode_names)
    for name in apis:
        if name not in api_names:
            raise UsageError(f"unknown api {name!r} for framework {framework!r}", where="--api",
                             fix=f"use one of {list(api_names)}")
    for name in devices:
        if name not in known_devices:
            raise UsageError(f"unknown device {name!r} for framework {framework!r}", where="--device",
                             fix=f"use one of {list(known_devices)}")
    absent = [d for d in devices if d not in present]
    if absent:
        raise UsageError(f"device {absent[0]!r} is not present on this machine for {framework}", where="--device",
                         fix=f"use one of the present devices {list(present)}")
    unique = lambda names: list(dict.fromkeys(names))  # `--api A --api A` runs A once
    return [Target(framework, release, api, device, mode) for mode in unique(modes or (EAGER,))
            for api in unique(apis or api_names) for device in unique(devices or present)]


def run_conformance(spec: Spec, framework: str, cases: Iterable[Case], out_dir: str | Path,
                    options: RunOptions = RunOptions(), *, run_info: dict | None = None,
                    progress: Callable[[int], None] | None = None,
                    on_result: Callable[[Case, Result], None] | None = None,
                    pool: WorkerPool | None = None, lock: OutDirLock | None = None,
                    judges: dict[str, CaseJudge] | None = None) -> RunSummary:
    """Run every case on every selected target, appending each judged row to results.jsonl.

    Nothing is written, and the output directory is not created, until every input is
    checked: names, the resumed directory, and the devices the worker finds present.

    Raises
    ------
    UsageError
        for an unknown framework, api or device, a device not present, or an unwritable output directory.
    ResultsError
        when --resume meets a directory made with another framework, spec, profile set, framework version
        or selection of cases.
    RunFailed
        when the run cannot go on (no memory, a full disk); run.json records `failed` and why.

    `pool`, when given, is a worker pool the caller owns (and may have launched already): the run
    starts it, and leaves it running for the caller's further calls (reproducers) and closing. `lock`, when
    given, is the output directory's lock the caller holds until it has written the reports too; else the
    run takes the lock itself, for its own duration. `judges`, when given, holds judges the caller made of some
    of the cases while its worker loaded (judging.judges_until), by case id: the run takes each it uses out.
    """
    ctx = _context(spec, framework, out_dir, options, run_info or {}, pool, lock)
    cases = iter(cases)
    made = judges if judges is not None else {}
    try:
        try:
            prefetched = _launch(ctx, cases, made)
        except WorkerUnavailable as exc:
            _record_not_run(ctx, str(exc))
            return ctx.summary
        _select_targets(ctx)
        _write_rows(ctx, itertools.chain(prefetched, ((case, made.pop(case.id, None)) for case in cases)), on_result)
    except BaseException as exc:
        failure = _record_failure(ctx, exc)
        if failure is None:
            raise
        raise failure from None
    finally:
        _release(ctx)
    _record_complete(ctx)
    if progress is not None:
        progress(ctx.summary.cases)
    return ctx.summary


def _context(spec: Spec, framework: str, out_dir: str | Path, options: RunOptions, run_info: dict,
             pool: WorkerPool | None, lock: OutDirLock | None) -> RunContext:
    """Check the names and build the profile's ledger, check the output directory and read what --resume finds
    there, and make run.json's first record; with the caller's pool and lock, or the run's own. Writes nothing
    and starts nothing."""
    adapter = get_adapter(framework)  # validates names before anything is written
    api_names = [a.name for a in adapter.apis]
    select(framework, api_names, adapter.known_devices, adapter.known_devices, options.apis, options.devices,
           options.modes, adapter.mode_names())
    check_dialects(adapter, spec)
    # by the adapter's own name: `framework` may be "module:Class"
    ledger = DeviationLedger(spec, adapter.name, api_names, options.profiles_dir, like=options.like,
                             mirrors=adapter.mirrored(), carried=adapter.carried_profile())
    out = check_out_dir(out_dir, resume=options.resume, force=options.force, inputs=options.inputs)
    profiles = profiles_digest(options.profiles_dir, adapter.carried_profile(), options.like)
    before = read_resumed(out, spec, framework, run_info, profiles, options.profiles_dir) if options.resume else None
    manifest = {"framework": framework, "spec_hash": spec.hash, "spec": spec.source,
                "harness_version": conformance.__version__, **provenance(), **run_info,
                "profiles_digest": profiles, "deviation_bases": {adapter.name: ledger.bases()},
                **({"like": options.like} if options.like else {}),
                # where the reproduce commands find them again: a row judged beside them is reproduced so
                **({"profiles": str(options.profiles_dir.resolve())} if options.profiles_dir else {})}
    own_lock, own_pool = lock is None, pool is None
    lock = OutDirLock() if own_lock else lock
    pool = WorkerPool(framework, timeout_s=options.timeout_s, compile_cache_dir=options.cache_dir) if own_pool else pool
    cache = ReferenceCache(options.cache_dir) if options.cache_dir is not None else None
    return RunContext(spec, framework, adapter, ledger, options, out, before, manifest, RunSummary(out), pool, lock,
                      cache, own_pool=own_pool, own_lock=own_lock)


def _launch(ctx: RunContext, cases: Iterator[Case], made: dict[str, CaseJudge]) -> list[tuple[Case, CaseJudge | None]]:
    """Launch the worker pool (widened at once where every device it may use is shared), make the first cases'
    expectations while the worker loads the framework (judging.prefetch), and learn what the release offers: the
    prefetched cases, each with its judge.

    Raises WorkerUnavailable when the framework cannot be loaded, or the release has none of the selected APIs.
    """
    pool, adapter, options = ctx.pool, ctx.adapter, ctx.options
    if not pool.launched:
        pool.launch()
    ctx.jobs = min(options.jobs, adapter.max_jobs or options.jobs)
    if ctx.jobs > 1 and _shared(adapter, options.devices or adapter.known_devices):
        pool.widen(ctx.jobs)  # the other workers import the framework beside the first
    # while the worker imports the framework, the first cases' expectations are made
    prefetched = prefetch(ctx, cases, made)
    # a pool the caller has already used for a run (the pytest plugin's, one case a run) is ready
    ctx.info = pool.info if pool.info is not None else pool.wait_ready()
    apis_not_run, notes = _release_gaps(adapter, ctx.info, options, ctx.api_names)
    ctx.summary.apis_not_run, ctx.summary.notes = apis_not_run, notes
    if apis_not_run or notes:
        ctx.manifest.update({**({"apis_not_run": apis_not_run} if apis_not_run else {}),
                             **({"notes": notes} if notes else {})})
    if len(apis_not_run) == len(dict.fromkeys(options.apis or ctx.api_names)):  # the release has none of them
        ctx.manifest["framework_version"] = ctx.info.version
        raise WorkerUnavailable("; ".join(dict.fromkeys(apis_not_run.values())))
    return prefetched


def _record_not_run(ctx: RunContext, reason: str) -> None:
    """The framework could not be loaded, or the release has none of the selected APIs: run.json says
    `not_run` and why, beside an empty results.jsonl (a resumed run keeps its rows)."""
    ctx.summary.not_run = reason
    _prepare(ctx)
    if not ctx.options.resume:
        ResultsWriter(ctx.out).close()
    write_manifest(ctx.out, {**ctx.manifest, "status": "not_run", "reason": reason})


def _select_targets(ctx: RunContext) -> None:
    """Check a resumed run's framework version, select the targets on the devices the worker found, leave out
    the modes this machine cannot run and the APIs the release lacks, then prepare the output directory and
    record in run.json what is run (_prepare)."""
    adapter, options, info = ctx.adapter, ctx.options, ctx.info
    if ctx.before is not None:
        ctx.before.check_version(ctx.out, ctx.framework, info.version)
    # the devices present are known only now; an absent one is refused before anything is written
    ctx.targets = select(ctx.framework, ctx.api_names, adapter.known_devices, info.devices, options.apis,
                         options.devices, options.modes, adapter.mode_names(), str(info.version))
    # a mode this machine cannot run (a package it needs is missing) is not run, with the reason, once
    unusable = {m: why for m in dict.fromkeys(t.mode for t in ctx.targets) if (why := info.unusable_modes.get(m))}
    ctx.targets = [t for t in ctx.targets if t.mode not in unusable and t.api not in ctx.summary.apis_not_run]
    if ctx.jobs > 1 and _shared(adapter, [t.device for t in ctx.targets]):
        ctx.pool.widen(ctx.jobs)  # the devices present, known only now, are all shared: launched now if not before
    # what a run cut by neither --api nor --device would make: runs split so, merged, are judged whole (core/scope.py)
    whole = select(ctx.framework, ctx.api_names, adapter.known_devices, info.devices, (), (), options.modes,
                   adapter.mode_names(), str(info.version))
    ctx.manifest.update(framework_version=info.version, targets=[str(t) for t in ctx.targets],
                        whole_targets=[str(t) for t in whole], status="running",
                        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        modes=list(dict.fromkeys(options.modes or (EAGER,))),
                        **({"modes_not_run": unusable} if unusable else {}))
    _prepare(ctx)


def _write_rows(ctx: RunContext, cases: Iterator[tuple[Case, CaseJudge | None]],
                on_result: Callable[[Case, Result], None] | None) -> None:
    """Judge the cases and append their rows to results.jsonl, each case's flushed before the next is judged.
    A worker that cannot be restarted stops the run: every row so far is written, and --resume continues once
    the cause is fixed."""
    summary, known = ctx.summary, ctx.options.known
    with ResultsWriter(ctx.out, append=ctx.options.resume) as writer:
        try:
            for case, rows in judged_cases(ctx, cases, ctx.done):
                for result, detail in rows:
                    if known is not None:
                        result = known.mark(result)
                    writer.write(result, detail)
                    summary.counts[result.verdict.value] = summary.counts.get(result.verdict.value, 0) + 1
                    if on_result is not None:
                        on_result(case, result)
                writer.flush()  # a case's rows are on disk before the next case's are judged
        except WorkerLost as exc:
            summary.stopped = str(exc)
    summary.restarts = ctx.pool.restarts


def _record_failure(ctx: RunContext, exc: BaseException) -> RunFailed | None:
    """Record in run.json, once it is written, why the run ended before its end: `interrupted` (Ctrl-C,
    SIGTERM) or `failed`. Returns the RunFailed to raise instead of `exc` (no memory, a full disk, a file it
    cannot write), or None where `exc` goes on (an interruption, a closed output pipe, bad input found mid-run,
    or a harness bug, whose traceback is kept)."""
    out, prepared = ctx.out, ctx.prepared
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        if prepared:
            record_end(out, "interrupted", interruption(exc))
        return None
    if isinstance(exc, BrokenPipeError):  # `run ... | head`: the reader has what it wanted
        if prepared:
            record_end(out, "failed", "its output pipe was closed")
        return None
    if isinstance(exc, (MemoryError, OSError)):
        reason = failure_reason(exc, ctx.summary.current)
        if not prepared:
            return RunFailed(reason)
        kept = record_end(out, "failed", reason)
        return RunFailed(reason + ("" if kept else "; run.json could not record it either"))
    if prepared:
        record_end(out, "failed", exc.render() if isinstance(exc, ConformanceError) else
                   f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    return None


def _release(ctx: RunContext) -> None:
    """Close what the run owns, whatever happened: its worker pool (a caller's stays open), the reference cache,
    and its lock of the output directory (a caller's stays held)."""
    try:
        if ctx.own_pool:
            ctx.pool.close()
        if ctx.cache is not None:
            ctx.cache.close()
    finally:
        if ctx.own_lock:
            ctx.lock.release()


def _record_complete(ctx: RunContext) -> None:
    """Record in run.json that the rows are written (`complete`), or that the run `stopped` and why; the
    reference cache's counts, the stages done, the counts of the whole run and the worker's restarts."""
    summary, manifest, cache, before = ctx.summary, ctx.manifest, ctx.cache, ctx.before
    if cache is not None:
        manifest["reference_cache"] = {"dir": str(ctx.options.cache_dir), "hits": cache.hits, "misses": cache.misses,
                                       "explanation_hits": cache.explained_hits,
                                       "explanation_misses": cache.explained_misses,
                                       **({"problem": cache.problem} if cache.problem else {})}
    status = {"status": "stopped", "reason": summary.stopped} if summary.stopped else {"status": "complete"}
    # the later stages a resumed run had done stay done only where it wrote no row
    kept = [s for s in before.stages if s != "rows"] if before is not None and not summary.cases else []
    summary.stages = [] if summary.stopped else ["rows", *kept]
    write_manifest(ctx.out, {**manifest, **status, "stages": summary.stages, "cases": summary.cases + summary.skipped,
                             "counts": summary.all_counts,
                             "worker_restarts": summary.restarts, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


def _shared(adapter: Adapter, devices: Iterable[str]) -> bool:
    """Whether several worker processes can use every one of `devices` at once (Adapter.shared_device_kinds)."""
    return all(device.rpartition(":")[2] in adapter.shared_device_kinds for device in devices)


def _release_gaps(adapter, info: WorkerInfo, options: RunOptions, api_names: list[str]) -> tuple[dict, list[str]]:
    """What the installed release lacks, learnt by the worker: the selected APIs it has not (each with why: they
    are not run), and one line per harness option it did not take and where it is older than its profile's
    `oldest_release`. Gives the parent's adapter the release's arguments (its unsupported_reason reads them)."""
    offer = adapter.offer = info.offer
    missing = offer.missing_apis if offer is not None else {}
    apis_not_run = {a: missing[a] for a in dict.fromkeys(options.apis or api_names) if a in missing}
    notes = list(offer.notes) if offer is not None else []
    oldest = oldest_release(adapter.name, options.profiles_dir, adapter.carried_profile())
    if oldest is not None and older_than(str(info.version), oldest):
        notes.append(f"{adapter.name} {release_of(str(info.version))} is older than {oldest}, the oldest release "
                     "its profile says the adapter supports (oldest_release): what the release lacks may show as "
                     "findings")
    return apis_not_run, notes


def check_dialects(adapter, spec: Spec) -> None:
    """Every API names a dialect of the spec, and takes the input space that dialect states."""
    for api in adapter.apis:
        if api.dialect not in spec.data["dialects"]:
            raise UsageError(f"API {api.name} names dialect {api.dialect!r}, which the spec does not state",
                             file=type(adapter).__module__, where=type(adapter).__name__,
                             fix=f"use one of {sorted(spec.data['dialects'])} (spec: dialects)")
        takes = spec.dialect(api.dialect)["input_space"] == "probability"
        if api.prob_input != takes:
            raise UsageError(f"API {api.name} says prob_input={api.prob_input}, but dialect {api.dialect!r} takes "
                             f"{spec.dialect(api.dialect)['input_space']} input", file=type(adapter).__module__,
                             where=type(adapter).__name__, fix="make the Api agree with spec: dialects")


def _prepare(ctx: RunContext) -> None:
    """Create and lock the output directory (cleared on --force, its half-written last lines cut on --resume),
    record in run.json what the run writes there, then copy the user case files into it."""
    out, options, before, manifest = ctx.out, ctx.options, ctx.before, ctx.manifest
    prepare_out_dir(out, force=options.force, resume=options.resume, lock=ctx.lock, inputs=options.inputs)
    if options.resume:
        clear_temporary_files(out)  # report parts a killed run left: the report is written during the run
        repair_appended_files(out)
        if before is not None:
            drop_unfinished_cases(out, before.done, before.finished)
            drop_orphan_details(out, before.done)
    if before is not None:  # the rows kept, by verdict: run.json counts them with those written now
        ctx.summary.earlier = before.counts()
    case_files = manifest.get("case_files", [])
    ours = set(before.written) if before is not None else set()
    kept = _kept_names(out, case_files, ours)
    made_cases = bool(kept) and not (out / "cases").is_dir()
    manifest["case_files_kept"] = kept
    manifest["written"] = sorted(ours | set(RUN_FILES) | set(manifest.get("written", [])) | set(kept)
                                 | ({"cases/"} if made_cases else set()))
    write_manifest(out, manifest)  # the record first: a run killed from here on leaves nothing unrecorded
    if kept:
        (out / "cases").mkdir(exist_ok=True)
    for path, name in zip(case_files, kept):
        (out / name).write_bytes(Path(path).read_bytes())
    ctx.prepared = True


def _kept_names(out: Path, case_files: Sequence[str], ours: set[str]) -> list[str]:
    """Where the user case files are copied in the run directory, so `repro --from` finds the cases it ran:
    never over a file there that the harness did not write."""
    kept = []
    for i, path in enumerate(case_files):
        name, n = f"cases/{i}-{Path(path).name}", 0
        while (out / name).exists() and name not in ours:
            n += 1
            name = f"cases/{i}-{n}-{Path(path).name}"
        kept.append(name)
    return kept
