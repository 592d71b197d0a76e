"""A run's cases, judged: which calls of each case remain (the selected targets and parts, less what a resumed
run has and what no selected API's dialect speaks), the tasks sent to the worker, and each answer judged
against the reference into rows, in the cases' order. The first cases' expectations are made while the worker
still loads the framework (prefetch).

Reads the RunContext and counts into its summary; writes no file (the runner writes the rows), and never
imports a framework or the reports.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from conformance.cases.digest import case_digest
from conformance.adapters.base import in_mode
from conformance.core.case import Case
from conformance.core.defects import BESIDE_PROFILE
from conformance.core.model import CLAIM, REFUSED, Judgement, Observation, Result, Spec, Verdict, not_refused
from conformance.judge.casejudge import CaseJudge, ExpectationOutOfMemory
from conformance.judge.refcache import ReferenceCache
from conformance.reference.forward import takes_input_space
from conformance.run.context import RunContext, RunOptions
from conformance.run.selection import element_count, needs_mb, over_budget
from conformance.run.task import Task

PREFETCH_ELEMENTS = 2**21  # case elements (input, target and output) prefetched at most: bounded memory
PREFETCH_CASES = 50_000


def prefetch(ctx: RunContext, cases: Iterator[Case],
             made: dict[str, CaseJudge]) -> list[tuple[Case, CaseJudge | None]]:
    """The first cases, each with a judge holding its expectations, made while the worker is still loading
    the framework: the parent would otherwise wait idle. Stops when the worker is ready, or at the bound.
    Only what the run would compute anyway is computed (selected parts, the selected APIs' dialects). `made`:
    judges the caller made before the run, by case id; each one used is taken out."""
    options = ctx.options
    if options.resume:  # which calls remain is known only from the devices the worker finds
        return []
    dialects = [a.dialect for a in ctx.adapter.apis if not options.apis or a.name in options.apis]
    return judges_until(ctx.pool.ready, ctx.spec, cases, options, dialects, ctx.cache, made)


def judges_until(ready: Callable[[], bool], spec: Spec, cases: Iterator[Case], options: RunOptions,
                 dialects: list[str], cache: ReferenceCache | None, made: dict[str, CaseJudge] | None = None
                 ) -> list[tuple[Case, CaseJudge | None]]:
    """Cases taken from `cases`, each with a judge holding the expectations of the parts `options` selects in
    `dialects`, until `ready()` (the worker has loaded the framework) or the bound: None for a case the memory
    budget or the reference's memory refuses, which its run refuses with a row. A case's judge in `made` is taken
    out and used."""
    prefetched: list[tuple[Case, CaseJudge | None]] = []
    dialects = list(dict.fromkeys(dialects))
    elements = 0
    while not ready() and elements < PREFETCH_ELEMENTS and len(prefetched) < PREFETCH_CASES:
        case = next(cases, None)
        if case is None:
            break
        if needs_mb(case) > options.memory_budget_mb:
            prefetched.append((case, None))  # refused when its turn comes; nothing to compute
            continue
        judge = (made.pop(case.id, None) if made else None) or CaseJudge(case, spec, cache)
        try:
            for part in selected_parts(case, options):
                for dialect in dialects:
                    if takes_input_space(case, dialect, spec):
                        judge.expected(spec, part, dialect)
        except ExpectationOutOfMemory:
            judge = None  # refused with a row when it is judged
        prefetched.append((case, judge))
        elements += element_count(case)
    return prefetched


def judged_cases(ctx: RunContext, cases: Iterator[tuple[Case, CaseJudge | None]],
                 done: set[tuple[str, str, str, str, str]]
                 ) -> Iterator[tuple[Case, list[tuple[Result, tuple[str, ...] | None]]]]:
    """Send runnable cases to the worker, and judge each answer against the reference: each case with its
    rows. `cases` pairs each case with a judge already holding its expectations (prefetch), or None;
    `done` holds the (case id, api, device, mode, part) of the rows a resumed run has already."""
    spec, adapter, options, summary = ctx.spec, ctx.adapter, ctx.options, ctx.summary
    refused: dict[int, str] = {}
    judges: dict[int, CaseJudge] = {}
    plans: dict[int, list[tuple[tuple[str, str, str, str], str | None]]] = {}  # each call of a task, and why not sent
    dialects = {api.name: api.dialect for api in adapter.apis}

    def plan(case: Case) -> list[tuple[tuple[str, str, str, str], str | None]]:
        """The calls still to make of `case`, each with the reason the API cannot express it, or its profile
        documents it does not take or define (such a call is never sent to the framework), or None."""
        parts = selected_parts(case, options)
        out = []
        for t in ctx.targets:
            api = adapter.api(t.api)
            if not takes_input_space(case, api.dialect, spec):
                continue  # a case in an input space the API's dialect does not speak is no row: the report's n/a
            why_not = adapter.unsupported_reason(case, api)
            for part in parts:
                if (case.id, t.api, t.device, t.mode, part) not in done:
                    # a call the profile documents the API does not take or define is not sent either
                    out.append(((t.api, t.device, t.mode, part),
                                why_not or in_mode(adapter.unsupported_part, t.mode, api, part)
                                or ctx.ledger.unsupported(case, t.api, part, t.mode, t.device)))
        return out

    def tasks() -> Iterator[Task]:
        for index, (case, judge) in enumerate(cases):
            todo = plan(case)
            if not todo:
                if not any(takes_input_space(case, dialects[t.api], spec) for t in ctx.targets):
                    summary.unspoken += 1
                elif not selected_parts(case, options):
                    summary.partless += 1
                else:
                    summary.skipped += 1
                continue
            plans[index] = todo
            if judge is not None:
                judges[index] = judge
            need_mb = needs_mb(case)
            if need_mb > options.memory_budget_mb:
                refused[index] = f"{REFUSED}{over_budget(need_mb, options.memory_budget_mb)} (raise {options.budget_option})"
                yield Task(index, case, ())  # an empty task keeps the order; nothing runs
                continue
            # its reference is computed when the answer is judged
            yield Task(index, case, tuple(call for call, reason in todo if reason is None))

    for outcome in ctx.pool.run(tasks()):
        task = outcome.task
        case = task.case
        summary.current = case.id
        digest = case_digest(case)
        todo = plans.pop(task.index)
        rows = []
        if task.index in refused:
            judgement = Judgement(Verdict.UNSUPPORTED, refused.pop(task.index))
            for call, _ in todo:
                rows.append((ctx.row(case, digest, call, None, judgement, Observation()), None))
            summary.cases += 1
            yield case, rows
            continue
        # this judging runs while the worker is already calling the framework on the next cases
        judge = judges.pop(task.index, None) or CaseJudge(case, spec, ctx.cache)
        for call, reason in todo:
            api_name, device, _, part = call
            dialect = dialects[api_name]
            failed = outcome.failed(call)  # where the worker crashed or timed out on this call: why, and whose
            try:  # plan() sends only calls of an API whose dialect takes the case's input space
                expected = judge.expected(spec, part, dialect)
                out_of_memory = None
            except ExpectationOutOfMemory as exc:
                expected, out_of_memory = None, f"{exc.problem} ({exc.fix})"
            if out_of_memory is not None:  # the framework's answer cannot be judged: refused, with the reason
                observed = Observation(unsupported=out_of_memory)
                judgement = Judgement(Verdict.UNSUPPORTED, out_of_memory)
            elif failed is not None and reason is None:
                observed = Observation()
                judgement = Judgement(failed.verdict, failed.message, cause=failed.cause)
            elif reason:  # a call the API cannot express was not sent
                observed = Observation(unsupported=reason)
                judgement = Judgement(Verdict.UNSUPPORTED, not_refused(reason))
            else:
                observed = outcome.observations[call]
                judgement = judge.judgement(part, dialect, observed)
            documented_by = (judge.documented(ctx.ledger, api_name, part, dialect, observed, call[2], device)
                             if judgement.verdict.is_finding and failed is None else ())
            if judgement.verdict.is_finding and failed is None and not documented_by:
                judgement = _beside_profile(ctx, judge, judgement, api_name, part, dialect, observed, call[2], device)
            result = ctx.row(case, digest, call, expected, judgement, observed, documented_by)
            rows.append((result, judge.detail(expected, observed) if judgement.verdict.is_divergence else None))
        summary.cases += 1
        yield case, rows


def _beside_profile(ctx: RunContext, judge: CaseJudge, judgement: Judgement, api: str, part: str, dialect: str,
                    observed: Observation, mode: str, device: str) -> Judgement:
    """An undocumented divergence as it shows beside the API's profile. What no alternative explained (its cause
    `unexplained`, or the rule its verdict states: a dtype, a shape) is tried beside the profile (beyond_profile).
    Where the profile changes what the divergence shows, the row shows what remains (its verdict, worst element
    and error: the value just outside the bound, not the NaN the profile states), and says what the spec alone
    shows. What stays unexplained says which alternatives its answer lies within rounding of, where any do."""
    said = judgement.message.partition(CLAIM)[2]
    if not judgement.explained:
        beyond = judge.beyond_profile(ctx.ledger, api, part, dialect, observed, mode, device)
        if beyond is not None:
            judgement = dataclasses.replace(judgement, cause=beyond[0])
            said = beyond[1]
    residual = judge.beside_profile(ctx.ledger, api, part, dialect, observed, mode, device)
    message = judgement.message.partition(CLAIM)[0]
    if residual is not None:
        judgement = dataclasses.replace(judgement, verdict=residual.verdict, max_abs_err=residual.max_abs_err,
                                        bound=residual.bound, where=residual.where, rules=residual.rules)
        message = f"{residual.message}{BESIDE_PROFILE}{message.split('; ', 1)[0]})"
    judgement = dataclasses.replace(judgement, message=message + (f"{CLAIM}{said}" if said else ""))
    return judge.with_within(judgement, ctx.ledger, api, part, dialect, observed, mode, device)


def selected_parts(case: Case, options: RunOptions) -> list[str]:
    """The parts of `case` the run asks for (--part narrows them)."""
    return [p for p in case.parts if not options.parts or p in options.parts]
