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


# Sample points of the load-time check below: arguments of the sensitivities (log_target false: a
# probability target; true: a log-space one), magnitudes and element counts of the bounds.
_SAMPLE_INPUT = np.array([-30.0, -3.0, -1.0, 0.0, 0.5, 2.0, 30.0])
_SAMPLE_TARGET = {False: np.array([0.0, 1e-3, 0.25, 1.0, 3.0, 1e3]), True: np.array([-30.0, -3.0, 0.0, 1.0, 5.0])}
_SAMPLE_MAGNITUDES = np.array([1.0, 3.0, 1e3, 1e30])
_SAMPLE_COUNTS = (1, 2, 1000, 10**6)
_BOUND_FIX = "write a bound that is finite, non-negative and smaller than the value it bounds (see spec: tolerance)"


def check_tolerance_formulas(data: dict, shown: str) -> None:
    """Evaluate every tolerance formula of a spec document on sample points, for every float dtype the spec
    states constants for, as the formula statements are checked against the reference: a bound that comes
    out non-finite, negative, or larger than the value it bounds would let every answer pass (or stop a run
    midway), so it is a SpecError naming the formula's path and the sample."""
    from conformance.core.errors import SpecError

    rules = data["tolerance"]
    sensitivities = [(f"tolerance.pointwise.sensitivity.{key}", text, VARIABLES["tolerance.pointwise.sensitivity.*"])
                     for key, text in rules["pointwise"]["sensitivity"].items()]
    sensitivities += [(f"tolerance.gradient.sensitivity.{which}.{key}", text,
                       VARIABLES["tolerance.gradient.sensitivity.*.*"])
                      for which, texts in rules["gradient"]["sensitivity"].items() for key, text in texts.items()]

    def check(where: str, text: str, value, bounded, sample: str) -> None:
        value = np.asarray(value, dtype=np.float64)
        bounded = np.broadcast_to(np.asarray(bounded, dtype=np.float64), value.shape)
        for problem, bad in (("is not finite", ~np.isfinite(value)), ("is negative", value < 0),
                             ("is larger than the value it bounds", value > bounded)):
            if bad.any():
                i = np.flatnonzero(bad.reshape(-1))[0]
                raise SpecError(f"the bound {problem}: {text!r} gives {float(value.reshape(-1)[i])!r} for a value of "
                                f"magnitude {float(bounded.reshape(-1)[i])!r}, at {sample}", file=shown, where=where,
                                fix=_BOUND_FIX)

    for where, text, names in sensitivities:
        log_target = where.endswith("log_target_true")
        x, t = np.meshgrid(_SAMPLE_INPUT, _SAMPLE_TARGET[log_target])
        check(where, text, evaluate(text, names, input=x, target=t), np.inf, "the sample inputs and targets")
    factor = rules["pointwise"]["factor"]
    for dtype, u in data["dtypes"]["unit_roundoff"].items():
        tiny = data["dtypes"]["smallest_subnormal"][dtype]
        at = f"{dtype} (u={u!r}, tiny={tiny!r})"
        for s in (0.0, 10.0):
            names = VARIABLES["tolerance.pointwise.formula"]
            text = rules["pointwise"]["formula"]
            check("tolerance.pointwise.formula", text,
                  evaluate(text, names, factor=factor, u=u, tiny=tiny, magnitude=_SAMPLE_MAGNITUDES, s=s),
                  _SAMPLE_MAGNITUDES, f"magnitudes {_SAMPLE_MAGNITUDES.tolist()}, s={s}, {at}")
            check("tolerance.pointwise.formula", text,
                  evaluate(text, names, factor=factor, u=u, tiny=tiny, magnitude=0.0, s=s), np.inf,
                  f"magnitude 0, s={s}, {at}")
            text = rules["gradient"]["formula"]
            for scale in (1.0, 0.5):
                check("tolerance.gradient.formula", text,
                      evaluate(text, VARIABLES["tolerance.gradient.formula"], factor=factor, u=u, tiny=tiny,
                               magnitude=_SAMPLE_MAGNITUDES, scale=scale, s=s),
                      _SAMPLE_MAGNITUDES * scale, f"magnitudes {_SAMPLE_MAGNITUDES.tolist()}, scale {scale}, "
                                                  f"s={s}, {at}")
        pointwise = evaluate(rules["pointwise"]["formula"], VARIABLES["tolerance.pointwise.formula"],
                             factor=factor, u=u, tiny=tiny, magnitude=1.0, s=0.0)
        for n in _SAMPLE_COUNTS:
            gammas = {}
            for part in ("reduction", "gradient"):
                text = rules[part]["gamma"]
                gammas[part] = evaluate(text, VARIABLES[f"tolerance.{part}.gamma"], n=n, u=u)
                check(f"tolerance.{part}.gamma", text, gammas[part], 1.0, f"n={n}, {at}")
            text = rules["gradient"]["summation"]
            check("tolerance.gradient.summation", text,
                  evaluate(text, VARIABLES["tolerance.gradient.summation"], gamma=gammas["gradient"],
                           sum_abs=float(n)), float(n), f"n={n}, sum_abs={n}, {at}")
            text = rules["reduction"]["formula"]
            for divisor in (1, n):
                result = n / divisor  # n terms of |L| = 1 and pointwise bound of magnitude 1: no cancellation
                check("tolerance.reduction.formula", text,
                      evaluate(text, VARIABLES["tolerance.reduction.formula"], sum_bounds=n * pointwise,
                               sum_abs=float(n), gamma=gammas["reduction"], divisor=float(divisor),
                               result=result, u=u), result,
                      f"n={n} terms of magnitude 1, divisor {divisor}, {at}")
