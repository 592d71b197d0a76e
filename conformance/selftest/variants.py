"""The planted faults, one small class each: a `Variant` plants its kind of fault into one call's answer.

Each variant reads a `Call` (the framework's answer and the reference's expectations) and returns the answer
with its fault planted, or None where its fault does not apply there; it names the spec rule the fault breaks,
and says, from the adapter's declared APIs and profile alone, where no call can carry it. What a variant
plants depends only on the case, the framework's own answer and the expectations: never on a verdict. The
crash and the hang end the worker itself, on a few cases chosen by id. VARIANTS lists them in the order the
self-test runs and reports them.

Plants faults only into a framework's answers (the crash and the hang: into its worker); never changes the judge or
the reference it tests.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import replace

import numpy as np

from conformance.core.case import Case
from conformance.core.choices import alternatives
from conformance.core.model import FLOAT_FORMATS, Expected, Observation
from conformance.core.rounding import round_to_dtype
from conformance.judge.faults import scaled
from conformance.reference.forward import in_result_dtype, reduction_divisor
from conformance.reference.grad import expected_for, expected_grad
from conformance.run.task import FRAMEWORK_CRASH, FRAMEWORK_TIMEOUT
from conformance.selftest.fault import Call, GradientVariant, Variant, alternative_spec, expectation, is_fault, record


def _answer(call: Call) -> np.ndarray | None:
    """The framework's values where they have the expected shape, as a float64 copy."""
    obs, e = call.observed, call.expected
    if obs.value is None or e.value is None or np.shape(obs.value) != tuple(e.shape):
        return None
    return np.array(obs.value, dtype=np.float64)


def _distinct(call: Call, fault: Expected) -> Observation | None:
    """The fault's answer as the reference computes it (the framework's answer, rescaled, would carry one
    rounding more), where an answer can tell it from the spec's: their NaN/inf patterns differ, or somewhere
    their values are further apart than twice their bounds together (a divisor that changes a sum of near-zero
    terms by less than its bound is no fault any answer shows). Restated here, as the comparison rule is in
    fault.py, beside the judge's own test (explain.indistinguishable)."""
    want = call.expected
    if fault.value is None or want.value is None or np.shape(fault.value) != np.shape(want.value):
        return None
    pattern = [test(fault.value) != test(want.value) for test in (np.isnan, np.isposinf, np.isneginf)]
    finite = np.isfinite(want.value) & np.isfinite(fault.value)
    with np.errstate(invalid="ignore", over="ignore"):
        apart = np.abs(fault.value - want.value)[finite] > 2 * (fault.bound + want.bound)[finite]
    if not (np.any(pattern) or apart.any()):
        return None
    return _with(call, fault.value)


def _with(call: Call, values: np.ndarray) -> Observation:
    """The observation with other values, rounded to the dtype the framework answered in."""
    return replace(call.observed, value=in_result_dtype(values, call.observed.dtype))


class ValueOutsideRounding(Variant):
    name, fault = "value_outside_rounding", "every finite value moved just outside the spec's bound, in the result dtype"

    def plant(self, call):
        got = _answer(call)
        if got is None:
            return None
        want, bound = call.expected.value, call.expected.bound
        finite = np.isfinite(want)
        sign = np.where(np.arange(want.size).reshape(want.shape) % 2 == 0, 1.0, -1.0)
        got[finite] = _beyond(want[finite], bound[finite], sign[finite], call.observed.dtype)
        return _with(call, got)


class WrongDivisor(Variant):
    name, fault = "wrong_divisor", ("mean divides by the batch (or by every element, where the batch is its divisor) "
                                    "and batchmean by the number of results")

    def plant(self, call):
        p = call.case.params
        if call.part != "forward" or p.has_legacy or p.reduction not in ("mean", "batchmean") or not call.conforms:
            return None
        shape = np.broadcast_shapes(call.case.input.shape, call.case.target.shape)
        out_shape = shape[:-1] if call.spec.dialect(call.dialect)["axis_sum"] else shape
        n = int(np.prod(out_shape))
        right = reduction_divisor(p.reduction, n, call.case.input.shape, out_shape, call.spec)
        wrong = (out_shape[0] if out_shape else 1) if p.reduction == "mean" else n
        if wrong == right:  # a mean over distributions already divides by the batch: over every element then
            wrong = int(np.prod(shape))
        if right == wrong or not wrong:
            return None
        summed = expected_for(replace(call.case, params=replace(p, reduction="sum")), call.spec, "forward",
                              call.dialect)
        return _distinct(call, scaled(summed, 1.0 / wrong, call.spec))

    def rule(self, call):
        return f"reductions.{call.case.params.reduction}.divisor"

    def not_applicable(self, adapter, ledger):
        if all(api.reductions is not None and not {"mean", "batchmean"} & set(api.reductions) for api in adapter.apis):
            return f"no API of {adapter.name} takes reduction mean or batchmean"
        return None


class UpstreamDropped(GradientVariant):
    name, fault = "upstream_dropped", "a gradient ignores the gradient flowing into the loss (as if it were 1)"
    breaks = "gradients.upstream"

    def plant(self, call):
        if call.part == "forward" or not call.conforms:
            return None
        return _distinct(call, expected_grad(call.case, call.spec, call.part, call.dialect, upstream_of=np.ones))


class SignError(Variant):
    name, fault = "sign_error", "the result has the wrong sign"

    def plant(self, call):
        got = _answer(call)
        return None if got is None else _with(call, -got)


class InfinityLost(Variant):
    name, fault = "infinity_lost", "an expected infinity comes out as the largest finite value"

    def plant(self, call):
        got = _answer(call)
        if got is None or not np.isinf(call.expected.value).any():
            return None
        where = np.isinf(call.expected.value)
        got[where] = np.sign(call.expected.value[where]) * FLOAT_FORMATS[call.observed.dtype][2]
        return _with(call, got) if call.observed.dtype in FLOAT_FORMATS else None


class InfinityFlipped(Variant):
    name, fault = "infinity_flipped", "an expected infinity comes out with the other sign"

    def plant(self, call):
        got = _answer(call)
        where = None if got is None else np.isinf(call.expected.value)
        if where is None or not where.any():
            return None
        got[where] = -call.expected.value[where]
        return _with(call, got)


class NaNLost(Variant):
    name, fault = "nan_lost", "an expected NaN comes out as 0"

    def plant(self, call):
        got = _answer(call)
        where = None if got is None else np.isnan(call.expected.value)
        if where is None or not where.any():
            return None
        got[where] = 0.0
        return _with(call, got)


class SpuriousNaN(Variant):
    name, fault = "spurious_nan", "a NaN where a finite value is expected"

    def plant(self, call):
        got = _answer(call)
        finite = None if got is None else np.flatnonzero(np.isfinite(call.expected.value))
        if finite is None or not finite.size:
            return None
        got.reshape(-1)[finite[0]] = np.nan
        return _with(call, got)


class WrongDtype(Variant):
    name, fault = "wrong_dtype", "the result comes back in another dtype, with the same values"
    # never float32: a float32 answer with the values of the call may be the spec's named float32 computation
    # (dtypes.computation), which nothing in the observation tells from this fault
    OTHER = {"float16": "float64", "bfloat16": "float64", "float32": "float64", "float64": "float16"}

    def plant(self, call):
        obs = call.observed
        if obs.value is None or obs.dtype not in self.OTHER or call.expected.error_id is not None:
            return None
        # made without a dtype, another dtype is what an alternative inference (dtypes.inferred) gives
        if call.case.construction.inferred:
            return None
        return replace(obs, dtype=self.OTHER[obs.dtype])

    def rule(self, call):  # a gradient comes in its argument's dtype: only a forward result is promoted
        return "dtypes.promotion" if call.case.dtype.is_mixed and call.part == "forward" else "dtypes.precision"


class WrongShape(Variant):
    name, fault = "wrong_shape", "the result comes back in another shape (a 0-d result as (1,), others flattened)"
    breaks = "shapes.output"

    def plant(self, call):
        obs = call.observed
        if obs.value is None or call.expected.error_id is not None:
            return None
        value = np.asarray(obs.value)
        shape = (1,) if value.ndim == 0 else (value.size, 1) if value.ndim == 1 else (value.size,)
        return replace(obs, value=value.reshape(shape), shape=shape)


class RaisesOnValid(Variant):
    name, fault = "raises_on_valid", "a call the spec defines raises"

    def plant(self, call):
        if call.expected.error_id is not None:
            return None
        return Observation(exception_type="RuntimeError", exception_message="planted: refused a valid call")


class ValueWhereError(Variant):
    name, fault = "value_where_error", "a call the spec refuses returns a value"

    def rule(self, call):
        return f"errors.{call.expected.error_id}"

    def plant(self, call):
        if call.expected.error_id is None:
            return None
        return Observation(value=np.zeros(()), dtype="float32", shape=())


class WrongExceptionType(Variant):
    name, fault = "wrong_exception_type", "a refused call raises another exception type"

    def rule(self, call):
        return f"errors.{call.expected.error_id}"

    def plant(self, call):
        if call.expected.error_id is None:
            return None
        return Observation(exception_type="KeyError", exception_message=f"planted: {call.expected.error_id}")


class MissingGradient(GradientVariant):
    name, fault = "missing_gradient", "autograd gives no gradient (None)"

    def plant(self, call):
        if call.part == "forward" or call.observed.value is None:
            return None
        return Observation(exception_type="MissingGradient", exception_message="planted: no gradient")


class ZeroGradient(GradientVariant):
    name, fault = "zero_gradient", "autograd gives zeros"

    def plant(self, call):
        got = _answer(call)
        return None if got is None or call.part == "forward" else _with(call, np.zeros_like(got))

    def rule(self, call):
        """The rule a gradient of zeros breaks (gradients.parts: the judge's zero-gradient pattern), where a finite
        element of the spec's gradient is further than twice its bound from 0; elsewhere (every element NaN,
        infinite or about 0) none."""
        want = call.expected
        if want.value is None:
            return None
        value = np.asarray(want.value, dtype=np.float64)
        finite = np.isfinite(value)
        with np.errstate(invalid="ignore"):
            apart = np.abs(value[finite]) > 2 * np.broadcast_to(want.bound, value.shape)[finite]
        return "gradients.parts" if apart.any() else None


class OtherConvention(Variant):
    name, fault = "other_convention", "another convention the spec lists, taken silently (one the profile does not declare)"
    taken: str | None = None  # the choice point of the convention planted last

    def plant(self, call):
        if call.expected.error_id is not None or call.observed.value is None:
            return None
        for alt in alternatives(call.spec):
            if alt.path in call.declared_paths:  # a choice point, as profiles name it
                continue
            other = expectation(call.case, alternative_spec(call.spec, alt), call.part, call.dialect)
            if other.error_id is not None or other.value is None or other.result_dtype != call.observed.dtype:
                continue
            # one an answer can tell from the spec's (a float32 computation of a float64 call cannot: its change is
            # within its own bound, and the judge names none such, explain.indistinguishable)
            planted = _distinct(call, other)
            if planted is not None and is_fault(planted, call):
                self.taken = alt.path
                return planted
        return None

    def rule(self, call):
        return self.taken


class GarbageWhereDocumented(Variant):
    name, fault = ("garbage_where_documented", "garbage where a documented deviation predicts a finite value, "
                   "or another exception where it predicts a refusal")

    def plant(self, call):
        d, e = call.deviated, call.expected
        if _predicts_refusal(d, e):
            return Observation(exception_type="KeyError", exception_message=f"planted: not {d.error_type} ({d.error_id})")
        got = _answer(call)
        differs = _predicts_other_values(d, e)
        if got is None or differs is None or not differs.any():
            return None
        got = np.where(differs, d.value + 1000.0 * (1.0 + np.abs(d.value)), d.value)
        return _with(call, got)

    def not_applicable(self, adapter, ledger):
        return None if any(ledger.by_api.values()) else f"the profile of {adapter.name} documents no deviation"

    def not_reached(self, calls):
        """No call of the run where a documented deviation predicts other than the spec (its profile's
        `unsupported:` entries may keep every such call from running)."""
        for c in calls:
            if c is None or c.deviated is None:
                continue
            differs = _predicts_other_values(c.deviated, c.expected)
            if c.deviated.error_id != c.expected.error_id or (differs is not None and differs.any()):
                return None
        return "no call the suite sends reaches a documented deviation (the profile's unsupported calls are not sent)"


def _predicts_refusal(deviated: Expected | None, expected: Expected) -> bool:
    """The API's documented deviations predict an exception where the spec predicts a value."""
    return deviated is not None and deviated.error_id is not None and expected.error_id is None


def _predicts_other_values(deviated: Expected | None, expected: Expected) -> np.ndarray | None:
    """Per element: where the documented deviations predict a finite value the spec's bound does not hold; None
    where either predicts no value (or their shapes differ)."""
    if deviated is None or deviated.value is None or expected.value is None \
            or deviated.value.shape != expected.value.shape:
        return None
    with np.errstate(invalid="ignore"):
        return np.isfinite(deviated.value) & (~np.isfinite(expected.value)
                                              | (np.abs(deviated.value - expected.value) > expected.bound))


class Crash(Variant):
    name, fault = "crash", "the framework kills its process on the forward calls of a few cases"
    in_worker = True

    def plants_into(self, case: Case) -> bool:
        return _chosen(case.id)

    def plant(self, call):
        if not _chosen(call.case.id) or call.part != "forward":
            return None
        # each call that aborts is recorded: after the first, the harness makes the case's calls one at a time, so
        # the case's gradients, which do not crash, must come back as the control's; a call the framework has no
        # kernel for is then unsupported, not a crash
        record(call, self.name, FRAMEWORK_CRASH)  # killed inside its call: the framework's crash, whatever the answer
        os.abort()


class Hang(Variant):
    name, fault = "hang", "the framework never returns on a few cases"
    in_worker = True

    def plants_into(self, case: Case) -> bool:
        return _chosen(case.id)

    def plant(self, call):
        if not _chosen(call.case.id):
            return None
        record(call, self.name, FRAMEWORK_TIMEOUT, whole_case=True)
        time.sleep(3600)


VARIANTS: dict[str, type[Variant]] = {v.name: v for v in (
    ValueOutsideRounding, WrongDivisor, UpstreamDropped, SignError, InfinityLost, InfinityFlipped, NaNLost,
    SpuriousNaN, WrongDtype, WrongShape, RaisesOnValid, ValueWhereError, WrongExceptionType, MissingGradient,
    ZeroGradient, OtherConvention, GarbageWhereDocumented, Crash, Hang)}


def _chosen(case_id: str) -> bool:
    """A few cases, picked by id alone, for the variants that crash or hang."""
    return zlib.crc32(case_id.encode()) % 97 == 0


def _beyond(want: np.ndarray, bound: np.ndarray, sign: np.ndarray, dtype: str) -> np.ndarray:
    """For each element, a value of `dtype` on the side `sign` of `want`, just past `bound` from it."""
    delta = np.maximum(2 * bound, 2 * _ulp(want, dtype))
    out = round_to_dtype(want + sign * delta, dtype)
    for _ in range(64):  # rounding can land back inside the bound: step further out until it does not
        inside = ~(np.abs(out - want) > bound)
        if not inside.any():
            break
        delta[inside] *= 2
        out[inside] = round_to_dtype(want[inside] + sign[inside] * delta[inside], dtype)
    return out


def _ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    bits, min_exp, _ = FLOAT_FORMATS.get(dtype, FLOAT_FORMATS["float64"])
    _, exp = np.frexp(np.abs(values))
    return np.ldexp(1.0, np.maximum(exp - 1, min_exp) - (bits - 1))
