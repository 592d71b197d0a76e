"""The spec's choice points: the places where the spec names a choice among alternatives, and how to
read, change and try them.

The explanations of the judge and the profiles' deviations both work in these terms: a
departure from the spec is "the value at this path set to that choice".
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from conformance.core.model import Case, Spec
from conformance.core.rounding import round_to_dtype
from conformance.core.specload import spec_hash


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
