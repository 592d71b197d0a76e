"""Explains a divergence by the spec choice the framework behaves as.

The spec lists, for each convention, every choice the reference can compute. For a
diverging observation, this module recomputes the expectation under each
alternative choice (and each pair of them) and reports the first under which the
observation passes: "pointwise.conventions.target_zero = ieee". Per-framework
profiles of documented deviations build on the same alternatives.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.compare import passes
from conformance.model import Case, Expected, Observation, Spec
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from conformance.reference.rounding import round_to_dtype
from conformance.specload import spec_hash


def _has(test):
    """`touches` for a value test on input or target."""
    return lambda case, x, t: any(test(a).any() for a in (x, t))


def _target_has(test, log_target: bool):
    """`touches` for a value test on the target, in one target space."""
    return lambda case, x, t: case.params.log_target == log_target and bool(test(t).any())


_TARGET_ZERO = _target_has(lambda t: t == 0, log_target=False)
_TARGET_NEGATIVE = _target_has(lambda t: t < 0, log_target=False)
_LOG_TARGET_NEG_INF = _target_has(lambda t: t == -np.inf, log_target=True)
_NAN = _has(np.isnan)

# (spec path of the choice, key under which its alternatives are listed, which cases it can
# touch), relative to the spec root. `touches` is a cheap test on the case's values (rounded
# to their dtypes): an alternative whose choice point does not touch a case cannot change
# that case's expectation, so it is not tried. Each test may say yes too often, never too
# seldom; tests/engine/test_explain.py checks that on the default suite.
CHOICE_POINTS = (
    ("pointwise.conventions.target_zero.choice", "pointwise.conventions.target_zero.choices", _TARGET_ZERO),
    ("pointwise.conventions.target_negative.choice", "pointwise.conventions.target_negative.choices",
     _TARGET_NEGATIVE),
    ("pointwise.conventions.log_target_neg_inf.choice", "pointwise.conventions.log_target_neg_inf.choices",
     _LOG_TARGET_NEG_INF),
    ("pointwise.conventions.infinities.choice", "pointwise.conventions.infinities.choices", _has(np.isinf)),
    ("pointwise.conventions.nan_propagation.choice", "pointwise.conventions.nan_propagation.choices", _NAN),
    ("reductions.mean.empty", "reductions.mean.empties", lambda case, x, t: x.size == 0 or t.size == 0),
    ("shapes.broadcasting", "shapes.broadcastings", lambda case, x, t: x.shape != t.shape),
    ("dtypes.mixed", "dtypes.mixeds", lambda case, x, t: case.dtype.is_mixed),
    ("gradients.conventions.target_zero.choice", "gradients.conventions.target_zero.choices", _TARGET_ZERO),
    ("gradients.conventions.target_negative.choice", "gradients.conventions.target_negative.choices",
     _TARGET_NEGATIVE),
    ("gradients.conventions.log_target_neg_inf.choice", "gradients.conventions.log_target_neg_inf.choices",
     _LOG_TARGET_NEG_INF),
    ("gradients.conventions.infinite_input.choice", "gradients.conventions.infinite_input.choices",
     lambda case, x, t: bool(np.isinf(x).any()) and bool(((t == -np.inf) if case.params.log_target
                                                           else (t == 0)).any())),
    ("gradients.conventions.nan_propagation.choice", "gradients.conventions.nan_propagation.choices", _NAN),
    ("reductions.batchmean.divisor", "reductions.batchmean.divisors",
     lambda case, x, t: case.params.reduction == "batchmean" and x.shape != t.shape),
    ("signature.legacy.precedence", "signature.legacy.precedences", lambda case, x, t: case.params.has_legacy),
    # Keras' dialect: only a case in probability space reaches it
    ("dialects.keras.clip.epsilon_dtype", "dialects.keras.clip.epsilon_dtypes",
     lambda case, x, t: case.params.prob_input),
    ("dialects.keras.clip.boundary", "dialects.keras.clip.boundaries", lambda case, x, t: case.params.prob_input),
    ("dialects.keras.ratio", "dialects.keras.ratios", lambda case, x, t: case.params.prob_input),
)


@dataclass(frozen=True)
class Alternative:
    """One departure from the spec: the value at `path` set to `choice`."""

    path: str
    choice: str

    def __str__(self) -> str:
        return f"{self.path.removesuffix('.choice')} = {self.choice}"


def alternatives(spec: Spec) -> list[Alternative]:
    """Every single departure the spec allows the reference to compute."""
    found = []
    for path, choices_path, _ in CHOICE_POINTS:
        current = get_path(spec.data, path)
        found += [Alternative(path, c) for c in get_path(spec.data, choices_path) if c != current]
    return found


def touched_paths(case: Case) -> frozenset[str]:
    """The choice points whose alternatives can change `case`'s expectation (see CHOICE_POINTS)."""
    x, t = round_to_dtype(case.input, case.dtype.input), round_to_dtype(case.target, case.dtype.target)
    with np.errstate(invalid="ignore"):
        return frozenset(path for path, _, touches in CHOICE_POINTS if touches(case, x, t))


def with_alternatives(spec: Spec, alts: tuple[Alternative, ...]) -> Spec:
    """A copy of `spec` with the given choices changed."""
    data = copy.deepcopy(dict(spec.data))
    for alt in alts:
        set_path(data, alt.path, alt.choice)
    return Spec(data=data, source=f"{spec.source} with {', '.join(map(str, alts))}", hash=spec_hash(data))


def explain(case: Case, observed: Observation, spec: Spec, part: str = "forward", max_combined: int = 2,
            expect: Callable[[Spec], Expected] | None = None, dialect: str = "canonical",
            touched: frozenset[str] | None = None) -> tuple[Alternative, ...] | None:
    """The smallest set of alternative choices under which `observed` passes, or None.

    An observation that raised is explained by a choice under which the spec
    expects an error at all, whatever its exception type. Only alternatives whose
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
    for alts in _touched_candidates(spec, max_combined, touched):
        expected = expect(_alternative_spec(spec, alts))
        if observed.raised:
            if expected.error_id is not None:
                return alts
        elif passes(expected, observed):
            return alts
    return None


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
    Listed once per set of touched paths: cases share a few, and filtering the few hundred pairs for
    every divergence cost more than judging them."""
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


def get_path(data, dotted: str):
    """The value at a dotted spec path, e.g. ``get_path(data, "reductions.batchmean.divisor")``."""
    node = data
    for key in dotted.split("."):
        node = node[key]
    return node


def set_path(data, dotted: str, value) -> None:
    """Set the value at a dotted spec path, in place."""
    *parents, leaf = dotted.split(".")
    (get_path(data, ".".join(parents)) if parents else data)[leaf] = value
