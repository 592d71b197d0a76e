"""The expected forward value of kl_div for a case, with its error bound, from the spec.

Every convention is read from the loaded spec (its `choice`), never restated here.
Inputs are first rounded to their own dtypes, then the pointwise term is computed in
float64 double-double arithmetic with proven error bounds (reference/klterm.py), so the
pointwise value is within 1 ulp of float64 everywhere; reductions sum it in NumPy's
extended precision (80-bit long double on x86-64).
Never imports a framework.
"""

from __future__ import annotations

import numpy as np

from conformance.core.case import Case, Params
from conformance.core.model import RULE_NAMES, Expected, Spec
from conformance.core.rounding import round_to_dtype
from conformance.core.tolerance import pointwise_bound as tolerance_pointwise_bound
from conformance.core.tolerance import reduction_bound, sensitivity
from conformance.reference.computation import as_inferred, computed_case, flushed_result, read_flushed
from conformance.reference.dialect import keras_pointwise, operand_dtype, sum_distributions
from conformance.reference.expapprox import approximated, looser_bound, saturated_terms
from conformance.reference.pointwise import FORMULA, SMALL, WIDE, other_way, other_way_deltas, pointwise
from conformance.reference.statements import verify_formulas


def expected_forward(case: Case, spec: Spec, dialect: str = "canonical") -> Expected:
    """What the spec predicts for `case`, called through an API of `dialect`: an error, or a value with
    its bound.

    Parameters
    ----------
    case : the call; its arrays hold values exactly representable in their dtypes.
    spec : the loaded spec, whose conventions and tolerance decide the result.
    dialect : how the API states the loss (spec: dialects); canonical for torch's form.

    Returns
    -------
    Expected with `error_id` set, or `value` and `bound` in the result shape.
    """
    verify_formulas(spec)
    rules_of = spec.dialect(dialect)
    error_id = expected_error(case, spec, dialect)
    warnings = expected_warnings(case.params, spec, dialect)
    if error_id is not None:
        return Expected(result_dtype=None, error_id=error_id, error_type=spec.error_exception(error_id),
                        error_match=spec.error_match(error_id),
                        warnings=warnings, rules=(f"errors.{error_id}",))
    case = as_inferred(case, spec)  # spec: dtypes.inferred -- the call the framework makes of values without a dtype
    case = read_flushed(case, spec)  # spec: dtypes.subnormals -- the arguments as the arithmetic reads them
    computed = computed_case(case, spec)
    if computed is not None:  # spec: dtypes.computation -- the call made in that dtype
        return expected_forward(computed, spec, dialect)

    result_dtype = spec.result_dtype(case.dtype.input, case.dtype.target)
    x, t, shape = broadcast_inputs(case, dialect, spec)
    u = spec.unit_roundoff(result_dtype)
    reduction = effective_reduction(case.params, spec)
    alternate = moves = looser = None
    if rules_of["input_space"] == "probability":
        loss, magnitude, rule_map = keras_pointwise(x, t, result_dtype, spec)
    else:
        apart = reduction == "none" and not rules_of["axis_sum"]  # no element is summed with another
        # a value that is summed or divided afterwards keeps extended precision
        extended = not apart or legacy_then_batchmean(case, spec)
        own_dtype = own_terms_dtype(case, result_dtype, spec)
        loss, magnitude, rule_map = pointwise(x, t, case.params.log_target, spec, extended=extended,
                                              own_dtype=own_dtype)
        if approximated(spec, case.params.log_target):  # spec: dtypes.exp -- exp's error, then where it saturates
            looser = looser_bound(loss, t, magnitude != 0, spec)
            loss = saturated_terms(loss, x, t, spec)
        if own_dtype is not None and apart:  # each element's own term rounded the second way (divided below)
            alternate = other_way(x, t, case.params.log_target, own_dtype, loss)
            if looser is not None:
                alternate = saturated_terms(alternate, x, t, spec)
        elif own_dtype is not None and reduction != "none":
            # a sum's candidates, a dialect's sums over the last axis included (their sum is the sum of every term)
            moves = other_way_deltas(x, t, case.params.log_target, own_dtype)
    with np.errstate(invalid="ignore"):
        s = sensitivity(x, t, case.params.log_target, spec)
        if np.ndim(s) or s != 0:  # a constant 0 (spec: sensitivity without log_target) needs no mask
            s = np.where(rule_map == FORMULA, s, 0.0)
        # magnitude is this function's own array (klterm's or the dialect's), not needed after this
        pointwise_bound = tolerance_pointwise_bound(magnitude, s, result_dtype, spec, overwrite=True)
        if looser is not None:
            pointwise_bound = pointwise_bound + looser

    rules = _rules_used(case, spec, rule_map, reduction, shape)
    if rules_of["axis_sum"]:  # spec: dialects.*.axis_sum -- one value per distribution, then the reduction
        loss, pointwise_bound, rule_map = sum_distributions(loss, pointwise_bound, rule_map, result_dtype, u, spec)
        shape = shape[:-1]
    if reduction == "none":
        value, bound = loss, pointwise_bound
    else:
        # spec: reductions.operand -- the pointwise loss as a tensor of the result dtype (or of float32)
        operand = in_result_dtype(loss, operand_dtype(result_dtype, spec)).astype(WIDE)
        operand[np.isfinite(operand)] = loss[np.isfinite(operand)]
        divisor = reduction_divisor(reduction, loss.size, case.input.shape, shape, spec)
        value = reduce_operand(operand, reduction, divisor, spec)
        bound = reduction_bound(pointwise_bound, operand, divisor, value, u, spec)
        if moves is not None and moves.size and divisor and np.isfinite(value):
            with np.errstate(all="ignore"):
                alternate = (operand.sum(dtype=WIDE) + moves) / WIDE(divisor)
    if legacy_then_batchmean(case, spec):
        # spec: signature.legacy.precedence.choices.legacy_then_batchmean
        batch = case.input.shape[0] if case.input.ndim else 1
        with np.errstate(all="ignore"):
            value = np.asarray(value, dtype=WIDE) / WIDE(batch) if batch else np.full(np.shape(value), np.nan, dtype=WIDE)
            bound = np.asarray(bound, dtype=WIDE) / WIDE(batch or 1) + WIDE(u) * np.abs(value)
            alternate = None if alternate is None or not batch else np.asarray(alternate, dtype=WIDE) / WIDE(batch)
    value = in_result_dtype(np.asarray(value), result_dtype)
    return flushed_result(Expected(result_dtype=result_dtype, shape=shape if reduction == "none" else (), value=value,
                                   bound=as_bound(bound), warnings=warnings, rules=rules,
                                   rule_map=rule_map if reduction == "none" else None,
                                   alternate=other_values(value, alternate, result_dtype)), spec)


def other_values(value: np.ndarray, alternate: np.ndarray | None, result_dtype: str) -> np.ndarray | None:
    """Expected.alternate: `alternate` in the result dtype where it differs from `value` anywhere, else None. A
    reduced (0-d) value's alternates are its candidates, each once: the values that differ from it, sorted."""
    if alternate is None:
        return None
    alternate = in_result_dtype(np.asarray(alternate), result_dtype)
    same = (alternate == value) | (np.isnan(alternate) & np.isnan(value))
    if np.ndim(value) == 0 and np.ndim(alternate) == 1:
        return np.unique(alternate[~same & np.isfinite(alternate)]) if not same.all() else None
    return None if same.all() else alternate


def own_terms_dtype(case: Case, result_dtype: str, spec: Spec) -> str | None:
    """The dtype the target's own terms are evaluated in before promotion, where the spec's choice makes it
    one narrower than the result dtype (spec: dtypes.argument_terms = own_dtype); None where they are
    computed as every other term is."""
    if not case.dtype.is_mixed or case.dtype.target == result_dtype:
        return None
    return case.dtype.target if spec.data["dtypes"]["argument_terms"]["choice"] == "own_dtype" else None


def takes_input_space(case: Case, dialect: str, spec: Spec) -> bool:
    """Whether an API of `dialect` takes the case's input as given: log-probabilities, or probabilities
    (spec: dialects.*.input_space; a case states its own, Params.prob_input)."""
    return case.params.prob_input == (spec.dialect(dialect)["input_space"] == "probability")


def broadcast_inputs(case: Case, dialect: str, spec: Spec) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The case's input and target rounded to their dtypes and broadcast to one shape, in the input space
    the dialect takes (an API of another input space cannot express the case: it is unsupported)."""
    if not takes_input_space(case, dialect, spec):
        raise ValueError(f"case {case.id!r} gives {'probabilities' if case.params.prob_input else 'log-probabilities'}"
                         f" as input; dialect {dialect!r} takes the other (the adapter must call it unsupported)")
    x, t = _in_dtype(case.input, case.dtype.input), _in_dtype(case.target, case.dtype.target)
    shape = np.broadcast_shapes(x.shape, t.shape)
    return np.broadcast_to(x, shape), np.broadcast_to(t, shape), shape  # read-only views


def _in_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values rounded to their dtype; float64 ones as they are, not copied (a copy of 16M elements cost a
    fifth of the reference's time), which is safe because callers get read-only views."""
    return np.asarray(values, dtype=np.float64) if dtype == "float64" else round_to_dtype(values, dtype)


# What an empty reduction's value names in the spec (reductions.*.empty).
EMPTY_VALUES = {"nan": np.nan, "zero": 0.0}


def stated(node):
    """A spec value that is either stated plainly or chosen at a choice point ({choice, choices})."""
    return node["choice"] if isinstance(node, dict) and "choices" in node else node


def reduce_operand(operand: np.ndarray, reduction: str, divisor: int, spec: Spec):
    """The reduced value (spec: reductions): the sum over the divisor; a reduction whose divisor is 0 gives
    its stated empty value (reductions.*.empty), and a non-empty batch of empty rows is the empty sum
    over the batch."""
    rules = spec.data["reductions"]
    if divisor == 0:
        return WIDE(EMPTY_VALUES[stated(rules[reduction]["empty"])])
    if operand.size == 0:
        return WIDE(EMPTY_VALUES[stated(rules["sum"]["empty"])]) / WIDE(divisor)
    with np.errstate(all="ignore"):  # inf - inf in the sum is a NaN the spec predicts
        return operand.sum(dtype=WIDE) / WIDE(divisor)


FLOAT64_MAX = np.finfo(np.float64).max
# Arrays up to this many elements take the plain full-array passes: there a NumPy call costs more
# than the pass, and the shortcuts below (reductions first, no copies) add calls.


def as_bound(bound) -> np.ndarray:
    """A bound in float64: one past float64's range (terms near 1e308 in a narrow dtype) is the largest
    float64, still finite (spec: tolerance.comparison -- a finite value has a finite bound). Returned as
    it is (not copied) when nothing is past the range: callers only read bounds."""
    with np.errstate(over="ignore"):
        bound = np.asarray(bound, dtype=np.float64)
    if bound.size > SMALL and bound.max() <= FLOAT64_MAX:  # a NaN makes max NaN: minimum keeps it
        return bound
    return np.minimum(bound, FLOAT64_MAX)


def legacy_then_batchmean(case: Case, spec: Spec) -> bool:
    """Whether the spec's legacy precedence divides a legacy result by the batch (spec: signature.legacy)."""
    return (case.params.has_legacy and case.params.reduction == "batchmean"
            and spec.data["signature"]["legacy"]["precedence"]["choice"] == "legacy_then_batchmean")


def in_result_dtype(value: np.ndarray, result_dtype: str) -> np.ndarray:
    """The float64 value, with magnitudes that overflow the result dtype set to +-inf (spec: dtypes.precision)."""
    with np.errstate(over="ignore"):  # a long double past float64's range is inf, as in the dtype
        out = np.asarray(value).astype(np.float64, copy=result_dtype != "float64")  # copied where changed below
    if result_dtype != "float64":  # a float64 value cannot overflow float64
        overflow = np.isinf(round_to_dtype(out, result_dtype)) & np.isfinite(out)
        out[overflow] = np.copysign(np.inf, out[overflow])
    return out


# What each divisor the spec names is (spec: reductions.*.divisor): (n, input's shape, the reduced shape,
# the size the spec states for a 0-d shape) -> the divisor.
DIVISORS = {
    "one": lambda n, input_shape, shape, zero_dim: 1,
    "numel": lambda n, input_shape, shape, zero_dim: n,
    "broadcast_dim0": lambda n, input_shape, shape, zero_dim: int(shape[0]) if shape else zero_dim,
    "input_dim0": lambda n, input_shape, shape, zero_dim: (int(input_shape[0]) if input_shape and shape
                                                           else zero_dim),
}


def reduction_divisor(reduction: str, n: int, input_shape: tuple[int, ...], shape: tuple[int, ...], spec: Spec) -> int:
    """What the summed loss is divided by: the divisor the spec states for the reduction (reductions.*.divisor,
    and zero_dim_divisor where it states one)."""
    rule = spec.data["reductions"][reduction]
    zero_dim = int(rule["zero_dim_divisor"]) if "zero_dim_divisor" in rule else None
    return DIVISORS[stated(rule["divisor"])](n, input_shape, shape, zero_dim)


def effective_reduction(params: Params, spec: Spec) -> str:
    """The reduction a call performs (spec: signature.legacy)."""
    if params.has_legacy:
        return spec.legacy_reduction(params.size_average, params.reduce)
    return "mean" if params.reduction == _alias(spec) else params.reduction


def _alias(spec: Spec) -> str | None:
    """The other name the spec's chosen `signature.parameters.reduction.alias` takes for mean, or None."""
    choice = spec.data["signature"]["parameters"]["reduction"]["alias"]["choice"]
    return None if choice == "none" else choice


def expected_error(case: Case, spec: Spec, dialect: str = "canonical") -> str | None:
    """The id of the first spec error that applies to `case` in `dialect`, or None (spec: errors)."""
    rules_of = spec.dialect(dialect)
    checks = {
        "unknown_reduction": lambda: not case.params.has_legacy and case.params.reduction not in rules_of["reductions"]
        and case.params.reduction != _alias(spec),
        "integral_dtype": lambda: any(d not in spec.floating_dtypes for d in (case.dtype.input, case.dtype.target)),
        "mixed_dtypes": lambda: case.dtype.is_mixed and spec.data["dtypes"]["mixed"]["choice"] == "reject",
        "incompatible_shapes": lambda: not _broadcasts(case.input.shape, case.target.shape)
        or (spec.data["shapes"]["broadcasting"]["choice"] == "none" and case.input.shape != case.target.shape),
        "no_distribution_axis": lambda: rules_of["axis_sum"] and np.broadcast_shapes(case.input.shape,
                                                                                  case.target.shape) == (),
    }
    for error_id in spec.error_order:
        if checks[error_id]():
            return error_id
    return None


def expected_warnings(params: Params, spec: Spec, dialect: str = "canonical") -> tuple[str, ...]:
    """Advisory warnings the spec expects of a call through an API of `dialect` (spec: warnings.expected,
    each row's `when`)."""
    axis_sum = spec.dialect(dialect)["axis_sum"]
    return tuple(row["id"] for row in spec.data["warnings"]["expected"]
                 if row["when"]["legacy"] == params.has_legacy
                 and ("reduction" not in row["when"] or params.reduction in row["when"]["reduction"])
                 and row["when"].get("axis_sum", axis_sum) == axis_sum)


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def conventions_applied(rule_map: np.ndarray, names: tuple[str, ...], formula: int) -> list[str]:
    """The names of the rule codes in `rule_map` other than `formula`, in code order (the forward's and the
    gradients' rule maps alike); a large map is not sorted whole, only its convention codes."""
    codes = np.unique(rule_map if rule_map.size <= SMALL else rule_map[rule_map != formula])
    return [names[code] for code in codes.tolist() if code != formula]


def _rules_used(case: Case, spec: Spec, rule_map: np.ndarray, reduction: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """Spec paths that shaped this expected value beyond the plain formula."""
    rules = conventions_applied(rule_map, RULE_NAMES, FORMULA)
    if case.params.has_legacy:
        rules.append("signature.legacy")
    if case.input.shape != case.target.shape:
        rules.append("shapes.broadcasting")
    if case.dtype.is_mixed:
        rules.append("dtypes.promotion")
    if reduction != "none" and 0 in shape:
        rules.append(f"reductions.{reduction}.empty")
    if reduction == "batchmean" and (case.input.shape[:1] != shape[:1] or not shape):
        rules.append("reductions.batchmean.divisor")
    return tuple(rules)
