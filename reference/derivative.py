"""The pointwise derivatives the spec states, element by element: d loss / d input and d loss / d target, and
the mixed second derivative, each with the magnitude of its terms (which scales the bound) and the rule that
decided each element.

spec: gradients.log_target_false / log_target_true, gradients.conventions, gradients.second_order. The
expected gradients built on them are reference/grad.py's; reference/statements.py checks the spec's formula
texts against them. Never imports a framework.
"""

from __future__ import annotations

import numpy as np

from conformance.core.formula import VARIABLES, sum_of_abs
from conformance.core.model import Spec
from conformance.core.rounding import round_to_dtype
from conformance.reference.expapprox import approximated, saturated
from conformance.reference.pointwise import WIDE, Rounding

# Codes of a gradient's rule map, in the order of RULES.
FORMULA, TARGET_ZERO, TARGET_NEGATIVE, LOG_TARGET_NEG_INF, INFINITE_INPUT, NAN_PROPAGATION = range(6)
RULES = ("gradients.formula", "gradients.conventions.target_zero", "gradients.conventions.target_negative",
         "gradients.conventions.log_target_neg_inf", "gradients.conventions.infinite_input",
         "gradients.conventions.nan_propagation")


def pointwise_derivative(x: np.ndarray, t: np.ndarray, log_target: bool, argument: str, spec: Spec,
                         own_dtype: str | None = None, held_dtype: str | None = None,
                         rounding: Rounding = round_to_dtype):
    """dL/d(argument) per element, the sum of its terms' magnitudes (for the bound), and the rule map.

    spec: gradients.log_target_false / log_target_true (the formula and its terms), gradients.conventions.
    With `own_dtype`, exp(target) is rounded to that dtype first, by `rounding` (spec: dtypes.argument_terms); with
    `held_dtype`, it is held in that dtype, +-inf where it overflows (spec: reductions.operand), and grad_target
    is the product rule's two terms added, exp(t) * (t - x) + exp(t), so an infinite exp(t) gives what IEEE
    arithmetic gives them (NaN where t < x: inf - inf).
    """
    conventions = spec.data["gradients"]["conventions"]
    space = spec.data["gradients"][f"log_target_{str(log_target).lower()}"]
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    by_formula = np.zeros(x.shape, dtype=bool)  # elements a convention hands to the formula (keep their bound)
    with np.errstate(all="ignore"):
        if log_target:
            p = exp_target(t, spec, own_dtype, held_dtype, rounding)
            d = -p if argument == "input" else p * (t - x) + p
        else:
            d = -t if argument == "input" else np.log(t) - x + 1
    d = np.array(d, dtype=WIDE)
    magnitude = np.array(sum_of_abs(space["terms"][argument], VARIABLES["gradients.log_target_false.terms.*[]"],
                                    input=x, target=t), dtype=WIDE)
    nan_in = np.isnan(x) | np.isnan(t)
    if log_target:
        p_zero = (t == -np.inf) & ~nan_in
        rule_map[p_zero] = LOG_TARGET_NEG_INF
        nan_choice = conventions["log_target_neg_inf"]["choice"] == "nan" and argument == "target"
        d[p_zero] = np.nan if nan_choice else 0
    else:
        p_zero = (t == 0) & ~nan_in
        rule_map[p_zero] = TARGET_ZERO
        if argument == "input":
            d[p_zero] = 0
        else:
            d[p_zero] = -np.inf if conventions["target_zero"]["choice"] == "one_sided" else np.nan
        mask = (t < 0) & ~nan_in
        rule_map[mask] = TARGET_NEGATIVE
        choice = conventions["target_negative"]["choice"]
        if choice == "zero":
            d[mask] = 0
        elif argument == "target" or choice == "nan":
            d[mask] = np.nan
        else:  # formula: grad_input is -target there, rounded as the formula is everywhere
            by_formula = mask
    # spec: gradients.conventions.infinite_input -- at p = 0 with input +-inf
    mask = p_zero & np.isinf(x)
    if conventions["infinite_input"]["choice"] == "limit":
        rule_map[mask] = INFINITE_INPUT
        d[mask] = -np.sign(x[mask]) * np.inf if argument == "target" else 0
    magnitude[(rule_map != FORMULA) & ~by_formula] = 0  # a convention's constant is exact; a formula's value is not
    rule_map[nan_in] = NAN_PROPAGATION
    if conventions["nan_propagation"]["choice"] == "propagate":
        d[nan_in] = np.nan
    else:  # formula: only a NaN the formula reads propagates
        reads_input = argument == "target"
        d[nan_in] = np.where(np.isnan(t[nan_in]) | (np.isnan(x[nan_in]) & reads_input), np.nan, d[nan_in])
    return d, magnitude, rule_map


def accepts_any(rule_map: np.ndarray, spec: Spec) -> np.ndarray:
    """Per element: whether the convention that decided it accepts any value there (its choice `arbitrary`:
    the framework documents the gradient as unspecified; spec: gradients.conventions.*.choices.arbitrary)."""
    conventions = spec.data["gradients"]["conventions"]
    codes = [code for code, name in enumerate(RULES) if name.startswith("gradients.conventions.")
             and conventions[name.rsplit(".", 1)[1]]["choice"] == "arbitrary"]
    return np.isin(rule_map, codes) if codes else np.zeros(np.shape(rule_map), dtype=bool)


# The smallest normal number of each dtype: a product below it is rounded to a multiple of the smallest
# subnormal, an absolute error that dividing by a subnormal target makes large (xlogy_product_rule).
SMALLEST_NORMAL = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126, "float64": 2.0**-1022}


def xlogy_product_rule(contribution: np.ndarray, derivative: np.ndarray, scale: np.ndarray, t: np.ndarray,
                       rule_map: np.ndarray, dtype: str) -> np.ndarray:
    """grad_target's contributions (derivative * scale, log_target false) with the product rule of xlogy(t, t)
    in `dtype` where the formula holds (spec: gradients.target_product_rule.choices.xlogy).

    Is equivalent to ``(log(t) - x) * scale + fl(fl(scale) * t) / t``, fl rounding to `dtype`, at the elements
    where fl(scale) * t is below `dtype`'s smallest normal or t is +inf (inf / inf = NaN); elsewhere the
    product's rounding is relative, within the bound, and the contribution is left as it is.
    """
    with np.errstate(all="ignore"):
        g = round_to_dtype(np.asarray(scale, dtype=np.float64), dtype)
        tf = np.asarray(t, dtype=np.float64)
        where = (rule_map == FORMULA) & ((np.abs(g * tf) < SMALLEST_NORMAL[dtype]) | (tf == np.inf))
        if not where.any():
            return contribution
        product = round_to_dtype(g * tf, dtype)  # exact in float64 before the rounding: both have at most 24 bits,
        out = np.array(contribution, dtype=WIDE)  # or float64's own rounding for float64
        out[where] = ((derivative[where] - 1) * np.asarray(scale)[where]
                      + np.asarray(product[where], dtype=WIDE) / np.asarray(t[where], dtype=WIDE))
    return out


def exp_target(t: np.ndarray, spec: Spec, own_dtype: str | None, held_dtype: str | None = None,
               rounding: Rounding = round_to_dtype):
    """exp(target), rounded to `own_dtype` where the target's own terms are evaluated there (spec:
    dtypes.argument_terms.choices.own_dtype; by `rounding`), +-inf where it overflows `held_dtype`, the dtype the
    gradient's intermediates are held in (spec: reductions.operand), and where `spec` takes exp from the float32
    approximation, as that saturates (spec: dtypes.exp); the wide value otherwise."""
    p = np.exp(t)
    if own_dtype is not None:
        p = np.asarray(rounding(np.asarray(p, dtype=np.float64), own_dtype), dtype=p.dtype)
    if held_dtype is not None:
        with np.errstate(over="ignore"):
            overflow = np.isinf(round_to_dtype(np.asarray(p, dtype=np.float64), held_dtype)) & np.isfinite(p)
        p = np.where(overflow, np.inf, p)  # exp is positive: the overflow is +inf
    return saturated(p, t, spec) if approximated(spec, log_target=True) else p


def mixed_second_derivative(x: np.ndarray, t: np.ndarray, log_target: bool, spec: Spec, own_dtype: str | None = None,
                            held_dtype: str | None = None, rounding: Rounding = round_to_dtype):
    """d/dt of dL/dx per element: -1, or -exp(t) in log space (spec: gradients.second_order); exp(t) as
    pointwise_derivative forms it."""
    second = spec.data["gradients"]["second_order"]
    space = f"log_target_{str(log_target).lower()}"
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    with np.errstate(all="ignore"):
        d = np.array(-exp_target(t, spec, own_dtype, held_dtype, rounding) if log_target else -np.ones_like(t),
                     dtype=WIDE)
    magnitude = np.array(np.broadcast_to(sum_of_abs(second["terms"][space],
                                                    VARIABLES["gradients.second_order.terms.*[]"],
                                                    input=x, target=t), x.shape), dtype=WIDE)
    nan_in = np.isnan(x) | np.isnan(t)
    by_formula = np.zeros(x.shape, dtype=bool)  # elements a convention hands to the formula (keep their bound)
    if log_target:
        mask = (t == -np.inf) & ~nan_in
        rule_map[mask] = LOG_TARGET_NEG_INF
        d[mask] = 0
    else:
        mask = (t < 0) & ~nan_in
        rule_map[mask] = TARGET_NEGATIVE
        choice = spec.data["gradients"]["conventions"]["target_negative"]["choice"]
        if choice != "formula":  # nan, or zero (a clamped loss has no slope there)
            d[mask] = np.nan if choice == "nan" else 0
        else:
            by_formula = mask
    magnitude[(rule_map != FORMULA) & ~by_formula] = 0  # a convention's constant is exact; a formula's value is not
    rule_map[nan_in] = NAN_PROPAGATION
    if spec.data["gradients"]["conventions"]["nan_propagation"]["choice"] == "propagate":
        d[nan_in] = np.nan
    else:
        d[nan_in] = np.where(np.isnan(t[nan_in]) & log_target, np.nan, d[nan_in])
    return d, magnitude, rule_map
