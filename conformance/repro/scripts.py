"""Writes reproducer scripts: one per undocumented divergence of a run (write_all), or one for a case (write_script).

Each script needs only one framework (and NumPy, for Python ones): the adapter writes its text, for the case
source.py finds, as minimise.py minimised it (a run's reproducers of a compiled mode keep their whole case:
each candidate would compile again). Runs in the framework's environment.

Writes scripts into a run's staging folder (the run's own reproducers), or into a folder of their own
(`repro --all OUT`: core/generated.py, never a run's folder); never rewrites the results themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

import conformance
from conformance.adapters.base import Adapter, in_mode, script_devices
from conformance.adapters.registry import get_adapter, known_adapters
from conformance.core.case import Case
from conformance.core.defects import BESIDE_PROFILE
from conformance.core.errors import ResultsError, UsageError
from conformance.core.generated import GeneratedFolder
from conformance.core.model import EAGER, Result, Spec, Verdict
from conformance.core.rundirs import script_name, snippet_name
from conformance.judge.compare import shown_at
from conformance.report.defects import Defects
from conformance.repro.minimise import Job, expectations, in_process, judged, minimise_all, through_worker
from conformance.repro.source import CaseSource, quoted, run_manifest
from conformance.run.pool import WorkerPool
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, check_modes, needs_mb
from conformance.run.task import WorkerUnavailable


def write_all(run_dir: str, spec: Spec, out_dir: Path | GeneratedFolder, cache_dir: Path | None = None,
              progress: Callable[[int, int], None] | None = None, pool: WorkerPool | None = None,
              deadline: float | None = None, framework: str | None = None,
              results: Iterable[Result] | None = None,
              memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, per_defect: bool = False,
              profiles_dir: Path | None = None, like: str | None = None) -> tuple[int, int]:
    """Write a reproducer for every undocumented divergence of a run into `out_dir`, minimised where the row is
    eager (a row of a compiled mode keeps its whole case: minimising it would compile each candidate's shape).
    `per_defect`: one for each undocumented defect only, of its example (its simplest row), with the defect's
    snippet beside it (rundirs.snippet_name), which its issue draft shows.

    `out_dir` is a folder of the reproducers' own (`repro --all OUT`: checked before anything starts, each file
    recorded there, those of an earlier `repro --all` not written again removed), or a plain folder the caller
    owns (the run's staging folder). `framework` is the adapter as the run named it (a "module:Class" too); by
    default the one the run's manifest names. The framework is called by `pool` (the run's worker), else by a
    worker started here and always ended here. Expectations come from the reference cache in `cache_dir` (the
    run's own are there already). `results` are the run's rows where the caller holds them already (the run that
    just wrote them), else they are read from `run_dir`. A generated case over `memory_budget_mb` is refused
    before its values are drawn. `progress(done, total)` follows the minimisation. A row the run judged beside
    the framework's profile (a divergence that remains where the profile documents another) is judged, minimised
    and written against the spec with the API's declared deviations applied, read from `profiles_dir` (default:
    the shipped profiles) and judged `like` where the run was. Returns (reproducers written, those left whole at
    `deadline`).

    Raises
    ------
    UsageError
        on bad input, the folder included, before the worker starts.
    WriteFailed
        when a reproducer cannot be written into a folder of their own (a full disk); every file there is whole.
    """
    from conformance.core.results import iter_results
    from conformance.judge.refcache import ReferenceCache

    folder = out_dir if isinstance(out_dir, GeneratedFolder) else None
    if folder is not None:
        folder.check()
    rows = [r for r in (iter_results(run_dir) if results is None else results) if needs_reproducer(r)]
    if per_defect:
        rows = [d.example for d in Defects(rows).ordered()]
    if not rows:
        if folder is not None:
            folder.finish()  # an earlier --all's reproducers are not this run's
        return 0, 0
    if framework is None:
        # only a registered adapter is imported on a run directory's word ("module:Class" runs any module)
        framework = run_manifest(run_dir).get("framework") or rows[0].framework
        if framework not in known_adapters():
            raise ResultsError(f"the run names the adapter {quoted(framework)}, which is not registered",
                               file=str(Path(run_dir) / "run.json"), where="framework",
                               fix="name the adapter with --framework (only then is a module:Class imported)")
    adapter = get_adapter(framework)  # not loaded here: it names the APIs and writes the scripts' text
    apis = {a.name: a for a in adapter.apis}
    for r in rows:
        if r.api not in apis or r.device not in adapter.known_devices or r.mode not in adapter.mode_names():
            raise ResultsError(f"a row of case {quoted(r.case_id)} names api {quoted(r.api)} on device "
                               f"{quoted(r.device)} in mode {quoted(r.mode)}, which adapter {framework} does not have",
                               file=str(Path(run_dir) / "results.jsonl"), where=f"case {quoted(r.case_id)}",
                               fix="write the reproducers with the adapter that made the run (--framework)")
    if type(adapter).repro_source is Adapter.repro_source and type(adapter).repro_script is Adapter.repro_script:
        raise UsageError(f"adapter {framework} writes no reproducers", where=type(adapter).__name__,
                         fix="give the adapter a repro_source (adapters/base.py says what it returns)")
    own_pool = pool is None
    if own_pool:
        pool = WorkerPool(framework, compile_cache_dir=cache_dir)
    cache = None
    written = whole = 0
    try:  # a worker started here is ended whatever happens, so that the command's process can exit
        if own_pool:
            try:
                pool.start()
            except WorkerUnavailable as exc:
                raise UsageError(f"{framework} cannot be loaded here: {exc}", file=str(run_dir), where="--from",
                                 fix="write the reproducers in the environment that made the run") from None
        unusable = {m: why for m in dict.fromkeys(r.mode for r in rows) if (why := pool.info.unusable_modes.get(m))}
        if unusable:
            mode, why = next(iter(unusable.items()))
            raise UsageError(f"mode {mode} of {framework} cannot run here: {quoted(why, 200)}", file=str(run_dir),
                             where="--from", fix="write the reproducers in the environment that made the run")
        if folder is None:
            out_dir.mkdir(parents=True, exist_ok=True)
        cache = ReferenceCache(cache_dir) if cache_dir is not None else None
        expect = expectations(cache)
        source = CaseSource(run_dir, None, None, memory_budget_mb)
        if any(BESIDE_PROFILE in r.message for r in rows):  # judged by the profiles the run judged them by
            _check_profiles(run_dir, adapter, profiles_dir, like)
        beside = _beside_profile(spec, adapter, profiles_dir, like)
        for group in within_budget(rows, source.get, memory_budget_mb):
            # a compiled mode's row keeps its whole case: each candidate would be a shape that mode compiles
            # again; `repro CASE --mode M` minimises one on demand
            jobs = [Job(case, apis[r.api], r.device, r.part, verdict=r.verdict, mode=r.mode, minimize=r.mode == EAGER,
                        beside=beside(r, case), shown=_element(r, case)) for r, case in group]
            shown = None if progress is None else (lambda done, before=written: progress(before + done, len(rows)))
            minimise_all(jobs, through_worker(pool), expect, spec, deadline, shown)
            scripts = {}
            for (r, _), job in zip(group, jobs):
                script, suffix = _render(adapter, job, spec)
                scripts[script_name(r.case_id, r.api, r.device, r.part, suffix, r.mode)] = script
                snippet = in_mode(adapter.snippet, job.mode, job.final, job.api, job.device, job.part,
                                  job.judged[0]) if per_defect else None
                if snippet is not None:
                    scripts[snippet_name(r.defect)] = snippet
            if folder is not None:
                folder.write(scripts)
            else:
                for name, script in scripts.items():
                    (out_dir / name).write_text(script, encoding="utf-8")
            written += len(jobs)
            whole += sum(1 for j in jobs if j.final is j.case and j.order)  # cut short by the deadline
        if folder is not None:
            folder.finish()
        if progress is not None:
            progress(written, len(rows))
    finally:
        if cache is not None:
            cache.close()
        if own_pool:
            pool.close()
    return written, whole


def within_budget(rows: Sequence[Result], case_of: Callable[[str], Case],
                  memory_budget_mb: float) -> Iterator[list[tuple[Result, Case]]]:
    """The rows with their cases, in groups whose jobs together fit the memory budget: minimising holds each
    job's observation and expectation until its script is written, so many cases each within the budget
    must not be held at once. A group holds at least one row."""
    group: list[tuple[Result, Case]] = []
    cases: dict[str, Case] = {}
    used_mb = 0.0
    for r in rows:
        case = cases.get(r.case_id) or case_of(r.case_id)
        need_mb = needs_mb(case)
        if group and used_mb + need_mb > memory_budget_mb:
            yield group
            group, cases, used_mb = [], {}, 0.0
        cases[r.case_id] = case
        group.append((r, case))
        used_mb += need_mb
    if group:
        yield group


def needs_reproducer(result: Result) -> bool:
    """An undocumented divergence that a call can show again (a crash or a hang is the run's own record)."""
    return result.verdict.is_divergence and result.verdict.is_answered and not result.documented


def write_script(spec: Spec, framework: str, case_id: str, source: CaseSource, api_name: str | None = None,
                 device: str = "cpu", part: str = "forward", *, minimize: bool = True, mode: str = EAGER,
                 profiles_dir: Path | None = None, run_dir: str | None = None, like: str | None = None) -> str:
    """The reproducer's source text for the case `source` holds under `case_id`, its call made in `mode`. A call
    whose undocumented divergence a run would judge beside its API's profile (what remains beside the deviations
    the profile states) is judged so here too, and its script says so: the command a defect prints for its example
    must give the finding, not the documented behaviour beside it. From a run (`run_dir`, judged `like` a
    framework where it says so), the profiles must be those it recorded judging by, as for `repro --all`."""
    adapter = get_adapter(framework)
    check_modes(framework, [mode], adapter.mode_names())
    api_names = [a.name for a in adapter.apis]
    if api_name is not None and api_name not in api_names:
        raise UsageError(f"unknown api {api_name!r} for {framework!r}", where="--api", fix=f"use one of {api_names}")
    api = adapter.api(api_name or api_names[0])
    if device not in script_devices(adapter.known_devices):
        raise UsageError(f"unknown device {device!r} for {framework!r}", where="--device",
                         fix=f"use one of {list(script_devices(adapter.known_devices))}")
    case = source.get(case_id)
    why = adapter.unsupported_reason(case, api) or in_mode(adapter.unsupported_part, mode, api, part)
    if why:
        raise UsageError(f"{api.name} cannot express case {case_id!r} ({part}): {why}", where="CASE_ID",
                         fix="pick a case and part the report shows for this API (its rows are not `unsupported`)")
    from conformance.judge.profiles import DeviationLedger

    # read before the framework is: a --profiles DIR that cannot be read is refused whatever the call answers
    ledger = DeviationLedger(spec, adapter.name, api_names, profiles_dir, like=like, mirrors=adapter.mirrored(),
                             carried=adapter.carried_profile())
    if run_dir is not None:
        _check_profiles(run_dir, adapter, profiles_dir, like)
    adapter.load()
    adapter.learn_release()  # the call the reproducer makes is the one this release takes
    why = adapter.mode_unavailable(mode) if mode != EAGER else None
    if why:
        raise UsageError(f"mode {mode} of {framework} cannot run here: {quoted(why, 200)}", where="--mode",
                         fix="write the reproducer where the mode's packages are installed, or pick another mode")
    why = adapter.offer.missing_apis.get(api.name) or adapter.unsupported_reason(case, api)  # now with its release
    if why:
        raise UsageError(f"{api.name} cannot make case {case_id!r} here: {quoted(why, 200)}", where="--api",
                         fix="write the reproducer where a release of the framework that has it is installed")
    expect = expectations()
    job = Job(case, api, device, part, verdict=None, minimize=minimize, mode=mode)
    observe = in_process(adapter)
    observed = next(iter(observe([job.call(case)])))
    job.beside = _beside_call(spec, ledger, job, observed)
    job.observed, job.judged = observed, judged(job, case, observed, expect, spec)  # minimise_all's first step
    job.verdict = job.judged[1].verdict
    minimise_all([job], observe, expect, spec)
    return _render(adapter, job, spec)[0]


def _beside_call(spec: Spec, ledger, job: Job, observed) -> tuple[Spec, tuple[str, ...]] | None:
    """For a call the run would judge beside its API's profile (run/judging.py: an undocumented finding that the
    declared deviations change), the spec with them applied and their ids; None for any other."""
    from conformance.judge.casejudge import CaseJudge

    judge, api, dialect = CaseJudge(job.case, spec), job.api.name, job.api.dialect
    if not judge.judgement(job.part, dialect, observed).verdict.is_finding:
        return None
    if judge.documented(ledger, api, job.part, dialect, observed, job.mode, job.device) or \
            judge.beside_profile(ledger, api, job.part, dialect, observed, job.mode, job.device) is None:
        return None
    return _profile_spec(ledger, api, job.mode, job.device, job.case, job.part)


def _element(r: Result, case: Case) -> int | None:
    """The element of the case's input the row's message shows (flat index), where its answer has the input's
    shape: the element a minimised script should show, so that its numbers are the row's."""
    at = shown_at(r.message)
    if at is None or len(at) != case.input.ndim or any(not 0 <= i < n for i, n in zip(at, case.input.shape)):
        return None
    return int(np.ravel_multi_index(at, case.input.shape))


def _check_profiles(run_dir: str, adapter, profiles_dir: Path | None, like: str | None) -> None:
    """The deviation profiles here are those the run recorded judging by (run.json's profiles_digest, where it
    has one): a row judged beside them is only reproduced as it was judged by the same ones."""
    from conformance.run.record import profiles_digest

    recorded = run_manifest(run_dir).get("profiles_digest")
    if isinstance(recorded, str) and recorded != profiles_digest(profiles_dir, adapter.carried_profile(), like):
        raise UsageError("the run judged its rows by other deviation profiles than these", file=str(run_dir),
                         where="--profiles", fix="pass the --profiles DIR the run was given (and write the "
                         "reproducers where its --like framework's profile is)")


def _beside_profile(spec: Spec, adapter, profiles_dir: Path | None, like: str | None):
    """beside(row, case): for a row judged beside its framework's profile, the spec with the deviations its API
    declares for the call applied and their ids (what the run judged it by); None for every other row."""
    from conformance.judge.profiles import DeviationLedger

    ledger = None

    def beside(r: Result, case: Case) -> tuple[Spec, tuple[str, ...]] | None:
        nonlocal ledger
        if BESIDE_PROFILE not in r.message:
            return None
        if ledger is None:
            ledger = DeviationLedger(spec, adapter.name, [a.name for a in adapter.apis], profiles_dir, like=like,
                                     mirrors=adapter.mirrored(), carried=adapter.carried_profile())
        # None where the profile no longer declares what the run applied: the spec alone
        return _profile_spec(ledger, r.api, r.mode, r.device, case, r.part)
    return beside


def _profile_spec(ledger, api: str, mode: str, device: str, case: Case, part: str) -> tuple[Spec, tuple[str, ...]] | None:
    """The spec with the deviations `api` declares for the call applied, and their ids; None where it declares
    none."""
    declared = ledger.declared(api, mode, device, case, part)
    return (ledger.spec_for(api, mode, device=device, case=case, part=part), tuple(d.id for d in declared)) \
        if declared else None


def _render(adapter, job: Job, spec: Spec) -> tuple[str, str]:
    """The reproducer's text and file suffix for a minimised job (a Python script unless the adapter
    writes its own)."""
    case = job.final
    expected, judgement = job.judged  # made when the job's observation was judged (the same case, the same answer)
    where = ", ".join([job.device, *([] if job.mode == EAGER else [f"mode {job.mode}"]), job.part])
    judged_by = f"spec {spec.hash}" if job.beside is None else \
        f"spec {spec.hash} with the deviations {', '.join(job.beside[1])} of its profile applied (spec {job.beside[0].hash})"
    about = (f"Reproduces kl_div case {case.id} on {job.api.name} ({where}).",
             f"kl-conformance {conformance.__version__}, {judged_by}: {judgement.message or judgement.verdict.value}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    observed = job.observed
    recorded = (f"raises {observed.exception_type}" if observed.raised else
                "a value of another dtype" if judgement.verdict is Verdict.DTYPE else "a value")
    return in_mode(adapter.repro_script, job.mode, case, job.api, job.device, job.part, about, expected, recorded)
