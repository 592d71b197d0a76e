"""The spec's error bounds (spec: tolerance): pointwise, summation, reduction and gradient.

Owns the arithmetic of the tolerance policy and nothing else: every bound is the spec's own
formula (conformance/core/formula.py), evaluated with the names the spec's `names` text describes.
It never widens a bound for a case. Inputs are NumPy arrays or scalars, float64 or extended.
"""

from __future__ import annotations

import numpy as np

from conformance.core.formula import VARIABLES, evaluate
from conformance.core.model import Spec


def _rule(spec: Spec, name: str) -> dict:
    return spec.data["tolerance"][name]


def sensitivity(x: np.ndarray, t: np.ndarray, log_target: bool, spec: Spec):
    """s, how much an absolute error of an underflowing intermediate is amplified (spec:
    tolerance.pointwise.sensitivity): ``abs(t - x)`` with log_target, ``0`` without."""
    text = _rule(spec, "pointwise")["sensitivity"][f"log_target_{str(log_target).lower()}"]
    return evaluate(text, VARIABLES["tolerance.pointwise.sensitivity.*"], input=x, target=t)


def gradient_sensitivity(x: np.ndarray, t: np.ndarray, log_target: bool, which: str, spec: Spec):
    """s of one gradient (spec: tolerance.gradient.sensitivity.<which>): which is input, target or second_order."""
    text = _rule(spec, "gradient")["sensitivity"][which][f"log_target_{str(log_target).lower()}"]
    return evaluate(text, VARIABLES["tolerance.gradient.sensitivity.*.*"], input=x, target=t)


# Elements a piece when a large bound is written over its magnitude (pointwise_bound's `overwrite`).
PIECE = 1 << 16


def pointwise_bound(magnitude: np.ndarray, sensitivity: np.ndarray, result_dtype: str, spec: Spec,
                    overwrite: bool = False) -> np.ndarray:
    """factor * (u * magnitude + tiny * (1 + s)), per element (spec: tolerance.pointwise).

    Is equivalent to ``8 * (2**-24 * (abs(t * log(t)) + abs(t * x)) + 2**-149)`` for float32
    without log_target (s = 0), and to ``8 * (2**-24 * (abs(exp(t) * t) + abs(exp(t) * x))
    + 2**-149 * (1 + abs(t - x)))`` with it.

    With `overwrite` (the caller gives magnitude up), a large float64 magnitude is overwritten
    with the bound a piece at a time and returned: the formula is elementwise, so each element
    is computed exactly as in one pass, and a second array of that size is not needed (fresh
    memory for it cost more than the formula's arithmetic).
    """
    rule = _rule(spec, "pointwise")
    values = dict(factor=rule["factor"], u=spec.unit_roundoff(result_dtype), tiny=spec.smallest_subnormal(result_dtype))
    names = VARIABLES["tolerance.pointwise.formula"]
    if not (overwrite and magnitude.size > PIECE and magnitude.dtype == np.float64 and magnitude.flags.c_contiguous
            and magnitude.flags.writeable and np.result_type(magnitude, sensitivity) == np.float64
            and np.shape(sensitivity) in ((), np.shape(magnitude))):
        bound = evaluate(rule["formula"], names, **values, magnitude=magnitude, s=sensitivity)
        return np.broadcast_to(bound, np.shape(magnitude))
    flat = magnitude.reshape(-1)
    each = np.ndim(sensitivity) == 0
    s = sensitivity if each else np.ascontiguousarray(sensitivity).reshape(-1)
    for start in range(0, flat.size, PIECE):
        piece = slice(start, start + PIECE)
        flat[piece] = evaluate(rule["formula"], names, **values, magnitude=flat[piece], s=s if each else s[piece])
    return magnitude


def summation_gamma(n: int, u: float, spec: Spec, part: str = "reduction") -> float:
    """Relative error of a tree summation of n terms (spec: tolerance.<part>.gamma): (ceil(log2 n) + 1) * u."""
    return float(evaluate(_rule(spec, part)["gamma"], VARIABLES[f"tolerance.{part}.gamma"], n=n, u=u))


def reduction_bound(pointwise_bounds: np.ndarray, loss: np.ndarray, divisor: int, value, u: float, spec: Spec,
                    axis: int | None = None):
    """(sum_bounds + gamma * sum_abs) / divisor + 2u |result| (spec: tolerance.reduction), over every
    element, or along one `axis` (one bound per sum along it).

    Is equivalent to ``(b.sum() + gamma(n) * abs(L).sum()) / d + 2 * u * abs(value)``; the sums are
    taken in the operands' (extended) precision. A divisor of 0 (the mean of nothing) divides by 1:
    the value is then NaN and needs no bound.
    """
    wide = pointwise_bounds.dtype.type
    n = loss.size if axis is None else loss.shape[axis]
    with np.errstate(all="ignore"):
        return evaluate(_rule(spec, "reduction")["formula"], VARIABLES["tolerance.reduction.formula"],
                        sum_bounds=pointwise_bounds.sum(axis=axis, dtype=wide),
                        sum_abs=np.abs(loss).sum(axis=axis, dtype=wide),
                        gamma=wide(summation_gamma(n, u, spec)), divisor=wide(divisor or 1),
                        result=value, u=wide(u))


def gradient_bound(magnitude, scale, sensitivity, u: float, tiny: float, spec: Spec):
    """factor * (u * magnitude * |scale| + tiny * (1 + s)), per element (spec: tolerance.gradient)."""
    return evaluate(_rule(spec, "gradient")["formula"], VARIABLES["tolerance.gradient.formula"],
                    factor=_rule(spec, "pointwise")["factor"], u=u, tiny=tiny, magnitude=magnitude,
                    scale=scale, s=sensitivity)


def gradient_summation(n: int, sum_abs, u: float, spec: Spec):
    """What summing n broadcast contributions back into one element adds (spec: tolerance.gradient.summation)."""
    gamma = np.asarray(sum_abs).dtype.type(summation_gamma(n, u, spec, part="gradient"))
    return evaluate(_rule(spec, "gradient")["summation"], VARIABLES["tolerance.gradient.summation"],
                    gamma=gamma, sum_abs=sum_abs)
