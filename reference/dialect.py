"""What the dialects of the spec compute beyond the canonical loss (spec: dialects).

Two compositions: a sum over the last axis into one value per distribution (distribution_sum,
keras), and Keras' probability-space terms, clipped to [epsilon, 1] and formed as
target * log(target / input). Every number and choice is read from the spec; the canonical
pointwise loss and its conventions stay in pointwise.py. Never imports a framework.
"""

from __future__ import annotations

import numpy as np

from conformance.core.formula import VARIABLES, evaluate, sum_of_abs
from conformance.core.model import RULE_NAMES, Spec
from conformance.core.rounding import round_to_dtype
from conformance.core.tolerance import reduction_bound

WIDE = np.longdouble
NAMES = VARIABLES["pointwise.log_target_false.terms[]"]  # input and target
FORMULA, CLIPPED, RATIO, NAN = (RULE_NAMES.index(p) for p in ("pointwise.formula", "dialects.keras.clip",
                                                                  "dialects.keras.ratio",
                                                                  "pointwise.conventions.nan_propagation"))


def clip_bounds(spec: Spec, result_dtype: str) -> tuple[float, float]:
    """(epsilon, 1) as the clip applies them: epsilon rounded to the dtype the spec's choice names
    (spec: dialects.keras.clip.epsilon, epsilon_dtype)."""
    clip = spec.data["dialects"]["keras"]["clip"]
    dtype = result_dtype if clip["epsilon_dtype"]["choice"] == "result" else "float32"
    return float(round_to_dtype(np.asarray(clip["epsilon"]), dtype)), 1.0


def keras_pointwise(q: np.ndarray, t: np.ndarray, result_dtype: str, spec: Spec):
    """Keras' terms t' * log(t' / q') with t' and q' clipped to [epsilon, 1] (spec: dialects.keras), in
    extended precision: the terms, the sum of their terms' magnitudes (for the bound) and the rule map.

    log(t' / q') is log_ratio's: within a few units of long double's roundoff even where t' and q'
    nearly cancel.
    """
    keras = spec.data["dialects"]["keras"]
    low, high = clip_bounds(spec, result_dtype)
    with np.errstate(invalid="ignore"):
        qc, tc = np.clip(q, low, high), np.clip(t, low, high)  # NaN stays NaN
    qw, tw = qc.astype(WIDE), tc.astype(WIDE)
    with np.errstate(all="ignore"):
        loss = np.asarray(tw * log_ratio(tw, qw), dtype=WIDE)
    rule_map = np.full(q.shape, FORMULA, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        rule_map[(qc != q) | (tc != t)] = CLIPPED
    if keras["ratio"]["choice"] == "ieee":  # spec: dialects.keras.ratio.choices.ieee -- t'/q' formed in the result dtype
        with np.errstate(all="ignore"):
            overflow = np.isinf(round_to_dtype(tc / qc, result_dtype)) & np.isfinite(tc / qc)
        loss[overflow] = np.inf
        rule_map[overflow] = RATIO
    nan = np.isnan(q) | np.isnan(t)
    loss[nan] = np.nan
    rule_map[nan] = NAN
    magnitude = np.array(sum_of_abs(keras["terms"], NAMES, input=qc, target=tc), dtype=np.float64)
    magnitude[(rule_map == RATIO) | nan] = 0
    return loss, magnitude, rule_map


def log_ratio(t: np.ndarray, q: np.ndarray) -> np.ndarray:
    """log(t / q) in long double, accurate where the ratio is near 1 and where it is not.

    Near 1 (|t - q| < q / 2) it is log1p((t - q) / q): t - q is exact (Sterbenz: both are values of a
    narrower dtype and within a factor 2) and the quotient is rounded once, so the small result keeps
    its relative accuracy. Elsewhere log(t / q): the rounded ratio's relative error 2**-64 is an
    absolute error of the log, small against |log(t / q)| >= log(3/2).
    """
    with np.errstate(all="ignore"):
        near = np.abs(t - q) < q / 2
        return np.where(near, np.log1p((t - q) / q), np.log(t / q))


def clip_slope(v: np.ndarray, low: float, high: float, boundary: str, selects: bool = False) -> np.ndarray:
    """The clip's derivative at v: 1 inside (low, high), 0 outside, and at low or high 1 (inside) or
    1/2 (half) (spec: dialects.keras.clip.boundary); at NaN, NaN, or 0 where the clip's backward selects
    (spec: dialects.keras.clip.nan)."""
    slope = np.where((v > low) & (v < high), 1.0, 0.0)
    slope = np.where((v == low) | (v == high), 1.0 if boundary == "inside" else 0.5, slope)
    return slope if selects else np.where(np.isnan(v), np.nan, slope)


def keras_gradient(q: np.ndarray, t: np.ndarray, which: str, result_dtype: str, spec: Spec):
    """d/d(which) of Keras' clipped term per element (spec: dialects.keras.gradients, clip): which is
    input, target or second_order (d/dt of d/dq). Returns the derivative (extended precision), the sum
    of its terms' magnitudes, its sensitivity to an underflowing intermediate (spec:
    dialects.keras.gradients.sensitivity, of the clipped arguments) and the rule map."""
    keras = spec.data["dialects"]["keras"]
    low, high = clip_bounds(spec, result_dtype)
    boundary, selects = keras["clip"]["boundary"]["choice"], keras["clip"]["nan"]["choice"] == "zero"
    with np.errstate(invalid="ignore"):
        qc, tc = np.clip(q, low, high), np.clip(t, low, high)
    qw, tw = qc.astype(WIDE), tc.astype(WIDE)
    slope_q, slope_t = clip_slope(q, low, high, boundary, selects), clip_slope(t, low, high, boundary, selects)
    with np.errstate(all="ignore"):
        if which == "input":
            d, slope = -(tw / qw) * slope_q, slope_q
        elif which == "target":
            d, slope = (log_ratio(tw, qw) + 1) * slope_t, slope_t
        else:
            d, slope = -(slope_t * slope_q) / qw, slope_q * slope_t
        if selects:  # spec: dialects.keras.clip.nan.choices.zero -- the clip passed last selects: 0 where it is
            # closed, NaN or not (d/dt of grad_input passes target's clip last: input's 0 at NaN is divided by NaN)
            d = np.where((slope_q if which == "input" else slope_t) == 0, 0.0, d)
    d = np.asarray(d, dtype=WIDE)
    rule_map = np.full(q.shape, FORMULA, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        rule_map[(qc != q) | (tc != t)] = CLIPPED
    magnitude = np.array(sum_of_abs(keras["gradients"]["terms"][which], NAMES, input=qw, target=tw), dtype=WIDE)
    with np.errstate(invalid="ignore"):
        magnitude = magnitude * np.where(np.isnan(slope), 0, slope)
    nan = np.isnan(q) | np.isnan(t)
    if not selects and spec.data["gradients"]["conventions"]["nan_propagation"]["choice"] == "propagate":
        d[nan] = np.nan
    rule_map[nan] = NAN
    magnitude[nan] = 0
    with np.errstate(all="ignore"):
        s = np.broadcast_to(evaluate(keras["gradients"]["sensitivity"][which],
                                     VARIABLES["dialects.keras.gradients.sensitivity.*"], input=qw, target=tw), d.shape)
    return d, magnitude, np.where(nan, 0, s), rule_map  # a clipped argument's value is the formula's too


def sum_distributions(loss: np.ndarray, bound: np.ndarray, rule_map: np.ndarray, result_dtype: str, u: float,
                      spec: Spec):
    """The values D, one per distribution: the terms summed over the last axis (spec: dialects.*.axis_sum),
    each term taken in the result dtype (spec: reductions.operand), with each sum's bound by the
    reduction formula (divisor 1), and the rule map of each row (its first rule other than the formula).
    """
    operand = _in_result_dtype(loss, operand_dtype(result_dtype, spec))
    with np.errstate(all="ignore"):
        value = operand.sum(axis=-1, dtype=WIDE)
        value_bound = reduction_bound(bound.astype(WIDE), operand, 1, value, u, spec, axis=-1)
    special = np.where(rule_map == FORMULA, 0, rule_map)
    rows = special.max(axis=-1) if special.size else np.zeros(loss.shape[:-1], dtype=np.int8)
    return np.asarray(value, dtype=WIDE), np.asarray(value_bound, dtype=WIDE), np.asarray(rows, dtype=np.int8)


def operand_dtype(result_dtype: str, spec: Spec) -> str:
    """The dtype a reduction's terms are kept in (spec: reductions.operand): the result dtype, or float32 for
    float16 and bfloat16 terms where the choice is float32_accumulation."""
    if spec.data["reductions"]["operand"]["choice"] == "float32_accumulation" and result_dtype in ("float16",
                                                                                                   "bfloat16"):
        return "float32"
    return result_dtype


def _in_result_dtype(loss: np.ndarray, result_dtype: str) -> np.ndarray:
    """The terms as a tensor of the result dtype: overflowing magnitudes are +-inf, others exact in WIDE."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = round_to_dtype(np.asarray(loss, dtype=np.float64), result_dtype)
    operand = np.array(loss, dtype=WIDE)
    overflow = np.isinf(rounded) & np.isfinite(loss)
    operand[overflow] = np.copysign(np.inf, rounded[overflow])
    return operand
