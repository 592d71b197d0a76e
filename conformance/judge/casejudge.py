"""Judges one case's observations against the spec: verdicts, explanations and documentation.

The judge asks the reference for each expectation once per (spec, part, dialect) and keeps
it, so every API and device of a case shares it, and so do the explanations and profiles
that ask for alternative specs. The run wing and the reproducers judge through it.

Composes the reference and the comparator; never imports a framework, an adapter or the case generator.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable

import numpy as np

from conformance.core.case import Case
from conformance.core.choices import touched_paths, with_alternatives
from conformance.core.errors import UsageError
from conformance.core.model import (CLAIM, EAGER, REFUSED, UNEXPLAINED, WITHIN, Expected, Judgement, Observation, Spec,
                                    Verdict, not_refused)
from conformance.core.details import array_detail, encoded_fields
from conformance.judge.compare import classify, inputs_at, passes
from conformance.judge.explain import explain, within_rounding
from conformance.judge.faults import find_fault
from conformance.judge.profiles import DeviationLedger
from conformance.judge.refcache import ReferenceCache
from conformance.reference.grad import expected_for


class ExpectationOutOfMemory(UsageError):
    """The reference ran out of memory computing an expectation: a run refuses the case (an unsupported row with
    `problem` as its reason), and a command that needs that one expectation stops with one line, never a
    traceback that leaves the run half written."""


class CaseJudge:
    """Judges one case's observations. Each expectation is computed once per (spec, part, dialect): every
    API and device of the case shares it, and so do the explanations and profiles that ask for
    alternative specs. Identical observations of one part (often every API of a framework) are
    judged once."""

    def __init__(self, case: Case, spec: Spec, cache: ReferenceCache | None = None) -> None:
        self.case, self.spec, self.cache = case, spec, cache
        self._expected: dict[tuple[str, str], object] = {}
        self._judged: dict[tuple, Judgement] = {}
        self._explained: dict[tuple, tuple | None] = {}
        self._documented: dict[tuple, tuple[str, ...]] = {}
        self._beyond: dict[tuple, tuple[str, str] | None] = {}
        self._within: dict[tuple, str | None] = {}
        self._case_detail: str | None = None
        self._touched: frozenset[str] | None = None  # explain's touched_paths, once per case
        self._expected_detail: dict[int, str] = {}
        self._got_detail: dict[tuple, str] = {}
        self._last_key: tuple[Observation | None, tuple] = (None, ())

    def expected(self, spec: Spec, part: str, dialect: str = "canonical"):
        """The expectation of one part under `spec`; ExpectationOutOfMemory where computing it ran out of memory."""
        key = (spec.hash, part, dialect)
        if key not in self._expected:
            try:
                self._expected[key] = self._compute(spec, part, dialect)
            except MemoryError:
                raise ExpectationOutOfMemory(
                    f"{REFUSED}the reference ran out of memory computing the {part} expectation of a case of "
                    f"{self.case.input.size + self.case.target.size:,} elements", where=f"case {self.case.id!r}",
                    fix="lower --memory-budget-mb to what the machine has free, or run the case alone") from None
        return self._expected[key]

    def _compute(self, spec: Spec, part: str, dialect: str):
        found = self.cache.get(self.case, spec, part, dialect) if self.cache is not None else None
        if found is not None and self.cache.should_verify():
            # the cache is a trust boundary: a sample of what it gives back is computed again (refcache)
            computed = expected_for(self.case, spec, part, dialect)
            if not self.cache.verify(found, computed):
                found = computed
        if found is None:
            found = expected_for(self.case, spec, part, dialect)
            if self.cache is not None:
                self.cache.put(self.case, spec, part, found, dialect)
        return found

    def detail(self, expected: Expected | None, observed: Observation) -> tuple[str, ...]:
        """What the HTML report shows when a divergence is expanded, as details.jsonl's fields encoded
        (details.encoded_fields). The case's arrays, each expectation and each distinct observed value are
        previewed and encoded once, however many APIs of the case diverge."""
        if self._case_detail is None:
            case = self.case
            self._case_detail = encoded_fields(params=vars(case.params), dtype=str(case.dtype), layout=case.layout,
                                               input=array_detail(case.input), target=array_detail(case.target))
        if id(expected) not in self._expected_detail:  # by id(): self._expected keeps each alive, so no id is reused
            self._expected_detail[id(expected)] = encoded_fields(
                expected=array_detail(expected.value) if expected is not None else None,
                bound=array_detail(expected.bound) if expected is not None else None,
                expected_error=expected.error_type if expected is not None else None)
        key = self._key(observed)
        got = (key[0], observed.exception_type, observed.exception_message)
        if got not in self._got_detail:
            self._got_detail[got] = encoded_fields(
                got=array_detail(observed.value),
                raised=f"{observed.exception_type}: {observed.exception_message}" if observed.raised else None)
        return self._case_detail, self._expected_detail[id(expected)], self._got_detail[got]

    def judgement(self, part: str, dialect: str, observed: Observation) -> Judgement:
        key = (part, dialect, *self._key(observed))
        if key not in self._judged:
            try:
                self._judged[key] = self._judge(part, dialect, observed)
            except ExpectationOutOfMemory as exc:
                self._judged[key] = Judgement(Verdict.UNSUPPORTED, f"{exc.problem} ({exc.fix})")
        return self._judged[key]

    def documented(self, ledger: DeviationLedger, api: str, part: str, dialect: str,
                   observed: Observation, mode: str = EAGER, device: str | None = None) -> tuple[str, ...]:
        """The profile deviations that document this divergence (DeviationLedger.documented), decided once
        for the APIs of the case that declare the same deviations and observed the same (warnings aside:
        passing reads none)."""
        declared = tuple(d.id for d in ledger.declared(api, mode, device, self.case, part))
        if not declared:
            return ()
        key = (declared, part, dialect, *without_warnings(self._key(observed)))
        if key not in self._documented:
            try:
                fingerprint = ledger.fingerprint(api, mode, device, self.case, part)
                self._documented[key] = self._remembered(
                    part, dialect, b"documented " + repr((fingerprint, key[1:])).encode(),
                    lambda: ledger.documented(api, observed, lambda s: self.expected(s, part, dialect), mode, device,
                                              self.case, part), list, tuple)
            except ExpectationOutOfMemory:  # what cannot be checked documents nothing: the divergence stays
                self._documented[key] = ()
        return self._documented[key]

    def beyond_profile(self, ledger: DeviationLedger, api: str, part: str, dialect: str, observed: Observation,
                       mode: str = EAGER, device: str | None = None) -> tuple[str, str] | None:
        """(cause, what it behaves as) for a divergence the spec's alternatives do not explain and the profile
        does not document: the smallest set of alternatives that reproduces it once `api`'s declared deviations
        for `mode` are applied (explain, on the profile's spec), so the cause names only what remains beyond what
        the framework states; None where the API declares nothing or that finds nothing either. Decided once for
        the APIs of the case that declare the same deviations and observed the same (warnings aside)."""
        declared = ledger.declared(api, mode, device, self.case, part)
        if not declared:
            return None
        fingerprint = ledger.fingerprint(api, mode, device, self.case, part)
        key = (fingerprint, part, dialect, *without_warnings(self._key(observed)))
        if key not in self._beyond:
            def explained():
                expect = lambda s: self.expected(s, part, dialect)  # noqa: E731
                base = ledger.spec_for(api, mode, device=device, case=self.case, part=part)
                alts = explain(self.case, observed, base, part, expect=expect, touched=self._touched_paths())
                # a raise is explained by its type alone (explain); beside the profile it must also be the message
                # the profile's entry states (its `match`), or the profile states nothing of it
                if not alts or not passes(expect(with_alternatives(base, alts)), observed):
                    return None
                def without(entry: str) -> Spec:
                    return ledger.spec_for(api, mode, entry, device, self.case, part)
                needed = [d.id for d in declared  # the entries it needs: without any one, it no longer passes
                          if not passes(expect(with_alternatives(without(d.id), alts)), observed)
                          ] or [d.id for d in declared]  # entries that stand in for one another: all of them
                return (" + ".join(a.path for a in alts),
                        f"{', '.join(map(str, alts))} beside the profile ({', '.join(needed)})")
            try:
                self._beyond[key] = self._remembered(
                    part, dialect, b"beyond " + repr(key).encode(), explained,
                    lambda found: list(found or ()), _explanation_from_json)
            except ExpectationOutOfMemory:  # the divergence stays unexplained
                self._beyond[key] = None
        return self._beyond[key]

    def beside_profile(self, ledger: DeviationLedger, api: str, part: str, dialect: str, observed: Observation,
                       mode: str = EAGER, device: str | None = None) -> Judgement | None:
        """The observation judged against the spec with `api`'s declared deviations for `mode` applied, where that
        shows another divergence than the spec alone does: what remains of one the profile does not document (a
        value just outside the bound beside NaNs the profile states). None where the API declares nothing, the
        profile changes nothing the judgement shows, or the answer passes beside it (it is then documented)."""
        if not ledger.declared(api, mode, device, self.case, part):
            return None
        try:
            base = ledger.spec_for(api, mode, device=device, case=self.case, part=part)
            residual = inputs_at(classify(self.expected(base, part, dialect), observed, base), self.case.input,
                                 self.case.target, tuple(observed.shape or ()))
        except ExpectationOutOfMemory:
            return None
        alone = self.judgement(part, dialect, observed)
        if not residual.verdict.is_finding or residual.message == alone.message.partition(CLAIM)[0]:
            return None
        return residual

    def within_rounding(self, ledger: DeviationLedger | None, api: str, part: str, dialect: str,
                        observed: Observation, mode: str = EAGER, device: str | None = None) -> str | None:
        """The alternatives an unexplained divergence lies within rounding of (explain.within_rounding), beside
        `api`'s profile where it declares deviations (no `ledger`: the spec alone), as a message states them; None
        where no set does. Decided once for the APIs of the case that declare the same deviations and observed the
        same (warnings aside)."""
        fingerprint = ledger.fingerprint(api, mode, device, self.case, part) if ledger is not None else None
        key = (fingerprint, part, dialect, *without_warnings(self._key(observed)))
        if key not in self._within:
            def found():
                declared = ledger.declared(api, mode, device, self.case, part) if ledger is not None else ()
                base = ledger.spec_for(api, mode, device=device, case=self.case, part=part) if declared else self.spec
                alts = within_rounding(self.case, observed, base, part,
                                       expect=lambda s: self.expected(s, part, dialect), touched=self._touched_paths())
                return [", ".join(map(str, alts))] if alts else []
            try:
                said = self._remembered(part, dialect, b"within " + repr(key).encode(), found, list, list)
            except ExpectationOutOfMemory:
                said = []
            self._within[key] = said[0] if said and isinstance(said[0], str) else None
        return self._within[key]

    def with_within(self, judgement: Judgement, ledger: DeviationLedger | None, api: str, part: str, dialect: str,
                    observed: Observation, mode: str = EAGER, device: str | None = None) -> Judgement:
        """An unexplained divergence's judgement saying, before what its message claims, which alternatives its
        answer lies within rounding of (for a maintainer; never a cause); any other judgement as it is."""
        near = self.within_rounding(ledger, api, part, dialect, observed, mode, device) \
            if judgement.cause == UNEXPLAINED else None
        if not near:
            return judgement
        head, claim, said = judgement.message.partition(CLAIM)
        return dataclasses.replace(judgement, message=f"{head}{WITHIN}{near}{claim}{said}")

    def _touched_paths(self) -> frozenset[str]:
        """touched_paths of the case, computed once: every explanation of it reads them."""
        if self._touched is None:
            self._touched = touched_paths(self.case)
        return self._touched

    def _remembered(self, part: str, dialect: str, asked: bytes, compute: Callable[[], Any],
                    encode: Callable[[Any], list], decode: Callable[[list], Any]):
        """compute(), or its answer from the reference cache. Explanations and documentation are functions of the
        case, the spec, the part, what is `asked` (the observation, and for documentation the profile's
        deviations) and the code that derives them, which is in the key (refcache.explanation_key): stored as
        JSON, they spare a rerun the alternative expectations they read."""
        key = self.cache.explanation_key(self.case, self.spec, part, dialect, asked) if self.cache is not None else None
        found = self.cache.get_explanation(key) if key is not None else None
        if found is not None:
            try:
                stored = decode(json.loads(found))
            except (ValueError, TypeError):  # a damaged entry: derived again (and not stored again)
                key = None
            else:
                if not self.cache.should_verify("explained"):
                    return stored
                # a sample is derived again, as expectations are: a planted answer drops the cache
                answer = compute()
                self.cache.verify(found, json.dumps(encode(answer)).encode())
                return answer
        answer = compute()
        if key is not None:
            self.cache.put_explanation(key, json.dumps(encode(answer)).encode())
        return answer

    def _key(self, observed: Observation) -> tuple:
        """observation_key, computed once for the row being judged (its judgement, documentation and detail)."""
        if self._last_key[0] is not observed:
            self._last_key = (observed, observation_key(observed))
        return self._last_key[1]

    def _judge(self, part: str, dialect: str, observed: Observation) -> Judgement:
        # Nothing to compare; where the API cannot take the case's input space there is no expectation either.
        if observed.unsupported is not None:
            return Judgement(Verdict.UNSUPPORTED, not_refused(observed.unsupported))
        judgement = inputs_at(classify(self.expected(self.spec, part, dialect), observed, self.spec),
                              self.case.input, self.case.target, tuple(observed.shape or ()))
        if judgement.verdict.is_finding:  # a divergence that is no finding (fallback) has nothing to explain
            try:
                explained = self._explanation(part, dialect, observed)
            except ExpectationOutOfMemory:  # the divergence stands, unexplained
                explained = None
            if explained:
                cause, said = explained
                return dataclasses.replace(judgement, message=f"{judgement.message}{CLAIM}{said}", cause=cause,
                                           explained=True)
        return judgement

    def _explanation(self, part: str, dialect: str, observed: Observation) -> tuple[str, str] | None:
        """(cause, what it behaves as) for a divergence: the smallest set of spec alternatives that reproduces
        the observation (explain), else a fault pattern that does (faults), else None. Decided once per
        distinct observation of a part: it reads no warning, so APIs that differ only in their warnings (a
        deprecated signature's) share it."""
        key = (part, dialect, *without_warnings(self._key(observed)))
        if key not in self._explained:
            def explained():
                alts = explain(self.case, observed, self.spec, part, expect=lambda s: self.expected(s, part, dialect),
                               touched=self._touched_paths())
                if alts:
                    return " + ".join(a.path for a in alts), ", ".join(map(str, alts))
                fault = find_fault(self.case, observed, self.spec, part, dialect,
                                   self.expected(self.spec, part, dialect))
                return (fault.breaks, str(fault)) if fault is not None else None
            self._explained[key] = self._remembered(
                part, dialect, b"explain " + repr(key[2:]).encode(), explained,
                lambda found: list(found or ()), _explanation_from_json)
        return self._explained[key]


def _explanation_from_json(found: list) -> tuple[str, str] | None:
    """A stored explanation, [] or [cause, what it behaves as]; anything else is a damaged entry (ValueError)."""
    if found == []:
        return None
    if type(found) is list and len(found) == 2 and all(type(x) is str and x for x in found):
        return found[0], found[1]
    raise ValueError(f"not an explanation: {found!r}")


def observation_key(observed: Observation) -> tuple:
    """Everything a verdict reads from an observation, as a hashable key (the value by digest); the warnings
    come last, where _without_warnings drops them."""
    value = observed.value
    digest = None if value is None else (value.shape, value.dtype.str,
                                          hashlib.blake2b(np.ascontiguousarray(value).view(np.uint8)).digest())
    return (digest, observed.dtype, observed.shape, observed.exception_type, observed.exception_message,
            observed.unsupported, observed.warnings)


def without_warnings(key: tuple) -> tuple:
    """An observation_key without the warnings: what `passes` reads (explanations and documentation)."""
    return key[:-1]
