"""The pointwise loss the spec states, element by element: its value, the magnitude of its terms (which
scales the bound) and the rule that decided each element.

spec: pointwise.log_target_false / log_target_true, pointwise.conventions. The formula's value comes from
reference/klterm.py (within 1 ulp of float64); the conventions are read from the loaded spec. The
expectations built on it are reference/forward.py's; reference/statements.py checks the spec's formula
texts against it. Never imports a framework.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from conformance.core.formula import VARIABLES, sum_of_abs
from conformance.core.model import Spec
from conformance.core.rounding import term_through_float32
from conformance.reference.klterm import kl_term, own_dtype_term

WIDE = np.longdouble
Rounding = Callable[[np.ndarray, str], np.ndarray]  # float64 values to a dtype's: round_to_dtype or second_rounding's
SMALL = 1 << 12  # past this size, a whole-array test first decides whether the element-wise work is needed

# Codes of Expected.rule_map, in the order of model.RULE_NAMES.
FORMULA, TARGET_ZERO, TARGET_NEGATIVE, LOG_TARGET_NEG_INF, NAN_PROPAGATION, INFINITIES = range(6)


def pointwise(x: np.ndarray, t: np.ndarray, log_target: bool, spec: Spec,
              extended: bool = True, own_dtype: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise loss, |term_1| + |term_2| for the bound, and the rule map.

    spec: pointwise.log_target_false / log_target_true, pointwise.conventions.
    The formula's value is within 1 ulp of float64 (klterm); with `extended` the loss is
    returned in long double with the rest of the term added (what a reduction sums), else
    in float64. The masks are read off the float64 inputs, and the magnitude, which only
    scales the bound, is float64 (klterm computes it with the term, from the same log). With `own_dtype`,
    the target's own term is evaluated in that dtype first (spec: dtypes.argument_terms).
    """
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    loss, residual, magnitude, ordinary = kl_term(x, t, log_target, residual=extended)
    if own_dtype is not None:
        loss, residual = _with_own_dtype_term(x, t, log_target, own_dtype, loss, residual)
    magnitude = term_magnitude(spec.data["pointwise"][f"log_target_{str(log_target).lower()}"]["terms"], x, t,
                               fused=magnitude, log_target=log_target)
    if ordinary:  # no convention applies (klterm's chunks saw every input finite, every t > 0 without log_target)
        return _with_residual(loss, residual, rule_map, extended), magnitude, rule_map
    nan_in = np.isnan(x) | np.isnan(t)
    inf_in = (np.isinf(x) | np.isinf(t)) & ~nan_in

    # spec: pointwise.conventions.infinities
    rule_map[inf_in] = INFINITIES
    if not log_target and spec.convention("infinities") == "xlogy":
        with np.errstate(all="ignore"):  # only taken where an input is infinite: float64 is exact there
            xlogy = np.where(t == 0, 0.0, t * np.log(t)) - t * x
        loss = np.where(inf_in & (t > 0), xlogy, loss)

    if log_target:
        # spec: pointwise.conventions.log_target_neg_inf
        mask = (t == -np.inf) & ~nan_in
        rule_map[mask] = LOG_TARGET_NEG_INF
        loss[mask] = 0 if spec.convention("log_target_neg_inf") == "zero" else np.nan
    else:
        # spec: pointwise.conventions.target_zero
        mask = (t == 0) & ~nan_in
        rule_map[mask] = TARGET_ZERO
        if spec.convention("target_zero") == "zero":
            loss[mask] = 0
        else:  # ieee: xlogy(0, 0) - 0 * x
            loss[mask] = np.where(np.isinf(x[mask]), np.nan, 0)
        # spec: pointwise.conventions.target_negative
        mask = (t < 0) & ~nan_in
        rule_map[mask] = TARGET_NEGATIVE
        loss[mask] = np.nan if spec.convention("target_negative") == "nan" else 0
    # spec: pointwise.conventions.nan_propagation (always last)
    nan_choice = spec.convention("nan_propagation")
    if not log_target and nan_choice in ("masked_by_zero_target", "where_target_positive"):
        masked = ((t == 0) & np.isnan(x)) if nan_choice == "masked_by_zero_target" else (nan_in & ~(t > 0))
        nan_in = nan_in & ~masked
        rule_map[masked] = NAN_PROPAGATION  # the convention decided this 0
        loss[masked] = 0
    rule_map[nan_in] = NAN_PROPAGATION
    loss[nan_in] = np.nan
    magnitude[rule_map != FORMULA] = 0  # convention values are exact: no rounding error to allow
    return _with_residual(loss, residual, rule_map, extended), magnitude, rule_map


def other_way(x: np.ndarray, t: np.ndarray, log_target: bool, dtype: str, loss: np.ndarray) -> np.ndarray:
    """The float64 pointwise `loss` (pointwise's, with `own_dtype`) with the target's own term rounded the second
    way (core/rounding.py: second_rounding) at each element the formula decides; the conventions' elements are the
    same."""
    return _with_own_dtype_term(x, t, log_target, dtype, loss, None, second=True)[0]


def other_way_deltas(x: np.ndarray, t: np.ndarray, log_target: bool, dtype: str) -> np.ndarray:
    """What a sum moves by where its elements' own terms are rounded the second way (second_rounding) instead of to
    nearest, in long double: a 1-d array of the finite, non-zero moves, each a candidate. An exp's or log's other
    neighbour is one element's choice, so each element's move is one (a sum takes at most one); a half-precision
    t * log(t) computed in float32 is the kernel's, so every element moves alike, and their total is the one move."""
    formula = _formula_elements(x, t, log_target)
    if not formula.any():
        return np.zeros(0, dtype=WIDE)
    xs, ts = x[formula], t[formula]
    with np.errstate(all="ignore"):
        moves = own_dtype_term(xs, ts, log_target, dtype, second=True) - own_dtype_term(xs, ts, log_target, dtype)
        if term_through_float32(dtype, log_target):
            moves = np.atleast_1d(moves.sum(dtype=WIDE))
    return moves[np.isfinite(moves) & (moves != 0)]


def _formula_elements(x: np.ndarray, t: np.ndarray, log_target: bool) -> np.ndarray:
    """Where the formula decides the term, not a convention: finite arguments, and t > 0 without log_target."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(x) & np.isfinite(t) & (True if log_target else t > 0)


def _with_own_dtype_term(x: np.ndarray, t: np.ndarray, log_target: bool, dtype: str, loss: np.ndarray,
                         residual: np.ndarray | None, second: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """loss and residual with the formula's elements (finite arguments, t > 0 without log_target) replaced by
    the term whose target terms are evaluated in `dtype` (spec: dtypes.argument_terms.choices.own_dtype), rounded
    the second way where `second`; elsewhere the conventions decide, as for the promoted terms."""
    formula = _formula_elements(x, t, log_target)
    if not formula.any():
        return loss, residual
    wide = own_dtype_term(x[formula], t[formula], log_target, dtype, second)
    loss = np.array(loss, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        loss[formula] = hi = wide.astype(np.float64)
        if residual is not None:
            residual = np.array(residual, dtype=np.float64)
            residual[formula] = np.where(np.isfinite(hi), (wide - hi.astype(WIDE)).astype(np.float64), 0.0)
    return loss, residual


def _with_residual(loss: np.ndarray, residual: np.ndarray, rule_map: np.ndarray, extended: bool) -> np.ndarray:
    """The float64 loss, or with `extended` loss + residual in long double (residual only where the formula holds)."""
    if not extended:
        return loss
    return np.asarray(np.asarray(loss, dtype=WIDE) + np.where(rule_map == FORMULA, residual, 0.0))  # 0-d stays an array


# The terms whose magnitude klterm computes in its fused pass (spec: pointwise.*.terms as shipped).
FUSED_TERMS = {False: ["target * log(target)", "target * input"], True: ["exp(target) * target", "exp(target) * input"]}


def term_magnitude(terms: list[str], x: np.ndarray, t: np.ndarray, fused: np.ndarray | None = None,
                   log_target: bool | None = None) -> np.ndarray:
    """sum |term| over the spec's terms, in float64 (it only scales a bound): klterm's fused magnitude when
    the spec states the terms it computes, else the spec's terms evaluated; where float64 overflows at
    finite arguments (|t * x| past 1.8e308 while the loss cancels), in extended precision."""
    names = VARIABLES["pointwise.log_target_false.terms[]"]
    if fused is not None and list(terms) == FUSED_TERMS[log_target]:
        magnitude = np.asarray(fused, dtype=np.float64)  # klterm's own array: pointwise may zero parts of it
    else:
        magnitude = np.array(sum_of_abs(terms, names, input=x, target=t), dtype=np.float64)
    if magnitude.size > SMALL and magnitude.max() < np.inf:  # all finite (a NaN makes the max NaN): nothing overflowed
        return magnitude
    with np.errstate(invalid="ignore"):
        overflow = ~np.isfinite(magnitude) & np.isfinite(x) & np.isfinite(t)
    if overflow.any():
        magnitude = magnitude.astype(WIDE)
        magnitude[overflow] = sum_of_abs(terms, names, input=x[overflow].astype(WIDE), target=t[overflow].astype(WIDE))
    return magnitude
