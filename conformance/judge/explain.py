"""Explains a divergence by the spec choice the framework behaves as.

The spec lists, for each convention, every choice the reference can compute. For a
diverging observation, this module recomputes the expectation under each
alternative choice (and each pair of them) and reports the first under which the
observation passes: "pointwise.conventions.target_zero = ieee". Per-framework
profiles of documented deviations build on the same alternatives.

Asks the reference for expectations under alternative specs; never imports a framework.
"""

from __future__ import annotations

import itertools
from typing import Callable

from conformance.core.choices import Alternative, alternatives, touched_paths, with_alternatives
from conformance.core.model import Case, Expected, Observation, Spec
from conformance.judge.compare import passes
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad


def explain(case: Case, observed: Observation, spec: Spec, part: str = "forward", max_combined: int = 2,
            expect: Callable[[Spec], Expected] | None = None, dialect: str = "canonical",
            touched: frozenset[str] | None = None) -> tuple[Alternative, ...] | None:
    """The smallest set of alternative choices under which `observed` passes, or None.

    An observation that raised is explained by a choice under which the spec
    expects that very exception type (its message aside): a choice that expects a
    TypeError does not explain an AttributeError. A choice that would pass the
    spec's own answer as well explains nothing. Only alternatives whose
    choice points touch the case are tried. `expect(spec)` gives the case's
    expectation for `part` under a spec (the runner passes one that remembers), and
    `touched` the case's touched_paths, where the caller keeps them.
    """
    if observed.unsupported is not None:
        return None
    if expect is None:
        expect = (lambda s: expected_forward(case, s, dialect)) if part == "forward" else \
            (lambda s: expected_grad(case, s, part, dialect))
    if observed.raised and expect(spec).error_id is not None:
        return None  # an error was due anyway: only its type differs, which no choice explains
    touched = touched_paths(case) if touched is None else touched
    canonical = expect(spec)
    for alts in _touched_candidates(spec, max_combined, touched):
        expected = expect(_alternative_spec(spec, alts))
        if observed.raised:
            if expected.error_id is not None and expected.error_type == observed.exception_type:
                return alts
        elif passes(expected, observed) and not accepts_the_spec(expected, canonical):
            return alts
    return None


def accepts_the_spec(other: Expected, canonical: Expected) -> bool:
    """Whether `other` and the spec cannot be told apart on this case: either passes the other's answer as its
    own (the answers differ only by what rounding may do, or one bound is so wide that it holds both). An
    observation that `other` passes is then no evidence of it, only of a bound wider than the spec's."""
    if canonical.error_id is not None or other.error_id is not None or other.value is None or canonical.value is None:
        return False
    return (passes(canonical, Observation(value=other.value, dtype=other.result_dtype, shape=other.shape))
            or passes(other, Observation(value=canonical.value, dtype=canonical.result_dtype, shape=canonical.shape)))


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
