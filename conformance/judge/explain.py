"""Explains a divergence by the spec choice the framework behaves as.

The spec lists, for each convention, every choice the reference can compute. For a
diverging observation, this module recomputes the expectation under each
alternative choice (and each pair of them) and reports the first under which the
observation passes: "pointwise.conventions.target_zero = ieee". Per-framework
profiles of documented deviations build on the same alternatives.

Asks the reference for expectations under alternative specs; never imports a framework.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import numpy as np

from conformance.core.case import Case
from conformance.core.choices import Alternative, alternatives, get_path, touched_paths, with_alternatives
from conformance.core.model import Expected, Observation, Spec
from conformance.judge.compare import differs_in_nonfinite_pattern, nearer, passes
from conformance.reference.grad import expected_for


def explain(case: Case, observed: Observation, spec: Spec, part: str = "forward", max_combined: int = 2,
            expect: Callable[[Spec], Expected] | None = None, dialect: str = "canonical",
            touched: frozenset[str] | None = None) -> tuple[Alternative, ...] | None:
    """The smallest set of alternative choices under which `observed` passes, or None.

    An observation that raised is explained by a choice under which the spec
    expects that very exception type (its message aside): a choice that expects a
    TypeError does not explain an AttributeError. A choice whose answer no
    observation can tell from the spec's (`indistinguishable`) explains nothing, nor does a set with a member
    whose answer the others' tell nothing from (`_each_tells`). Only alternatives whose
    choice points touch the case are tried. `expect(spec)` gives the case's
    expectation for `part` under a spec (the runner passes one that remembers), and
    `touched` the case's touched_paths, where the caller keeps them.
    """
    if observed.unsupported is not None:
        return None
    if expect is None:
        expect = lambda s: expected_for(case, s, part, dialect)  # noqa: E731
    canonical = expect(spec)
    if observed.raised and canonical.error_id is not None:
        return None  # an error was due anyway: only its type differs, which no choice explains
    touched = touched_paths(case) if touched is None else touched
    for alts in _touched_candidates(spec, max_combined, touched):
        expected = expect(_alternative_spec(spec, alts))
        if observed.raised:
            if expected.error_id is not None and expected.error_type == observed.exception_type:
                return alts
        elif passes(expected, observed) and not indistinguishable(as_answered(expected, observed), canonical) \
                and _each_tells(spec, alts, expected, expect):
            return approximations_last(spec, alts)
    return None


def as_answered(expected: Expected, observed: Observation) -> Expected:
    """`expected` as the answer was judged against it: a reduced value's candidate nearest the answer (a sum with
    its terms the second way, Expected.alternate) in place of its candidates. What tells an answer from
    the spec's is the candidate it matched: one far from the spec's answer is evidence, one near it is not."""
    if np.ndim(expected.value) != 0 or expected.alternate is None or np.ndim(expected.alternate) != 1 \
            or observed.value is None or np.shape(observed.value) != ():
        return expected
    return dataclasses.replace(expected, value=np.asarray(nearer(expected, np.asarray(observed.value, np.float64))),
                               alternate=None)


def within_rounding(case: Case, observed: Observation, spec: Spec, part: str = "forward", max_combined: int = 2,
                    expect: Callable[[Spec], Expected] | None = None, dialect: str = "canonical",
                    touched: frozenset[str] | None = None) -> tuple[Alternative, ...] | None:
    """For a divergence `explain` leaves unexplained: the smallest set of alternatives under which `observed`
    passes with the spec's own bound (the set moves values, it widens no tolerance), else the first such set (or
    none) with the alternatives their choice points list as approximations added (`looser_bound`: an error
    within their own bound), named last; or None.
    Such a set is no evidence (explain refuses it: its answer is within rounding of the spec's, or a member
    changes nothing beyond rounding), so it is never a cause; a maintainer reads it as where the answer lies,
    "within rounding of" a behaviour a row elsewhere shows beyond it."""
    if observed.raised or observed.unsupported is not None or observed.value is None:
        return None
    if expect is None:
        expect = lambda s: expected_for(case, s, part, dialect)  # noqa: E731
    canonical = expect(spec)
    if canonical.error_id is not None or canonical.value is None:
        return None
    touched = touched_paths(case) if touched is None else touched
    with np.errstate(over="ignore"):  # a bound near the largest float64 may round up to inf: no bound is wider
        limit = np.asarray(canonical.bound, dtype=np.float64) * (1 + 2.0**-20)  # the spec's bound, to its rounding
    keeping = []  # the sets that widen no bound: beside an approximation, they may hold what it does not
    for alts in _touched_candidates(spec, max_combined, touched):
        expected = expect(_alternative_spec(spec, alts))
        if expected.error_id is not None or expected.value is None or np.shape(expected.bound) != np.shape(limit):
            continue
        with np.errstate(invalid="ignore"):
            wider = np.asarray(expected.bound, dtype=np.float64) > limit
        if not wider[np.isfinite(expected.value)].any():
            if passes(expected, observed):
                return alts
            keeping.append(alts)
    looser = tuple(alts[0] for alts in _touched_candidates(spec, 1, touched) if _is_looser(spec, alts[0]))
    for alts in ((), *keeping) if looser else ():
        if any(_is_looser(spec, a) for a in alts):
            continue
        expected = expect(_alternative_spec(spec, alts + looser))
        if expected.error_id is None and expected.value is not None and passes(expected, observed):
            return alts + looser  # the approximation last: a row joins the defect of the behaviour it shows beside
            # it (core/defects.py: root_cause)
    return None


def _is_looser(spec: Spec, alternative: Alternative) -> bool:
    """Whether `alternative` states a looser bound of its own (its choice point's `looser_bound`)."""
    return alternative.choice in get_path(spec.data, alternative.path).get("looser_bound", ())


def approximations_last(spec: Spec, alts: tuple[Alternative, ...]) -> tuple[Alternative, ...]:
    """`alts` with the alternatives that state a looser bound last: a row that shows another behaviour beside an
    approximation is that behaviour's (core/defects.py: root_cause), explained or within rounding alike."""
    return tuple(a for a in alts if not _is_looser(spec, a)) + tuple(a for a in alts if _is_looser(spec, a))


def _each_tells(spec: Spec, alts: tuple[Alternative, ...], expected: Expected,
                expect: Callable[[Spec], Expected]) -> bool:
    """Whether every alternative of the set changes its answer beyond rounding: without any one of them, the set's
    expectation is told apart from `expected` (indistinguishable). A member that only widens the bound (a float32
    computation beside a NaN convention, for a float64 answer with float32's error) is no evidence of itself."""
    return len(alts) < 2 or not any(
        indistinguishable(expected, expect(_alternative_spec(spec, tuple(a for a in alts if a is not left_out))))
        for left_out in alts)


def indistinguishable(other: Expected, canonical: Expected) -> bool:
    """Whether no observation can tell `other` from the spec's answer on this case: the same dtype, shape and
    NaN/inf pattern, and nowhere are the two values further apart than twice their bounds together. An
    observation that `other` passes is then no evidence of it: it may as well be the spec's answer with an
    error just outside its bound (a wide bfloat16 bound holds a divisor of 6 and one of 4 alike).

    Is equivalent to ``not any(pattern differs) and all(|other - spec| <= 2 * (other.bound + spec.bound))``
    over the finite elements, the nearer of each side's values where either has an alternate (an element that
    may round either way, Expected.alternate) taken; a reduced value's candidates (a sum with its terms the
    second way) likewise, so explain passes the candidate an answer matched (`as_answered`).
    """
    if canonical.error_id is not None or other.error_id is not None or other.value is None or canonical.value is None:
        return False
    if other.result_dtype != canonical.result_dtype or np.shape(other.value) != np.shape(canonical.value):
        return False
    o, c = np.asarray(other.value, dtype=np.float64), np.asarray(canonical.value, dtype=np.float64)
    if differs_in_nonfinite_pattern(o, c).any():
        return False
    finite = np.isfinite(c)
    with np.errstate(invalid="ignore", over="ignore"):
        apart = np.abs(o - c)
        for a, b in ((other.alternate, c), (o, canonical.alternate), (other.alternate, canonical.alternate)):
            if a is not None and b is not None and np.shape(a) == np.shape(o) and np.shape(b) == np.shape(o):
                apart = np.fmin(apart, np.where(np.isfinite(a) & np.isfinite(b), np.abs(np.asarray(a) - b), np.inf))
        if np.ndim(o) == 0:  # a reduced value: its candidates and the other side's, each pair
            ours, theirs = (np.append(v, a if a is not None and np.ndim(a) == 1 else [])
                            for v, a in ((o, other.alternate), (c, canonical.alternate)))
            apart = np.min(np.abs(ours[:, None] - theirs[None, :]), initial=apart)
        return not (apart[finite] > 2 * (np.asarray(other.bound) + np.asarray(canonical.bound))[finite]).any()


def _candidate_sets(spec: Spec, max_combined: int) -> list[tuple[Alternative, ...]]:
    """Each set of alternatives, smallest sets first (listed once per spec)."""
    key = (spec.hash, max_combined)
    if key not in _CANDIDATES:
        singles = alternatives(spec)
        _CANDIDATES[key] = [combo for size in range(1, max_combined + 1)
                            for combo in itertools.combinations(singles, size)
                            if len({a.path for a in combo}) == size]
    return _CANDIDATES[key]


def _touched_candidates(spec: Spec, max_combined: int, touched: frozenset[str]) -> list[tuple[Alternative, ...]]:
    """The candidate sets whose every choice point touches the case, in the order of _candidate_sets.
    Listed once per set of touched paths, which cases share: filtering all the pairs again for every
    divergence would be work repeated for nothing."""
    key = (spec.hash, max_combined, touched)
    if key not in _TOUCHED:
        _TOUCHED[key] = [alts for alts in _candidate_sets(spec, max_combined) if all(a.path in touched for a in alts)]
    return _TOUCHED[key]


def _alternative_spec(spec: Spec, alts: tuple[Alternative, ...]) -> Spec:
    """`with_alternatives`, built the first time a case needs it."""
    key = (spec.hash, alts)
    if key not in _ALTERNATIVE_SPECS:
        _ALTERNATIVE_SPECS[key] = with_alternatives(spec, alts)
    return _ALTERNATIVE_SPECS[key]


_CANDIDATES: dict[tuple[str, int], list[tuple[Alternative, ...]]] = {}
_ALTERNATIVE_SPECS: dict[tuple[str, tuple[Alternative, ...]], Spec] = {}
_TOUCHED: dict[tuple[str, int, frozenset[str]], list[tuple[Alternative, ...]]] = {}
