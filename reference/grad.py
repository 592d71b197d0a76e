"""Expected gradients of kl_div with respect to input and target, with their bounds, from the spec.

spec: gradients. The pointwise derivatives are computed in extended precision,
scaled by the upstream gradient over the reduction's divisor, and summed back over
broadcast dimensions to each argument's shape. Never imports a framework.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from conformance.core.case import Case
from conformance.core.model import GRAD_PARTS, Expected, Spec, upstream_gradient
from conformance.core.rounding import round_to_dtype, second_rounding
from conformance.core.tolerance import gradient_bound, gradient_sensitivity, gradient_summation
from conformance.reference import dialect
from conformance.reference.computation import as_inferred, cast_back, computed_case, flushed_result, read_flushed
from conformance.reference.forward import (WIDE, as_bound, broadcast_inputs, conventions_applied, effective_reduction,
                                           expected_error, expected_forward, expected_warnings, in_result_dtype,
                                           legacy_then_batchmean, other_values, own_terms_dtype, reduction_divisor)
from conformance.reference.derivative import (FORMULA, NAN_PROPAGATION, RULES, accepts_any,
                                              mixed_second_derivative, pointwise_derivative, xlogy_product_rule)
from conformance.reference.expapprox import approximated, looser_bound
from conformance.reference.pointwise import Rounding
from conformance.reference.statements import verify_formulas


# The rules of Keras' gradients (spec: dialects.keras), in the codes reference/dialect.py gives them.
KERAS_RULES = {dialect.FORMULA: FORMULA, dialect.CLIPPED: len(RULES), dialect.NAN: NAN_PROPAGATION}
RULE_NAMES = RULES + ("dialects.keras.clip",)


def expected_for(case: Case, spec: Spec, part: str, dialect: str = "canonical") -> Expected:
    """The spec's expectation for one part of a case, called through an API of `dialect`: the forward's
    (forward.py) or a gradient's."""
    return expected_forward(case, spec, dialect) if part == "forward" else expected_grad(case, spec, part, dialect)


def expected_grad(case: Case, spec: Spec, part: str, dialect_name: str = "canonical",
                  upstream_of: Callable[[tuple[int, ...]], np.ndarray] = upstream_gradient) -> Expected:
    """What the spec predicts for `part` ("grad_input", "grad_target" or "grad2_input") of `case`, called
    through an API of `dialect_name`.

    Parameters
    ----------
    case : the call; its arrays hold values exactly representable in their dtypes.
    spec : the loaded spec (gradients, tolerance.gradient, dialects).
    part : which argument's gradient.
    dialect_name : how the API states the loss (spec: dialects).
    upstream_of : the gradient flowing into the loss for a result shape; the spec's (gradients.upstream)
        unless the judge asks what a gradient that ignores it would be (judge/faults.py).

    Returns
    -------
    Expected with `error_id` set (as for the forward call), or the gradient with its
    bound, in the argument's shape and dtype.
    """
    verify_formulas(spec)
    rules_of = spec.dialect(dialect_name)
    error_id = expected_error(case, spec, dialect_name)
    if error_id is not None:
        return Expected(result_dtype=None, error_id=error_id, error_type=spec.error_exception(error_id),
                        error_match=spec.error_match(error_id),
                        warnings=expected_warnings(case.params, spec, dialect_name), rules=(f"errors.{error_id}",))
    case = as_inferred(case, spec)  # spec: dtypes.inferred -- the call the framework makes of values without a dtype
    case = read_flushed(case, spec)  # spec: dtypes.subnormals -- the arguments as the arithmetic reads them
    argument = GRAD_PARTS[part]
    arg_dtype = getattr(case.dtype, argument)
    computed = computed_case(case, spec)
    if computed is not None:  # spec: dtypes.computation -- the call made in that dtype, cast back to the argument's
        return cast_back(expected_grad(computed, spec, part, dialect_name, upstream_of), arg_dtype, spec)
    result_dtype = spec.result_dtype(case.dtype.input, case.dtype.target)
    x, t, shape = broadcast_inputs(case, dialect_name, spec)
    xb, tb = x.astype(WIDE), t.astype(WIDE)

    which = "second_order" if part == "grad2_input" else argument
    own_dtype = own_terms_dtype(case, result_dtype, spec)

    def derivative_of(rounding: Rounding):
        if part == "grad2_input":
            return mixed_second_derivative(xb, tb, case.params.log_target, spec, own_dtype,
                                           dialect.operand_dtype(result_dtype, spec), rounding)
        return pointwise_derivative(xb, tb, case.params.log_target, argument, spec, own_dtype,
                                    dialect.operand_dtype(result_dtype, spec), rounding)

    if rules_of["input_space"] == "probability":
        derivative, magnitude, keras_s, keras_map = dialect.keras_gradient(x, t, which, result_dtype, spec)
        rule_map = np.vectorize(KERAS_RULES.get, otypes=[np.int8])(keras_map) if keras_map.size else keras_map
    else:
        derivative, magnitude, rule_map = derivative_of(round_to_dtype)
        keras_s = None
    reduction = effective_reduction(case.params, spec)
    out_shape = shape[:-1] if rules_of["axis_sum"] else shape  # spec: dialects.*.axis_sum
    divisor = 1 if reduction == "none" else reduction_divisor(reduction, int(np.prod(out_shape)),
                                                              case.input.shape, out_shape, spec)
    if legacy_then_batchmean(case, spec):
        divisor *= case.input.shape[0] if case.input.ndim else 1
    upstream = upstream_of(out_shape if reduction == "none" else ())
    if rules_of["axis_sum"] and reduction == "none":  # each distribution's upstream, over its terms
        upstream = np.broadcast_to(upstream[..., None], shape)
    if part == "grad2_input":  # the second upstream, w, over grad_input's shape, broadcast back
        upstream = upstream * np.broadcast_to(upstream_of(case.input.shape), shape)
    with np.errstate(all="ignore"):
        scale = np.broadcast_to(upstream.astype(WIDE) / WIDE(divisor) if divisor else WIDE(np.nan), shape)

        def contribution_of(derivative):
            if (part == "grad_target" and not case.params.log_target and rules_of["input_space"] == "log"
                    and spec.data["gradients"]["target_product_rule"]["choice"] == "xlogy"):
                return xlogy_product_rule(derivative * scale, derivative, scale, tb, rule_map,
                                          own_dtype or result_dtype)
            return derivative * scale

        contribution = contribution_of(derivative)
        u = max(spec.unit_roundoff(result_dtype), spec.unit_roundoff(arg_dtype))
        s = (np.where(rule_map == FORMULA, gradient_sensitivity(xb, tb, case.params.log_target, which, spec), 0)
             if keras_s is None else keras_s)
        bound = np.broadcast_to(gradient_bound(magnitude, scale, s, u, spec.smallest_subnormal(arg_dtype), spec),
                                shape)
        if approximated(spec, case.params.log_target) and rules_of["input_space"] == "log":  # spec: dtypes.exp
            bound = bound + looser_bound(contribution, tb, magnitude != 0, spec)
    arg_shape = case.input.shape if argument == "input" else case.target.shape
    summed = contribution.size // max(int(np.prod(arg_shape)), 1)
    with np.errstate(all="ignore"):
        value, bound = sum_to_shape(contribution, arg_shape), sum_to_shape(bound, arg_shape)
        if summed > 1:  # spec: tolerance.gradient.summation -- summing back over broadcast elements
            bound = bound + gradient_summation(summed, sum_to_shape(np.abs(contribution), arg_shape), u, spec)
        # each element's own term rounded the second way, where no element is summed with another
        alternate = (contribution_of(derivative_of(second_rounding(own_dtype, case.params.log_target))[0])
                     if own_dtype is not None and summed == 1 and rules_of["input_space"] == "log" else None)
    rules = tuple(conventions_applied(rule_map, RULE_NAMES, FORMULA))
    value, bound = in_result_dtype(value, arg_dtype), as_bound(bound)
    anything = accepts_any(rule_map, spec)
    if anything.any():  # a gradient that sums an unspecified element is unspecified (judge/compare.py: accepts_any)
        anything = sum_to_shape(anything.astype(np.float64), arg_shape) > 0
        value, bound = np.where(anything, np.nan, value), np.where(anything, np.inf, bound)
        alternate = None if alternate is None else np.where(anything.reshape(np.shape(alternate)), np.nan, alternate)
    return flushed_result(Expected(
        result_dtype=arg_dtype, shape=tuple(arg_shape), value=value, bound=bound, rules=rules,
        rule_map=rule_map if tuple(arg_shape) == shape else None, rule_names=RULE_NAMES,
        alternate=other_values(value, None if alternate is None else np.reshape(alternate, np.shape(value)),
                               arg_dtype)), spec)


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
