"""Expected gradients of kl_div with respect to input and target, with their bounds, from the spec.

spec: gradients. The pointwise derivatives are computed in extended precision,
scaled by the upstream gradient over the reduction's divisor, and summed back over
broadcast dimensions to each argument's shape. Never imports a framework.
"""

from __future__ import annotations

import numpy as np

from conformance.model import GRAD_PARTS, Case, Expected, Spec, upstream_gradient
from conformance.reference.forward import (WIDE, effective_reduction, expected_error, expected_warnings,
                                           in_result_dtype, legacy_then_batchmean, reduction_divisor)
from conformance.reference.rounding import round_to_dtype
from conformance.tolerance import summation_gamma

FORMULA, TARGET_ZERO, TARGET_NEGATIVE, LOG_TARGET_NEG_INF, NAN_PROPAGATION = range(5)
RULES = ("gradients.formula", "gradients.conventions.target_zero", "gradients.conventions.target_negative",
         "gradients.conventions.log_target_neg_inf", "gradients.conventions.nan_propagation")


def expected_grad(case: Case, spec: Spec, part: str) -> Expected:
    """What the spec predicts for `part` ("grad_input" or "grad_target") of `case`.

    Parameters
    ----------
    case : the call; its arrays hold values exactly representable in their dtypes.
    spec : the loaded spec (gradients, tolerance.gradient).
    part : which argument's gradient.

    Returns
    -------
    Expected with `error_id` set (as for the forward call), or the gradient with its
    bound, in the argument's shape and dtype.
    """
    error_id = expected_error(case, spec)
    if error_id is not None:
        return Expected(result_dtype=None, error_id=error_id, error_type=spec.error_exception(error_id),
                        warnings=expected_warnings(case.params), rules=(f"errors.{error_id}",))
    argument = GRAD_PARTS[part]
    arg_dtype = getattr(case.dtype, argument)
    result_dtype = spec.result_dtype(case.dtype.input, case.dtype.target)
    x = round_to_dtype(case.input, case.dtype.input)
    t = round_to_dtype(case.target, case.dtype.target)
    shape = np.broadcast_shapes(x.shape, t.shape)
    xb, tb = np.broadcast_to(x, shape).astype(WIDE), np.broadcast_to(t, shape).astype(WIDE)

    if part == "grad2_input":
        derivative, magnitude, rule_map = mixed_second_derivative(xb, tb, case.params.log_target, spec)
    else:
        derivative, magnitude, rule_map = pointwise_derivative(xb, tb, case.params.log_target, argument, spec)
    reduction = effective_reduction(case.params, spec)
    divisor = 1 if reduction in ("none", "sum") else reduction_divisor(reduction, int(np.prod(shape)),
                                                                       case.input.shape, shape, spec)
    if legacy_then_batchmean(case, spec):
        divisor *= case.input.shape[0] if case.input.ndim else 1
    upstream = upstream_gradient(shape if reduction == "none" else ())
    if part == "grad2_input":  # the second upstream, w, over grad_input's shape, broadcast back
        upstream = upstream * np.broadcast_to(upstream_gradient(case.input.shape), shape)
    with np.errstate(all="ignore"):
        scale = np.broadcast_to(upstream.astype(WIDE) / WIDE(divisor) if divisor else WIDE(np.nan), shape)
        contribution = derivative * scale
        u = max(spec.unit_roundoff(result_dtype), spec.unit_roundoff(arg_dtype))
        sensitivity = np.where(rule_map == FORMULA, np.abs(tb - xb), 0) if case.params.log_target else 0
        bound = spec.tolerance_factor() * (u * magnitude * np.abs(scale)
                                           + spec.smallest_subnormal(arg_dtype) * (1 + sensitivity))
    arg_shape = case.input.shape if argument == "input" else case.target.shape
    summed = contribution.size // max(int(np.prod(arg_shape)), 1)
    with np.errstate(all="ignore"):
        value, bound = sum_to_shape(contribution, arg_shape), sum_to_shape(bound, arg_shape)
        if summed > 1:  # spec: tolerance.gradient -- summing back over broadcast elements
            bound = bound + WIDE(summation_gamma(summed, u)) * sum_to_shape(np.abs(contribution), arg_shape)
    rules = tuple(RULES[c] for c in sorted(set(np.unique(rule_map).tolist()) - {FORMULA}))
    return Expected(result_dtype=arg_dtype, shape=tuple(arg_shape), value=in_result_dtype(value, arg_dtype),
                    bound=np.asarray(bound, dtype=np.float64), rules=rules,
                    rule_map=rule_map if tuple(arg_shape) == shape else None, rule_names=RULES)


def pointwise_derivative(x: np.ndarray, t: np.ndarray, log_target: bool, argument: str, spec: Spec):
    """dL/d(argument) per element, the sum of its terms' magnitudes (for the bound), and the rule map."""
    conventions = spec.data["gradients"]["conventions"]
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    with np.errstate(all="ignore"):
        if log_target:
            p = np.exp(t)
            if argument == "input":
                d, magnitude = -p, np.abs(p)
            else:
                d = p * (t - x + 1)
                magnitude = np.abs(p * t) + np.abs(p * x) + np.abs(p)
        else:
            if argument == "input":
                d, magnitude = -t, np.abs(t)
            else:
                log_t = np.log(t)
                d = log_t - x + 1
                magnitude = np.abs(log_t) + np.abs(x) + 1
    d, magnitude = np.array(d, dtype=WIDE), np.array(magnitude, dtype=WIDE)
    nan_in = np.isnan(x) | np.isnan(t)
    if log_target:
        mask = (t == -np.inf) & ~nan_in
        rule_map[mask] = LOG_TARGET_NEG_INF
        nan_choice = conventions["log_target_neg_inf"]["choice"] == "nan" and argument == "target"
        d[mask] = np.nan if nan_choice else 0
    else:
        mask = (t == 0) & ~nan_in
        rule_map[mask] = TARGET_ZERO
        if argument == "input":
            d[mask] = 0
        else:
            d[mask] = -np.inf if conventions["target_zero"]["choice"] == "one_sided" else np.nan
        mask = (t < 0) & ~nan_in
        rule_map[mask] = TARGET_NEGATIVE
        if argument == "target" or conventions["target_negative"]["choice"] == "nan":
            d[mask] = np.nan
    magnitude[rule_map != FORMULA] = 0
    rule_map[nan_in] = NAN_PROPAGATION
    if conventions["nan_propagation"]["choice"] == "propagate":
        d[nan_in] = np.nan
    else:  # formula: only a NaN the formula reads propagates
        reads_input = argument == "target"
        d[nan_in] = np.where(np.isnan(t[nan_in]) | (np.isnan(x[nan_in]) & reads_input), np.nan, d[nan_in])
    return d, magnitude, rule_map


def mixed_second_derivative(x: np.ndarray, t: np.ndarray, log_target: bool, spec: Spec):
    """d/dt of dL/dx per element: -1, or -exp(t) in log space (spec: gradients.second_order)."""
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    with np.errstate(all="ignore"):
        d = np.array(-np.exp(t) if log_target else -np.ones_like(t), dtype=WIDE)
    magnitude = np.array(np.abs(d), dtype=WIDE)  # np.array: 0-d stays an array
    nan_in = np.isnan(x) | np.isnan(t)
    if log_target:
        mask = (t == -np.inf) & ~nan_in
        rule_map[mask] = LOG_TARGET_NEG_INF
        d[mask] = 0
    else:
        mask = (t < 0) & ~nan_in
        rule_map[mask] = TARGET_NEGATIVE
        if spec.data["gradients"]["conventions"]["target_negative"]["choice"] == "nan":
            d[mask] = np.nan
    magnitude[rule_map != FORMULA] = 0
    rule_map[nan_in] = NAN_PROPAGATION
    if spec.data["gradients"]["conventions"]["nan_propagation"]["choice"] == "propagate":
        d[nan_in] = np.nan
    else:
        d[nan_in] = np.where(np.isnan(t[nan_in]) & log_target, np.nan, d[nan_in])
    return d, magnitude, rule_map


def sum_to_shape(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `values` over the dimensions broadcasting added or stretched, back to `shape`.

    Is equivalent to the gradient of ``np.broadcast_to(a, values.shape)`` with respect to `a`.
    """
    lead = values.ndim - len(shape)
    out = values.sum(axis=tuple(range(lead)), dtype=WIDE) if lead else values
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True, dtype=WIDE)
    return np.asarray(out, dtype=WIDE).reshape(shape)
