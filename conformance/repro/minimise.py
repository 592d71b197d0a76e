"""Minimises a reproducer's case: the element its row shows, or else the first single element, in a screen's order,
that keeps the run's verdict.

Every step is one batch of calls for every reproducer being made (a `Job`), observed in this process or by a
worker (in_process, through_worker) and judged as each observation arrives; a job whose case has no single
element that diverges the same way (or not minimised by the deadline) keeps its whole case.

Calls the framework only through the observer it is given; never writes a file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from conformance.core.case import Case
from conformance.core.errors import HarnessBug
from conformance.core.model import EAGER, Expected, Judgement, Observation, Spec, Verdict
from conformance.judge.casejudge import CaseJudge
from conformance.judge.compare import classify, differs_in_nonfinite_pattern
from conformance.run.pool import WorkerPool
from conformance.run.task import Task
from conformance.run.worker import observe_call

MAX_CANDIDATES = 64  # single elements tried when minimising


def expectations(cache=None) -> Callable[[Case, str, str, Spec], Expected]:
    """expect(case, part, dialect, spec): the spec's expectation, through the reference cache when one is given."""
    return lambda case, part, dialect, spec: CaseJudge(case, spec, cache).expected(spec, part, dialect)


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
class Job:
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
    # a row judged beside its framework's profile (core/defects.BESIDE_PROFILE): the spec with the deviations the
    # API declares applied, and their ids; the job is judged by it, as the run judged the row
    beside: tuple[Spec, tuple[str, ...]] | None = None
    shown: int | None = None  # the element (flat index) the row's message shows: the only one tried, so the script
    # shows the row's numbers, or the whole case

    def call(self, case: Case) -> tuple[Case, str, str, str, str]:
        return case, self.api.name, self.device, self.mode, self.part


def minimise_all(jobs: list[Job], observe: Observe, expect, spec: Spec, deadline: float | None = None,
                  progress: Callable[[int], None] | None = None) -> None:
    """Set each job's final case, its observation and that observation's expectation and judgement: the element
    its row shows where that alone diverges with the job's verdict (any single element that does, where the row
    shows none), else the whole case. Every step is one batch of
    calls for all the jobs (a round of candidates: one per job, then 2, 4, ... for the jobs still without one),
    so the framework is called in batches as in a run, and a job that tries all its candidates takes a few
    rounds, not one per candidate. Each observation is judged as it arrives, while the framework computes the
    next. Past `deadline` (time.monotonic()), the jobs not yet minimised keep their whole case."""
    unknown = [j for j in jobs if j.verdict is None]
    for job, observed in _paired(unknown, observe([j.call(j.case) for j in unknown])):
        job.observed, job.judged = observed, judged(job, job.case, observed, expect, spec)
        job.verdict = job.judged[1].verdict
    todo = [j for j in jobs if j.minimize and j.verdict.is_divergence and j.case.input.shape == j.case.target.shape
            and j.case.input.size > 1]
    for job in todo:
        job.order = [job.shown] if _shows_one(job) else list(range(min(job.case.input.size, MAX_CANDIDATES)))
    screened = [j for j in todo if not _shows_one(j) and (j.api.reductions is None or "none" in j.api.reductions)]
    batches = [_candidates_case(j.case) for j in screened]
    screens = list(zip(screened, batches))
    for (job, batch), observed in _paired(screens, observe([job.call(batch) for job, batch in screens])):
        job.order = _screen(expect(batch, job.part, job.api.dialect, _spec_of(job, spec)), observed,
                            batch.input.size)
    width = 1  # candidates per job in a round: one first (most jobs keep it), then twice as many each round
    while todo and (deadline is None or time.monotonic() < deadline):
        tried = [(job, _single(job.case, job.order.pop(0)))
                 for job in todo for _ in range(min(width, len(job.order)))]
        for (job, one), observed in _paired(tried, observe([job.call(one) for job, one in tried])):
            # the first candidate in the job's order that keeps its verdict, as if they were tried one by one
            if job.final is None:
                one_judged = judged(job, one, observed, expect, spec)
                if one_judged[1].verdict is job.verdict:
                    job.final, job.observed, job.judged = one, observed, one_judged
        todo = [j for j in todo if j.final is None and j.order]
        width *= 2
        if progress is not None:
            progress(sum(1 for j in jobs if j.final is not None or not j.order))
    whole = [j for j in jobs if j.final is None]
    for job in whole:
        job.final = job.case
    unseen = [j for j in whole if j.observed is None]
    for job, observed in _paired(unseen, observe([j.call(j.case) for j in unseen])):
        job.observed, job.judged = observed, judged(job, job.case, observed, expect, spec)


def _shows_one(job: Job) -> bool:
    """Whether the job's row shows an element of its case: that element alone is tried, since another that
    diverges alone with the same verdict may show another behaviour (Paddle's exp, wrong on whole vector blocks,
    was minimised to a NaN input's divergence)."""
    return job.shown is not None and 0 <= job.shown < job.case.input.size


def judged(job: Job, case: Case, observed: Observation, expect, spec: Spec) -> tuple[Expected, Judgement]:
    """What the spec expects of `case` in the job's part and dialect, and the judgement of `observed` by it."""
    expected = expect(case, job.part, job.api.dialect, _spec_of(job, spec))
    return expected, classify(expected, observed, _spec_of(job, spec))


def _spec_of(job: Job, spec: Spec) -> Spec:
    """The spec the job is judged by: the profile's where its row was judged beside it."""
    return job.beside[0] if job.beside is not None else spec


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
