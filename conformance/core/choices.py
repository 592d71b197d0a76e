"""The spec's choice points: the places where the spec names a choice among alternatives, and how to
read, change and try them.

The explanations of the judge and the profiles' deviations both work in these terms: a
departure from the spec is "the choice point at this path set to that alternative". A choice point is
any {choice, choices} node of the spec: the spec states the vocabulary, this module only walks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from conformance.core.case import Case
from conformance.core.errors import SpecError
from conformance.core.model import FLOAT_FORMATS, Spec, spec_hash
from conformance.core.rounding import round_to_dtype, smallest_normal


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


def _smallest_normal(dtype: str) -> float:
    """A floating dtype's smallest normal; 0 for another (an integral case's dtype)."""
    return smallest_normal(dtype) if dtype in FLOAT_FORMATS else 0.0


def _may_be_subnormal(case: Case, x: np.ndarray, t: np.ndarray) -> bool:
    """`touches` for dtypes.subnormals: a nonzero value of an argument (or, in log space, of exp(target)) within
    2**40 * numel**2 of the smallest normal of the dtype it is computed in (float64 where both are float64, else
    float32's, the larger)."""
    wide = "float64" if case.dtype.input == case.dtype.target == "float64" else "float32"
    reach = smallest_normal(wide) * 2.0**40 * max(x.size, t.size, 1) ** 2
    with np.errstate(all="ignore"):
        values = (x, t, np.exp(t)) if case.params.log_target else (x, t)
        return any(bool(((v != 0) & (np.abs(v) < reach)).any()) for v in values)

# Which cases each choice point (a {choice, choices} node of the spec, by its dotted path) can
# touch. `touches` is a cheap test on the case's values (rounded to their dtypes): an alternative
# whose choice point does not touch a case cannot change that case's expectation, so it is not
# tried. Each test may say yes too often, never too seldom; tests/engine/test_explain.py checks
# that on the default suite. The paths and their alternatives are the spec's own (choice_points);
# the spec loader refuses a spec whose choice points differ from these keys.
TOUCHES = {
    "pointwise.conventions.target_zero": _TARGET_ZERO,
    "pointwise.conventions.target_negative": _TARGET_NEGATIVE,
    "pointwise.conventions.log_target_neg_inf": _LOG_TARGET_NEG_INF,
    "pointwise.conventions.infinities": _has(np.isinf),
    "pointwise.conventions.nan_propagation": _NAN,
    "reductions.mean.empty": lambda case, x, t: x.size == 0 or t.size == 0,
    # a reduction's half-precision terms (axis_sum dialects sum every case, so any reduction may)
    "reductions.operand": lambda case, x, t: bool({case.dtype.input, case.dtype.target} & {"float16", "bfloat16"}),
    "shapes.broadcasting": lambda case, x, t: x.shape != t.shape,
    "dtypes.mixed": lambda case, x, t: case.dtype.is_mixed,
    # the target's own terms in its own dtype: only a target narrower than the result differs
    "dtypes.argument_terms": lambda case, x, t: case.dtype.is_mixed,
    # a fixed computation dtype: its alternative is float32 (spec: dtypes.computation.choices), which changes
    # every call but a float32 one
    "dtypes.computation": lambda case, x, t: case.dtype.is_mixed or case.dtype.input != "float32",
    # a subnormal argument, or one whose products with the others and the gradient's scale may be (the scale is at
    # least 0.5 / numel**2), or whose exp may be, where the dtype it is computed in has subnormals to flush
    "dtypes.subnormals": lambda case, x, t: _may_be_subnormal(case, x, t),
    # exp(target) as a float32 approximation: every log-target term holds it
    "dtypes.exp": lambda case, x, t: case.params.log_target and not case.params.prob_input,
    # values given without a dtype: the framework's inference decides the call's dtype
    "dtypes.inferred.python_float": lambda case, x, t: case.construction.inferred
    and case.construction.source != "numpy",
    "dtypes.inferred.numpy_array": lambda case, x, t: case.construction.inferred
    and case.construction.source == "numpy",
    "gradients.conventions.target_zero": _TARGET_ZERO,
    "gradients.conventions.target_negative": _TARGET_NEGATIVE,
    "gradients.conventions.log_target_neg_inf": _LOG_TARGET_NEG_INF,
    "gradients.conventions.infinite_input":
        lambda case, x, t: bool(np.isinf(x).any()) and bool(((t == -np.inf) if case.params.log_target
                                                              else (t == 0)).any()),
    "gradients.conventions.nan_propagation": _NAN,
    # a target whose product with the gradient's scale may fall below the smallest normal of the dtype it is
    # computed in (the largest smallest-normal of the case's floating dtypes; the scale is at least 0.5 / numel**2),
    # or +inf
    "gradients.target_product_rule":
        lambda case, x, t: not case.params.log_target and bool(
            ((t == np.inf) | ((t > 0) & (t * 0.5 / max(t.size, x.size, 1) ** 2 < max(
                _smallest_normal(case.dtype.input), _smallest_normal(case.dtype.target))))).any()),
    "reductions.batchmean.divisor": lambda case, x, t: case.params.reduction == "batchmean" and x.shape != t.shape,
    "signature.legacy.precedence": lambda case, x, t: case.params.has_legacy,
    # a reduction that is not one: the spec's values are the generated suite's, and an alias is none of them
    "signature.parameters.reduction.alias": lambda case, x, t: not case.params.has_legacy and not case.params.reduction
    in ("none", "mean", "sum", "batchmean"),
    # Keras' dialect: only a case in probability space reaches it
    "dialects.keras.clip.epsilon_dtype": lambda case, x, t: case.params.prob_input,
    "dialects.keras.clip.boundary": lambda case, x, t: case.params.prob_input,
    "dialects.keras.clip.nan": lambda case, x, t: case.params.prob_input and bool(np.isnan(x).any()
                                                                                  or np.isnan(t).any()),
    "dialects.keras.ratio": lambda case, x, t: case.params.prob_input,
}


def is_choice_node(node) -> bool:
    """Whether a spec node is a choice point: a mapping with `choice` and its `choices`."""
    return isinstance(node, Mapping) and "choice" in node and "choices" in node


def choice_points(data, path: str = "") -> list[str]:
    """The dotted paths of every {choice, choices} node in a spec document, in document order."""
    if is_choice_node(data):
        return [path]
    if isinstance(data, Mapping):
        return [found for key, child in data.items()
                for found in choice_points(child, f"{path}.{key}" if path else str(key))]
    return []


def check_choice_points(data, shown: str) -> None:
    """Each choice names one of its own choices, each documents_only and looser_bound alternative is one of them and not the
    spec's own, and the spec's choice points are exactly TOUCHES' keys."""
    points = choice_points(data)
    for path in points:
        node = get_path(data, path)
        if node["choice"] not in node["choices"]:
            raise SpecError(f"choice {node['choice']!r} is not one of its choices {list(node['choices'])}",
                            file=shown, where=f"{path}.choice", fix=f"use one of {list(node['choices'])}")
        for key in ("documents_only", "looser_bound"):
            for name in node.get(key, ()):
                if name not in node["choices"] or name == node["choice"]:
                    raise SpecError(f"{key} names {name!r}, which is not one of the alternatives "
                                    f"{[c for c in node['choices'] if c != node['choice']]}", file=shown,
                                    where=f"{path}.{key}",
                                    fix="list only alternatives the choice point states, never its own choice")
    missing, extra = sorted(set(points) - set(TOUCHES)), sorted(set(TOUCHES) - set(points))
    if missing or extra:
        raise SpecError(f"choice points {missing} have no `touches` test, and {extra} are not in the spec" if missing
                        else f"conformance/core/choices.py has `touches` tests for {extra}, which are not choice points",
                        file=shown, where=(missing or extra)[0],
                        fix="add a `touches` test to conformance/core/choices.py TOUCHES for each new choice point, "
                            "and remove the test of one that left the spec")


@dataclass(frozen=True)
class Alternative:
    """One departure from the spec: the choice point at `path` set to `choice`."""

    path: str
    choice: str

    def __str__(self) -> str:
        return f"{self.path} = {self.choice}"


def alternatives(spec: Spec) -> list[Alternative]:
    """Every single departure an explanation may name, choice point by choice point in the order of TOUCHES
    (the loader holds its keys equal to the spec's choice points). Explanations try smaller sets of
    alternatives first, and this order decides between sets of one size.

    A choice point's `documents_only` alternatives are left out: each accepts any value where it applies
    (`arbitrary`), so it would explain every answer there and name nothing. A profile may still declare
    them (judge/profiles.py reads every choice a point lists).
    """
    found = []
    for path in TOUCHES:
        node = get_path(spec.data, path)
        left_out = set(node.get("documents_only", ()))
        found += [Alternative(path, c) for c in node["choices"] if c != node["choice"] and c not in left_out]
    return found


def touched_paths(case: Case) -> frozenset[str]:
    """The choice points whose alternatives can change `case`'s expectation (see TOUCHES)."""
    x, t = round_to_dtype(case.input, case.dtype.input), round_to_dtype(case.target, case.dtype.target)
    with np.errstate(invalid="ignore"):
        return frozenset(path for path, touches in TOUCHES.items() if touches(case, x, t))


def with_alternatives(spec: Spec, alts: tuple[Alternative, ...]) -> Spec:
    """A copy of `spec` with the given choices changed. Only the mappings on each changed choice point's path are
    copied; the rest is shared with `spec`, whose data nothing changes in place (an explanation builds hundreds
    of these, and a deep copy of the whole document was most of their cost)."""
    data = dict(spec.data)
    for alt in alts:
        node = data
        for key in alt.path.split("."):
            node[key] = dict(node[key])
            node = node[key]
        node["choice"] = alt.choice
    return Spec(data=data, source=f"{spec.source} with {', '.join(map(str, alts))}", hash=spec_hash(data))


def set_choice(data, point: str, choice: str) -> None:
    """Choose `choice` at the choice point `point`, in place."""
    get_path(data, point)["choice"] = choice


def get_path(data, dotted: str):
    """The value at a dotted spec path, e.g. ``get_path(data, "reductions.batchmean.divisor")``."""
    node = data
    for key in dotted.split("."):
        node = node[key]
    return node
