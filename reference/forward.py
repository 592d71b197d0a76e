"""The expected forward value of kl_div for a case, with its error bound, from the spec.

Every convention is read from the loaded spec (its `choice`), never restated here.
Inputs are first rounded to their own dtypes, then the loss is computed in NumPy's
extended precision (80-bit long double on x86-64), with the few terms where
log(t) - input cancels recomputed in 40-digit decimal arithmetic, and returned in
float64, so the pointwise value is within 1 ulp of float64 everywhere.
Never imports a framework.
"""

from __future__ import annotations

import decimal

import numpy as np

from conformance.model import RULE_NAMES, Case, Expected, Params, Spec
from conformance.reference.rounding import round_to_dtype
from conformance.tolerance import pointwise_bound as tolerance_pointwise_bound, reduction_bound

WIDE = np.longdouble

# Codes of Expected.rule_map, in the order of model.RULE_NAMES.
FORMULA, TARGET_ZERO, TARGET_NEGATIVE, LOG_TARGET_NEG_INF, NAN_PROPAGATION, INFINITIES = range(len(RULE_NAMES))


def expected_forward(case: Case, spec: Spec) -> Expected:
    """What the spec predicts for `case`: an error, or a value with its bound.

    Parameters
    ----------
    case : the call; its arrays hold values exactly representable in their dtypes.
    spec : the loaded spec, whose conventions and tolerance decide the result.

    Returns
    -------
    Expected with `error_id` set, or `value` and `bound` in the result shape.
    """
    error_id = expected_error(case, spec)
    warnings = expected_warnings(case.params)
    if error_id is not None:
        return Expected(result_dtype=None, error_id=error_id, error_type=spec.error_exception(error_id),
                        warnings=warnings, rules=(f"errors.{error_id}",))

    result_dtype = spec.result_dtype(case.dtype.input, case.dtype.target)
    x = round_to_dtype(case.input, case.dtype.input)
    t = round_to_dtype(case.target, case.dtype.target)
    shape = np.broadcast_shapes(x.shape, t.shape)
    x, t = np.broadcast_to(x, shape), np.broadcast_to(t, shape)

    loss, magnitude, rule_map = pointwise(x, t, case.params.log_target, spec)
    u = spec.unit_roundoff(result_dtype)
    with np.errstate(invalid="ignore"):
        sensitivity = np.abs(t - x) if case.params.log_target else np.zeros(shape)
        pointwise_bound = tolerance_pointwise_bound(magnitude, np.where(rule_map == FORMULA, sensitivity, 0.0),
                                                    result_dtype, spec)

    reduction = effective_reduction(case.params, spec)
    rules = _rules_used(case, spec, rule_map, reduction, shape)
    if reduction == "none":
        value, bound = loss, pointwise_bound
    else:
        # spec: reductions.operand -- the pointwise loss as a tensor of the result dtype
        operand = in_result_dtype(loss, result_dtype).astype(WIDE)
        operand[np.isfinite(operand)] = loss[np.isfinite(operand)]
        divisor = reduction_divisor(reduction, loss.size, case.input.shape, shape, spec)
        with np.errstate(all="ignore"):
            value = operand.sum(dtype=WIDE) / WIDE(divisor) if divisor else WIDE(np.nan)
        if reduction == "mean" and loss.size == 0 and spec.data["reductions"]["mean"]["empty"] == "zero":
            value = WIDE(0)  # spec: reductions.mean.empties.zero
        bound = reduction_bound(pointwise_bound, operand, divisor, value, u)
    if legacy_then_batchmean(case, spec):
        # spec: signature.legacy.precedences.legacy_then_batchmean
        batch = case.input.shape[0] if case.input.ndim else 1
        with np.errstate(all="ignore"):
            value = np.asarray(value, dtype=WIDE) / WIDE(batch) if batch else np.full(np.shape(value), np.nan, dtype=WIDE)
            bound = np.asarray(bound, dtype=WIDE) / WIDE(batch or 1) + WIDE(u) * np.abs(value)
    return Expected(result_dtype=result_dtype, shape=shape if reduction == "none" else (),
                    value=in_result_dtype(np.asarray(value), result_dtype),
                    bound=np.asarray(bound, dtype=np.float64), warnings=warnings, rules=rules,
                    rule_map=rule_map if reduction == "none" else None)


def legacy_then_batchmean(case: Case, spec: Spec) -> bool:
    """Whether the spec's legacy precedence divides a legacy result by the batch (spec: signature.legacy)."""
    return (case.params.has_legacy and case.params.reduction == "batchmean"
            and spec.data["signature"]["legacy"]["precedence"] == "legacy_then_batchmean")


def in_result_dtype(value: np.ndarray, result_dtype: str) -> np.ndarray:
    """The float64 value, with magnitudes that overflow the result dtype set to +-inf (spec: dtypes.precision)."""
    out = np.asarray(value).astype(np.float64)
    overflow = np.isinf(round_to_dtype(out, result_dtype)) & np.isfinite(out)
    out[overflow] = np.copysign(np.inf, out[overflow])
    return out


def pointwise(x: np.ndarray, t: np.ndarray, log_target: bool, spec: Spec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise loss in extended precision, |term_1| + |term_2| for the bound, and the rule map.

    spec: pointwise.log_target_false / log_target_true, pointwise.conventions.
    Only the loss needs extended precision: the masks are read off the float64 inputs
    (which convert exactly), and the magnitude, which only scales the bound, is float64.
    """
    xw, tw = x.astype(WIDE), t.astype(WIDE)
    rule_map = np.full(x.shape, FORMULA, dtype=np.int8)
    with np.errstate(all="ignore"):
        if log_target:
            p = np.exp(tw)
            loss = p * (tw - xw)  # the limit form: spec pointwise.conventions.infinities = limit
            p64 = np.exp(t)
            magnitude = np.abs(p64 * t) + np.abs(p64 * x)
        else:
            log_t = np.log(tw)
            loss = tw * (log_t - xw)
            log_t64 = np.log(t)
            magnitude = np.abs(t * log_t64) + np.abs(t * x)
            _refine_cancellation(loss, log_t64, x, t)
    loss, magnitude = np.asarray(loss, dtype=WIDE), np.asarray(magnitude, dtype=np.float64)  # 0-d stays an array
    nan_in = np.isnan(x) | np.isnan(t)
    special = ~np.isfinite(x) | ~np.isfinite(t) | (t <= 0) if not log_target else ~np.isfinite(x) | ~np.isfinite(t)
    if not special.any():
        return loss, magnitude, rule_map  # no convention applies: the formula everywhere
    inf_in = (np.isinf(x) | np.isinf(t)) & ~nan_in

    # spec: pointwise.conventions.infinities
    rule_map[inf_in] = INFINITIES
    if not log_target and spec.convention("infinities") == "xlogy":
        with np.errstate(all="ignore"):
            xlogy = np.where(tw == 0, WIDE(0), tw * np.log(tw)) - tw * xw
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
    magnitude[rule_map != FORMULA] = 0  # convention values are exact: no rounding error to allow

    # spec: pointwise.conventions.nan_propagation (always last)
    if not log_target and spec.convention("nan_propagation") == "masked_by_zero_target":
        nan_in = nan_in & ~((t == 0) & ~np.isnan(t))
        loss[(t == 0) & np.isnan(x)] = 0
    rule_map[nan_in] = NAN_PROPAGATION
    loss[nan_in] = np.nan
    return loss, magnitude, rule_map


def _refine_cancellation(loss: np.ndarray, log_t: np.ndarray, x: np.ndarray, t: np.ndarray) -> None:
    """Recompute, in 40-digit decimal arithmetic, the terms where log(t) - x cancels.

    Extended precision leaves log(t) - x with a relative error of about
    kappa * 2**-64, kappa = |log t| / |log t - x|; past kappa = 2**10 that is no
    longer within 1 ulp of float64. Such elements (q == p up to rounding) are
    recomputed exactly enough with the standard library's decimal module. kappa
    only selects elements, so the float64 `log_t` is precise enough for it.
    """
    with np.errstate(all="ignore"):
        ill = np.abs(log_t) > 2.0**10 * np.abs(log_t - x)
    ill &= np.isfinite(log_t) & np.isfinite(x) & (t > 0)
    if not ill.any():
        return
    flat_loss = loss.reshape(-1)  # a view: `loss` is a fresh array, possibly 0-d
    flat_t, flat_x = np.asarray(t).reshape(-1), np.asarray(x).reshape(-1)
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        for i in np.flatnonzero(ill):
            t_i = decimal.Decimal(float(flat_t[i]))
            flat_loss[i] = WIDE(float(t_i * (t_i.ln() - decimal.Decimal(float(flat_x[i])))))


def reduction_divisor(reduction: str, n: int, input_shape: tuple[int, ...], shape: tuple[int, ...], spec: Spec) -> int:
    """What the summed loss is divided by (spec: reductions.mean.divisor, reductions.batchmean)."""
    if reduction == "sum":
        return 1
    if reduction == "mean":
        return n
    rule = spec.data["reductions"]["batchmean"]
    if len(shape) == 0:
        return int(rule["zero_dim_divisor"])
    if rule["divisor"] == "input_dim0":
        return int(input_shape[0]) if input_shape else int(rule["zero_dim_divisor"])
    return int(shape[0])


def effective_reduction(params: Params, spec: Spec) -> str:
    """The reduction a call performs (spec: signature.legacy)."""
    if params.has_legacy:
        return spec.legacy_reduction(params.size_average, params.reduce)
    return params.reduction


def expected_error(case: Case, spec: Spec) -> str | None:
    """The id of the first spec error that applies to `case`, or None (spec: errors)."""
    checks = {
        "unknown_reduction": lambda: not case.params.has_legacy and case.params.reduction not in spec.reductions,
        "integral_dtype": lambda: any(d not in spec.floating_dtypes for d in (case.dtype.input, case.dtype.target)),
        "mixed_dtypes": lambda: case.dtype.is_mixed and spec.data["dtypes"]["mixed"] == "reject",
        "incompatible_shapes": lambda: not _broadcasts(case.input.shape, case.target.shape)
        or (spec.data["shapes"]["broadcasting"] == "none" and case.input.shape != case.target.shape),
    }
    for error_id in spec.error_order:
        if checks[error_id]():
            return error_id
    return None


def expected_warnings(params: Params) -> tuple[str, ...]:
    """Advisory warnings the spec expects (spec: warnings.expected)."""
    if params.has_legacy:
        return ("legacy_arguments",)
    if params.reduction == "mean":
        return ("mean_not_kl",)
    return ()


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _rules_used(case: Case, spec: Spec, rule_map: np.ndarray, reduction: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """Spec paths that shaped this expected value beyond the plain formula."""
    rules = [RULE_NAMES[code] for code in sorted(set(np.unique(rule_map).tolist()) - {FORMULA})]
    if case.params.has_legacy:
        rules.append("signature.legacy")
    if case.input.shape != case.target.shape:
        rules.append("shapes.broadcasting")
    if case.dtype.is_mixed:
        rules.append("dtypes.promotion")
    if reduction != "none" and 0 in shape:
        rules.append("reductions.batchmean.empty_batch" if reduction == "batchmean" else f"reductions.{reduction}.empty")
    if reduction == "batchmean" and (case.input.shape[:1] != shape[:1] or not shape):
        rules.append("reductions.batchmean.divisor")
    return tuple(rules)
