"""Writes standalone reproducers: a script that needs only one framework (and NumPy, for Python ones).

The case comes from its id (generated cases are rebuilt from id and seed), from a user
case file, or from an earlier run directory (which keeps its seed and its user cases).
Before writing, the case is minimised: if a single element of it diverges the same
way, the script uses that element alone, which is what one pastes into an upstream issue.
A run's reproducers of a compiled mode keep their whole case (each candidate would compile again).
Composes the adapter, the reference and the comparator; runs in the framework's environment.

Writes scripts into a run's staging folder (the run's own reproducers), or into a folder of their own
(`repro --all OUT`: core/generated.py, never a run's folder); never rewrites the results themselves.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

import conformance
from conformance.adapters.base import Adapter, in_mode, script_devices
from conformance.adapters.registry import get_adapter, known_adapters
from conformance.cases.generate import DEFAULT_SEED, build_case, check_key
from conformance.cases.ids import parse_id
from conformance.cases.userfile import load_case_file
from conformance.core.case import Case
from conformance.core.errors import HarnessBug, ResultsError, UsageError
from conformance.core.generated import GeneratedFolder
from conformance.core.model import EAGER, Expected, Judgement, Observation, Result, Spec, Verdict
from conformance.core.rundirs import script_name, snippet_name
from conformance.judge.casejudge import CaseJudge
from conformance.judge.compare import classify, differs_in_nonfinite_pattern
from conformance.report.defects import Defects
from conformance.run.pool import WorkerPool
from conformance.run.selection import BYTES_PER_ELEMENT, DEFAULT_MEMORY_BUDGET_MB, check_modes, needs_mb
from conformance.run.task import Task, WorkerUnavailable
from conformance.run.worker import observe_call

MAX_CANDIDATES = 64  # single elements tried when minimising


class CaseSource:
    """Where reproducers find their cases: the user case files of a run (or one named file), each parsed
    once into an index by id, else the generated case of that id drawn with the run's seed."""

    def __init__(self, run_dir: str | None, case_file: str | None, seed: int | None,
                 memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB) -> None:
        self.files = [case_file] if case_file else []
        if run_dir:
            manifest = run_manifest(run_dir)
            seed = manifest.get("seed", seed) if seed is None else seed
            # the copies the run kept inside its directory: the paths the run was given are not read, as a run
            # directory is data that may come from elsewhere, and its run.json must not point this command at
            # any file of this machine
            self.files += [str(_inside(run_dir, kept)) for kept in manifest.get("case_files_kept", [])]
        self.seed = DEFAULT_SEED if seed is None else seed
        self.memory_budget_mb = memory_budget_mb
        self._index: dict[str, Case] = {}
        self._unread = list(self.files)  # read in order, each once, only as far as an id needs

    def get(self, case_id: str) -> Case:
        while case_id not in self._index and self._unread:
            for case in load_case_file(self._unread.pop(0)):
                self._index.setdefault(case.id, case)  # the first file that has the id wins
        if case_id in self._index:
            return self._index[case_id]
        try:
            key = parse_id(case_id)
            check_key(key)
        except ValueError:
            raise UsageError(f"case {case_id!r} is not a generated id and not in {self.files or 'any case file'}",
                             where="CASE_ID", fix="pass --cases FILE or --from RUN_DIR for a user case") from None
        # the budget is applied before any value is drawn: a huge shape in an id must not exhaust the memory
        need_mb = (math.prod(key.input_shape) + math.prod(key.target_shape)) * BYTES_PER_ELEMENT / 2**20
        if need_mb > self.memory_budget_mb:
            raise UsageError(f"case {case_id!r} needs about {need_mb:,.0f} MB, over the memory budget of "
                             f"{self.memory_budget_mb:,.0f} MB", where="CASE_ID",
                             fix="choose a smaller case, or raise --memory-budget-mb")
        return build_case(key, self.seed)


def run_manifest(run_dir: str | Path) -> dict[str, Any]:
    """run.json of a run directory, with the fields a reproducer reads checked: a damaged or doctored one is
    one line naming the file and field."""
    from conformance.core.manifest import read_manifest

    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise UsageError("no run.json here", file=str(run_dir), where="--from",
                         fix="pass the --out directory of a `kl-conformance run`")
    return read_manifest(run_dir)  # its fields type-checked (manifest.check_manifest)


def _inside(run_dir: str | Path, name: str) -> Path:
    """The file `name` names inside `run_dir`; one that leads outside it (an absolute path, `..`, a link out)
    is refused."""
    root = Path(run_dir).resolve()
    path = (root / name).resolve() if name and "\0" not in name else root
    if root not in path.parents:
        raise ResultsError(f"case_files_kept names {_shown(name)}, which is not a file inside the run directory",
                           file=str(Path(run_dir) / "run.json"), where="case_files_kept",
                           fix="regenerate the run; a run directory's files are read only from inside it")
    return path


def _shown(value: Any, limit: int = 80) -> str:
    """A value for a one-line message: its repr, ASCII only, cut to `limit`."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."


def expectations(spec: Spec, cache=None) -> Callable[[Case, str, str], Expected]:
    """expect(case, part, dialect): the spec's expectation, through the reference cache when one is given."""
    return lambda case, part, dialect: CaseJudge(case, spec, cache).expected(spec, part, dialect)


# Calls, each (case, api name, device, mode, part), to one Observation per call, in order. Observations come
# back one by one as they arrive, so the caller judges one while the framework computes the next.
Observe = Callable[[list[tuple[Case, str, str, str, str]]], Iterable[Observation]]


def in_process(adapter) -> Observe:
    """Calls made by a loaded adapter in this process (one reproducer on the command line), each in its mode and
    read as the worker reads them (observe_call)."""
    def observe(calls: list[tuple[Case, str, str, str, str]]) -> list[Observation]:
        observed = []
        for case, api, device, mode, part in calls:
            observed.append(observe_call(adapter, case, api, device, mode, part))
        return observed
    return observe


def through_worker(pool: WorkerPool) -> Observe:
    """Calls made by a worker process (the run's own, already loaded): a crash or a hang there costs one
    call, which then counts as not reproducing, and never the reproducers already written."""
    def observe(calls: list[tuple[Case, str, str, str, str]]) -> Iterator[Observation]:
        for outcome in pool.run(Task(i, case, ((api, device, mode, part),))
                                for i, (case, api, device, mode, part) in enumerate(calls)):
            if outcome.failure is not None:
                yield Observation(exception_type=outcome.failure.value, exception_message=outcome.failure_message)
            else:
                yield outcome.observations[outcome.task.calls[0]]
    return observe


@dataclass
class _Job:
    """One reproducer being made: the case and call, and the verdict its minimised case must keep."""

    case: Case
    api: Any
    device: str
    part: str
    verdict: Verdict | None  # the run's verdict; None until the whole case is observed
    minimize: bool = True
    mode: str = EAGER  # the row's: every call of the job, and the script, are made in it
    order: list[int] = field(default_factory=list)  # the single elements still to try
    final: Case | None = None  # the case the script holds
    observed: Observation | None = None  # of `final` (or of the whole case, until minimised)
    judged: tuple[Expected, Judgement] | None = None  # `observed`'s expectation and judgement, set with it

    def call(self, case: Case) -> tuple[Case, str, str, str, str]:
        return case, self.api.name, self.device, self.mode, self.part


def _minimise_all(jobs: list[_Job], observe: Observe, expect, spec: Spec, deadline: float | None = None,
                  progress: Callable[[int], None] | None = None) -> None:
    """Set each job's final case, its observation and that observation's expectation and judgement: a
    single element where one diverges with the job's verdict, else the whole case. Every step is one batch of
    calls for all the jobs (a round of candidates: one per job, then 2, 4, ... for the jobs still without one),
    so the framework is called in batches as in a run, and a job that tries all its candidates takes a few
    rounds, not one per candidate. Each observation is judged as it arrives, while the framework computes the
    next. Past `deadline` (time.monotonic()), the jobs not yet minimised keep their whole case."""
    unknown = [j for j in jobs if j.verdict is None]
    for job, observed in _paired(unknown, observe([j.call(j.case) for j in unknown])):
        job.observed, job.judged = observed, _judged(job, job.case, observed, expect, spec)
        job.verdict = job.judged[1].verdict
    todo = [j for j in jobs if j.minimize and j.verdict.is_divergence and j.case.input.shape == j.case.target.shape
            and j.case.input.size > 1]
    for job in todo:
        job.order = list(range(min(job.case.input.size, MAX_CANDIDATES)))
    screened = [j for j in todo if j.api.reductions is None or "none" in j.api.reductions]
    batches = [_candidates_case(j.case) for j in screened]
    screens = list(zip(screened, batches))
    for (job, batch), observed in _paired(screens, observe([job.call(batch) for job, batch in screens])):
        job.order = _screen(expect(batch, job.part, job.api.dialect), observed, batch.input.size)
    width = 1  # candidates per job in a round: one first (most jobs keep it), then twice as many each round
    while todo and (deadline is None or time.monotonic() < deadline):
        tried = [(job, _single(job.case, job.order.pop(0)))
                 for job in todo for _ in range(min(width, len(job.order)))]
        for (job, one), observed in _paired(tried, observe([job.call(one) for job, one in tried])):
            # the first candidate in the job's order that keeps its verdict, as if they were tried one by one
            if job.final is None:
                judged = _judged(job, one, observed, expect, spec)
                if judged[1].verdict is job.verdict:
                    job.final, job.observed, job.judged = one, observed, judged
        todo = [j for j in todo if j.final is None and j.order]
        width *= 2
        if progress is not None:
            progress(sum(1 for j in jobs if j.final is not None or not j.order))
    whole = [j for j in jobs if j.final is None]
    for job in whole:
        job.final = job.case
    unseen = [j for j in whole if j.observed is None]
    for job, observed in _paired(unseen, observe([j.call(j.case) for j in unseen])):
        job.observed, job.judged = observed, _judged(job, job.case, observed, expect, spec)


def _judged(job: _Job, case: Case, observed: Observation, expect, spec: Spec) -> tuple[Expected, Judgement]:
    """What the spec expects of `case` in the job's part and dialect, and the judgement of `observed` by it."""
    expected = expect(case, job.part, job.api.dialect)
    return expected, classify(expected, observed, spec)


def _paired(items: list, observations: Iterable[Observation]) -> Iterator[tuple[Any, Observation]]:
    """Each item with its observation, as each arrives, and then the observations read to their end: the
    worker is replaced after a crash only once its failure has been read past, so the next batch must
    not start before."""
    observations = iter(observations)
    for item in items:
        yield item, next(observations)
    for extra in observations:
        raise HarnessBug(f"more observations than calls: {extra}")


def _candidates_case(case: Case) -> Case:
    """The case's first MAX_CANDIDATES elements as one unreduced call, each its own distribution (shape
    (count, 1)): which of them diverge orders the single elements to try."""
    count = min(case.input.size, MAX_CANDIDATES)
    return replace(case, id=f"{case.id}#candidates", layout="contiguous",
                   params=replace(case.params, reduction="none", size_average=None, reduce=None),
                   input=case.input.reshape(-1)[:count].reshape(count, 1),
                   target=case.target.reshape(-1)[:count].reshape(count, 1))


def _screen(expected: Expected, observed: Observation, count: int) -> list[int]:
    """The candidates in the order to try them: first those that diverge in the batch. The batch only orders
    them; each is still judged alone with the case's own parameters, so a screen that misleads costs calls,
    not truth."""
    order = list(range(count))
    if observed.raised or expected.value is None or np.size(observed.value) != count or expected.value.size != count:
        return order
    got = np.asarray(observed.value, dtype=np.float64).reshape(count)
    want, bound = expected.value.reshape(count), expected.bound.reshape(count)
    with np.errstate(invalid="ignore"):
        off = differs_in_nonfinite_pattern(got, want) | (np.isfinite(want) & ~(np.abs(got - want) <= bound))
    return [i for i in order if off[i]] + [i for i in order if not off[i]]


def _single(case: Case, i: int) -> Case:
    """The case's i-th element alone, in the case's number of dimensions."""
    shape = (1,) * max(case.input.ndim, 1)
    return replace(case, input=np.full(shape, case.input.reshape(-1)[i]),
                   target=np.full(shape, case.target.reshape(-1)[i]), layout="contiguous")


def write_all(run_dir: str, spec: Spec, out_dir: Path | GeneratedFolder, cache_dir: Path | None = None,
              progress: Callable[[int, int], None] | None = None, pool: WorkerPool | None = None,
              deadline: float | None = None, framework: str | None = None,
              results: Iterable[Result] | None = None,
              memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, per_defect: bool = False) -> tuple[int, int]:
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
    before its values are drawn. `progress(done, total)` follows the minimisation. Returns (reproducers written,
    those left whole at `deadline`).

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
            raise ResultsError(f"the run names the adapter {_shown(framework)}, which is not registered",
                               file=str(Path(run_dir) / "run.json"), where="framework",
                               fix="name the adapter with --framework (only then is a module:Class imported)")
    adapter = get_adapter(framework)  # not loaded here: it names the APIs and writes the scripts' text
    apis = {a.name: a for a in adapter.apis}
    for r in rows:
        if r.api not in apis or r.device not in adapter.known_devices or r.mode not in adapter.mode_names():
            raise ResultsError(f"a row of case {_shown(r.case_id)} names api {_shown(r.api)} on device "
                               f"{_shown(r.device)} in mode {_shown(r.mode)}, which adapter {framework} does not have",
                               file=str(Path(run_dir) / "results.jsonl"), where=f"case {_shown(r.case_id)}",
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
            raise UsageError(f"mode {mode} of {framework} cannot run here: {_shown(why, 200)}", file=str(run_dir),
                             where="--from", fix="write the reproducers in the environment that made the run")
        if folder is None:
            out_dir.mkdir(parents=True, exist_ok=True)
        cache = ReferenceCache(cache_dir) if cache_dir is not None else None
        expect = expectations(spec, cache)
        source = CaseSource(run_dir, None, None, memory_budget_mb)
        for group in within_budget(rows, source.get, memory_budget_mb):
            # a compiled mode's row keeps its whole case: each candidate would be a shape that mode compiles
            # again; `repro CASE --mode M` minimises one on demand
            jobs = [_Job(case, apis[r.api], r.device, r.part, verdict=r.verdict, mode=r.mode, minimize=r.mode == EAGER)
                    for r, case in group]
            shown = None if progress is None else (lambda done, before=written: progress(before + done, len(rows)))
            _minimise_all(jobs, through_worker(pool), expect, spec, deadline, shown)
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
                 device: str = "cpu", part: str = "forward", *, minimize: bool = True, mode: str = EAGER) -> str:
    """The reproducer's source text for the case `source` holds under `case_id`, its call made in `mode`."""
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
    adapter.load()
    adapter.learn_release()  # the call the reproducer makes is the one this release takes
    why = adapter.mode_unavailable(mode) if mode != EAGER else None
    if why:
        raise UsageError(f"mode {mode} of {framework} cannot run here: {_shown(why, 200)}", where="--mode",
                         fix="write the reproducer where the mode's packages are installed, or pick another mode")
    why = adapter.offer.missing_apis.get(api.name) or adapter.unsupported_reason(case, api)  # now with its release
    if why:
        raise UsageError(f"{api.name} cannot make case {case_id!r} here: {_shown(why, 200)}", where="--api",
                         fix="write the reproducer where a release of the framework that has it is installed")
    expect = expectations(spec)
    job = _Job(case, api, device, part, verdict=None, minimize=minimize, mode=mode)
    _minimise_all([job], in_process(adapter), expect, spec)
    return _render(adapter, job, spec)[0]


def _render(adapter, job: _Job, spec: Spec) -> tuple[str, str]:
    """The reproducer's text and file suffix for a minimised job (a Python script unless the adapter
    writes its own)."""
    case = job.final
    expected, judgement = job.judged  # made when the job's observation was judged (the same case, the same answer)
    where = ", ".join([job.device, *([] if job.mode == EAGER else [f"mode {job.mode}"]), job.part])
    about = (f"Reproduces kl_div case {case.id} on {job.api.name} ({where}).",
             f"kl-conformance {conformance.__version__}, spec {spec.hash}: {judgement.message or judgement.verdict.value}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    observed = job.observed
    recorded = (f"raises {observed.exception_type}" if observed.raised else
                "a value of another dtype" if judgement.verdict is Verdict.DTYPE else "a value")
    return in_mode(adapter.repro_script, job.mode, case, job.api, job.device, job.part, about, expected, recorded)
