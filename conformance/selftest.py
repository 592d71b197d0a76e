"""The planted-bug self-test: the harness proves that it flags every kind of fault a port can have.

A variant plants one kind of fault into what the real framework returned (a value just outside rounding, a
wrong divisor, a lost infinity, a wrong dtype, a raise, a crash, another convention taken silently ...). The
framework answers the suite once, in the control run; each variant's answers (the control's, with its fault
planted) go through the whole harness, exactly as in `kl-conformance run`: judged, written as rows and
details, read back. A crash or a hang is planted in a real worker instead, which it must end. The variant
records which rows it changed and the cause each must be given, and the self-test counts how many of those
rows were flagged, i.e. neither `pass` nor `documented`, and how many were attributed to the rule the fault
breaks (or `unexplained`, for a fault that breaks no rule of its own; a convention the judge names there is
checked against the recorded values); every other row must be the control's.

What a variant plants depends only on the case, the framework's own answer and the reference's
expectations (under the spec, and under the API's declared deviations): never on a verdict. A
planted answer counts only where it is a fault by the spec's comparison rule (spec:
tolerance.comparison), restated here independently of conformance/judge/compare.py, so a comparator that
lets a wrong answer pass fails the self-test.

The gate variants plant no wrong value: they prove that the CI gates fail closed. One framework cannot be
imported, another lost the kernels of one dtype (each such call says "no kernel"); each gate is then asked
of the variant's run, against the control run as baseline, and must fail (--strict and --known with exit 3
for the framework not imported, --fail-on-new with exit 1 or 3 for both).

Plants faults only in what a framework returned; never changes the judge or the reference it tests.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Sequence

import numpy as np

from conformance.adapters.base import in_mode
from conformance.adapters.registry import get_adapter
from conformance.core.case import Case
from conformance.core.choices import alternatives, with_alternatives
from conformance.core.details import iter_details
from conformance.core.manifest import read_manifest
from conformance.core.model import EAGER, FLOAT_FORMATS, Expected, Observation, Spec
from conformance.core.results import iter_results
from conformance.core.rounding import round_to_dtype
from conformance.core.specload import load_spec
from conformance.core.model import UNEXPLAINED
from conformance.judge.faults import scaled
from conformance.core.known import KnownFindings
from conformance.judge.profiles import DeviationLedger, apply_deviations
from conformance.reference.forward import in_result_dtype, reduction_divisor
from conformance.reference.grad import expected_for, expected_grad
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, Gates
from conformance.report.selftest import VariantReport
from conformance.report.writer import write_report
from conformance.run.pool import WorkerPool
from conformance.run.runner import RunOptions, run_conformance
from conformance.run.task import FRAMEWORK_CRASH, FRAMEWORK_TIMEOUT, Outcome

# The spec a worker's variant loads, and the file where it logs the rows it changed.
ENV_SPEC, ENV_LOG = "KL_SELFTEST_SPEC", "KL_SELFTEST_LOG"
HANG_TIMEOUT_S = 5.0  # the per-case limit for the variant that hangs
# the same in a compiled mode, where an honest case may first compile (on a loaded machine, for longer than
# HANG_TIMEOUT_S): only the planted hang may time out
HANG_TIMEOUT_COMPILED_S = 30.0


@dataclass
class Call:
    """One call of the framework, with everything a variant may read to plant its fault."""

    case: Case
    api: str
    part: str
    observed: Observation  # the real framework's answer
    expected: Expected     # the spec's expectation
    deviated: Expected | None  # the expectation under the API's declared deviations, if it has any
    spec: Spec
    declared_paths: frozenset[str] = frozenset()  # spec paths the API's deviations set
    dialect: str = "canonical"  # how the API states the loss (spec: dialects)
    # whether the framework's own answer meets the spec: a fault that breaks one rule is planted only where the
    # framework breaks none, so that the rule it breaks is the only cause there is (and only such rows' causes
    # are checked)
    conforms: bool = False
    mode: str = EAGER  # the mode the call was made in (the planted adapter's own: its run() wraps any mode's)


class Variant:
    """One planted fault. `plant` returns the faulty observation, or None where this fault does not apply."""

    name: ClassVar[str]
    fault: ClassVar[str]
    breaks: ClassVar[str | None] = None  # the spec rule the fault breaks, or None where it breaks none of its own
    # the fault is the worker's own end (a crash, a hang): it is planted in a real worker, over the cases it
    # plants into (plants_into), not into the control run's recorded answers
    in_worker: ClassVar[bool] = False

    def plant(self, call: Call) -> Observation | None:
        raise NotImplementedError

    def rule(self, call: Call) -> str | None:
        """The cause a planted row of `call` must be given: the spec rule this fault breaks there, or None
        where it corresponds to no rule (it must then come out unexplained, or as the formula)."""
        return self.breaks

    def not_applicable(self, adapter, ledger: DeviationLedger) -> str | None:
        """Why no call of `adapter` can carry this fault (what it needs, no API of the framework takes),
        or None. Derived from the adapter's declared APIs and profile, never from a run."""
        return None

    def not_reached(self, calls: Sequence["Call | None"]) -> str | None:
        """Why none of the calls the control run made can carry this fault, where the variant planted nothing:
        a fault the suite offers no place for is not applicable, one it offers a place for yet planted nothing
        fails. None: the calls offer a place."""
        return None


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
    terms by less than its bound is no fault any answer shows). Restated here, as the comparison rule is below,
    beside the judge's own test (explain.indistinguishable)."""
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


class GradientVariant(Variant):
    """A fault of a gradient: no call carries it where no API differentiates anything (a plain function,
    `--framework module:function`, is judged for the forward only)."""

    def not_applicable(self, adapter, ledger):
        if not any(api.grads for api in adapter.apis):
            return f"no API of {adapter.name} has gradients (its APIs differentiate no argument)"
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
    OTHER = {"float16": "float32", "bfloat16": "float32", "float32": "float64", "float64": "float32"}

    def plant(self, call):
        obs = call.observed
        if obs.value is None or obs.dtype not in self.OTHER or call.expected.error_id is not None:
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
            other = _expectation(call.case, _alternative(call.spec, alt), call.part, call.dialect)
            if other.error_id is not None or other.value is None or other.result_dtype != call.observed.dtype:
                continue
            planted = replace(call.observed, value=np.array(other.value), shape=tuple(other.shape))
            if is_fault(planted, call):
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


class GateVariant:
    """A broken build that the gates must fail: `gates` maps each gate asked to the exit codes it must give."""

    name: ClassVar[str]
    fault: ClassVar[str]
    gates: ClassVar[dict[str, tuple[int, ...]]]


class NotImportable(GateVariant):
    name, fault = "gate_not_importable", "the framework cannot be imported: every gate must fail"
    gates = {"--strict": (EXIT_INCOMPLETE,), "--fail-on-new": (EXIT_GATE, EXIT_INCOMPLETE),
             "--known": (EXIT_INCOMPLETE,)}


class LostDtype(GateVariant):
    name, fault = "gate_lost_dtype", "every call of one dtype says 'no kernel': --fail-on-new must fail"
    # --strict and --known judge a run alone: unsupported calls are no divergence; only a baseline shows the loss
    gates = {"--fail-on-new": (EXIT_GATE, EXIT_INCOMPLETE)}


GATE_VARIANTS: dict[str, type[GateVariant]] = {v.name: v for v in (NotImportable, LostDtype)}


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


# -- the comparison rule, restated (spec: tolerance.comparison) ---------------------------------------

def accepted(observed: Observation, expected: Expected) -> bool:
    """Whether `observed` meets `expected` under the spec's comparison rule: the right exception (type and
    message pattern), or the right shape, dtype, NaN/inf pattern and finite values within the bound."""
    if expected.error_id is not None:
        return (observed.exception_type == expected.error_type
                and (not expected.error_match or re.search(expected.error_match, observed.exception_message or "")))
    if observed.raised or observed.unsupported is not None or observed.value is None:
        return False
    got = np.asarray(observed.value, dtype=np.float64)
    if observed.dtype != expected.result_dtype or tuple(observed.shape) != tuple(expected.shape) \
            or got.shape != tuple(expected.shape):
        return False
    want, bound = expected.value, np.asarray(expected.bound)
    anything = np.isnan(want) & (bound == np.inf)  # a convention whose choice is arbitrary: any value is its answer
    for test in (np.isnan, np.isposinf, np.isneginf):
        if not np.array_equal(test(got)[~anything], test(want)[~anything]):
            return False
    finite = np.isfinite(want)
    return bool(np.all(np.abs(got[finite] - want[finite]) <= bound[finite]))


def is_fault(planted: Observation, call: Call) -> bool:
    """A planted answer is a fault when neither the spec nor the API's declared deviations accept it."""
    return not accepted(planted, call.expected) and not (call.deviated is not None and accepted(planted, call.deviated))


# -- the planted adapter, as the worker process sees it ------------------------------------------------

def planted_adapter_class(framework: str, variant_name: str) -> type:
    """A subclass of `framework`'s adapter that plants `variant_name`'s fault into its answers."""
    base = type(get_adapter(framework))
    variant = VARIANTS[variant_name]()

    class Planted(base):
        def run(self, case, api, device, part, mode=EAGER):
            observed = in_mode(super().run, mode, case, api, device, part)
            return _plant(self, variant, case, api, part, mode, observed)

    Planted.__name__ = Planted.__qualname__ = class_name(framework, variant_name)
    return Planted


def unimportable_adapter_class(framework: str) -> type:
    """A subclass of `framework`'s adapter that cannot be imported (the gate variant gate_not_importable: the
    one broken build that needs a worker, to fail in it as an uninstalled framework does)."""
    base = type(get_adapter(framework))

    class Broken(base):
        def load(self):
            from conformance.adapters.base import FrameworkUnavailable

            raise FrameworkUnavailable(f"planted by the self-test: cannot import {framework}")

    Broken.__name__ = Broken.__qualname__ = class_name(framework, NotImportable.name)
    return Broken


def class_name(framework: str, variant_name: str) -> str:
    return f"Planted__{framework}__{variant_name}"


def __getattr__(name: str):
    """`conformance.selftest:Planted__<framework>__<variant>` names a planted adapter for the worker."""
    if name.startswith("Planted__") and name.count("__") == 2:
        _, framework, variant_name = name.split("__")
        if variant_name in VARIANTS or variant_name == NotImportable.name:
            cls = (planted_adapter_class(framework, variant_name) if variant_name in VARIANTS
                   else unimportable_adapter_class(framework))
            globals()[name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Planter:
    """Builds, for one answer of the framework, the Call a variant reads, and plants a variant's fault into it.
    One per spec and profile set: it keeps the specs it derives from them (the API's deviations applied)."""

    def __init__(self, spec: Spec, ledger: DeviationLedger):
        self.spec, self.ledger = spec, ledger
        self._deviated: dict[tuple[str, ...], Spec] = {}

    def call(self, case: Case, api, part: str, mode: str, observed: Observation) -> Call | None:
        """What a variant may read of `api`'s answer `observed`; None where nothing ran (nothing to plant)."""
        if observed.unsupported is not None:
            return None
        declared = self.ledger.by_api.get(api.name, ())
        deviated = None
        if declared:
            key = tuple(d.id for d in declared)
            if key not in self._deviated:
                self._deviated[key] = apply_deviations(self.spec, list(declared))
            deviated = _expectation(case, self._deviated[key], part, api.dialect)
        expected = _expectation(case, self.spec, part, api.dialect)
        return Call(case, api.name, part, observed, expected, deviated, self.spec,
                    frozenset(path for d in declared for path in d.set), api.dialect,
                    bool(accepted(observed, expected)), mode)

    def plant(self, variant: Variant, call: Call | None) -> Observation | None:
        """The variant's faulty answer for `call`, its row recorded; None where the variant plants no fault."""
        if call is None:
            return None
        planted = variant.plant(call)
        if planted is None or not is_fault(planted, call):
            return None
        record(call, variant.name, variant.rule(call), clean=call.conforms)
        return planted


_WORKER: dict = {}  # the worker's Planter, made at its first call


def _plant(adapter, variant: Variant, case: Case, api, part: str, mode: str, observed: Observation) -> Observation:
    """In a worker: `observed`, or the variant's fault planted into it."""
    planter = _WORKER.get("planter")
    if planter is None:
        spec = load_spec(os.environ.get(ENV_SPEC) or None)
        ledger = DeviationLedger(spec, adapter.name, [a.name for a in adapter.apis])
        planter = _WORKER["planter"] = Planter(spec, ledger)
    planted = planter.plant(variant, planter.call(case, api, part, mode, observed))
    return observed if planted is None else planted


_EXPECTED: dict = {}  # the expectations of the case planted into last, by spec, part and dialect
_ALTERNATIVES: dict = {}  # spec with one other convention, by the spec's hash and the alternative


def _expectation(case: Case, spec: Spec, part: str, dialect: str) -> Expected:
    key = (spec.hash, part, dialect)
    if _EXPECTED.get("case") is not case:
        _EXPECTED.clear()
        _EXPECTED["case"] = case
    if key not in _EXPECTED:
        _EXPECTED[key] = expected_for(case, spec, part, dialect)
    return _EXPECTED[key]


def _alternative(spec: Spec, alt) -> Spec:
    key = (spec.hash, alt)
    if key not in _ALTERNATIVES:
        _ALTERNATIVES[key] = with_alternatives(spec, (alt,))
    return _ALTERNATIVES[key]


def record(call: Call, variant_name: str, rule: str | None, whole_case: bool = False, clean: bool = True) -> None:
    """Append the planted row's key, the cause it must be given, and whether it was planted into an answer
    that met the spec (`clean`), to the log the parent reads (flushed at once: a crash may follow)."""
    path = os.environ.get(ENV_LOG)
    if not path:
        return
    row = {"case_id": call.case.id, "api": call.api, "mode": call.mode, "part": call.part, "variant": variant_name,
           "whole_case": whole_case, "rule": rule, "clean": clean}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


# -- the parent: run each variant, count what was flagged ----------------------------------------------

class NotRun(Exception):
    """The framework could not be loaded: the self-test proved nothing, which is not a pass."""


class _RecordingPool(WorkerPool):
    """The control run's worker: it keeps every task's outcome (the framework's answers, or the crash or timeout
    it met), which the variants then plant into."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict[int, Outcome] = {}

    def run(self, tasks):
        for outcome in super().run(tasks):
            self.outcomes[outcome.task.index] = outcome
            yield outcome


class _ReplayPool:
    """A variant run's worker pool that calls no framework: it answers each task as the control run's worker did,
    each answer passed through `answer(index, call, observed)` (where the variant plants its fault; `index` is the
    case's place in the control run), and a call that crashed or timed out there does so here. The run judges
    and writes these answers as any other. `indices` maps the run's cases to their places in the control run."""

    launched = True
    restarts = 0

    def __init__(self, control: _RecordingPool, indices: Sequence[int],
                 answer: Callable[[int, tuple[str, str, str, str], Observation], Observation]):
        self.info, self._outcomes, self._indices, self._answer = control.info, control.outcomes, indices, answer

    def launch(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    def wait_ready(self):
        return self.info

    def close(self) -> None:
        pass

    def run(self, tasks):
        for task in tasks:
            index = self._indices[task.index]
            recorded = self._outcomes.get(index)
            if recorded is None or recorded.task.case.id != task.case.id or recorded.task.calls != task.calls:
                raise RuntimeError(f"the self-test's variant asked for calls of case {task.case.id!r} that its "
                                   "control run did not make")
            yield Outcome(task, {call: self._answer(index, call, observed)
                                 for call, observed in recorded.observations.items()},
                          recorded.failure, recorded.failure_message, dict(recorded.failed_calls), recorded.lost)
            if recorded.lost is not None:  # the control's worker could not be restarted: neither can this one
                raise recorded.lost


def run_selftest(spec: Spec, framework: str, cases: Sequence[Case], out_dir: Path,
                 variants: Iterable[str] = (), options: RunOptions = RunOptions(),
                 progress: Callable[[str], None] | None = None) -> tuple[dict, list[VariantReport]]:
    """Run the unwrapped adapter (the control) and each planted variant over `cases`; count, per variant,
    the rows it changed and how many of them were flagged (neither pass nor documented).

    The framework is called once per call, by the control run. A variant that plants a wrong answer replays
    the control's answers with its fault planted into them (in this process: the fault depends only on the
    answer and the expectations), through the whole run (judge, rows, details) as `run` does, over the cases it
    planted into (in the others every answer, and so every row, would be the control's). A variant whose
    fault is the worker's own death (a crash, a hang) runs a real worker over the cases it plants into, each
    with the case after it (an honest case in flight when the worker dies). Every row a variant did not plant
    into must keep the control's verdict and cause.

    Returns the control run's verdict counts and one report per variant.
    """
    adapter = get_adapter(framework)  # out_dir is made by the control run, once the devices are known
    os.environ[ENV_SPEC] = str(spec.source)
    recorder = _RecordingPool(framework, timeout_s=options.timeout_s, compile_cache_dir=options.cache_dir)
    try:
        control = run_conformance(spec, framework, cases, out_dir / "control", options, pool=recorder)
    finally:
        recorder.close()
    if control.not_run:
        raise NotRun(f"{framework} did not run, so nothing was planted: {control.not_run}")
    not_run = read_manifest(out_dir / "control").get("modes_not_run") or {}
    if not_run:  # a mode that cannot run here plants nothing: the self-test through it proved nothing
        mode, why = next(iter(not_run.items()))
        raise NotRun(f"mode {mode} of {framework} cannot run here, so nothing was planted through it: {why}")
    modes = tuple(dict.fromkeys(options.modes)) or (EAGER,)
    control_rows = {row.call: row for row in iter_results(out_dir / "control")}
    reports = []
    ledger = DeviationLedger(spec, adapter.name, [a.name for a in adapter.apis], options.profiles_dir,
                             carried=adapter.carried_profile())  # the profile the run reads
    planter = Planter(spec, ledger)
    calls = None  # each answer of the control run, with what a variant reads of it: made once, for every variant

    for name in (variants or [*VARIANTS, *GATE_VARIANTS]):
        if name in GATE_VARIANTS:
            if progress is not None:
                progress(name)
            reports.append(_gate_variant(spec, framework, GATE_VARIANTS[name], cases, out_dir, options, recorder))
            continue
        variant = VARIANTS[name]()
        reason = variant.not_applicable(adapter, ledger)
        if reason is not None:
            reports.append(VariantReport(name, variant.fault, not_applicable=reason))
            continue
        if progress is not None:
            progress(name)
        log = out_dir / f"{name}.planted.jsonl"
        log.unlink(missing_ok=True)
        os.environ[ENV_LOG] = str(log)
        try:
            if variant.in_worker:
                ran = _with_next(cases, variant)
                hang_limit = HANG_TIMEOUT_S if modes == (EAGER,) else HANG_TIMEOUT_COMPILED_S
                run_conformance(spec, f"{__name__}:{class_name(framework, name)}", ran, out_dir / name,
                                replace(options, timeout_s=hang_limit if name == "hang" else options.timeout_s))
            else:
                # planted before the run, which then holds exactly the cases planted into: in any other case every
                # answer is the control's, and so would every row be
                calls = _calls(recorder, planter, adapter) if calls is None else calls
                planted = {(index, call): fault for index, call, c in calls
                           if (fault := planter.plant(variant, c)) is not None}
                reason = variant.not_reached([c for _, _, c in calls]) if not planted else None
                if reason is not None:
                    reports.append(VariantReport(name, variant.fault, not_applicable=reason))
                    continue
                indices = sorted({index for index, _ in planted})
                ran = [cases[i] for i in indices]
                run_conformance(spec, framework, ran, out_dir / name, options, pool=_ReplayPool(
                    recorder, indices, lambda index, call, observed: planted.get((index, call), observed)))
        finally:
            os.environ.pop(ENV_LOG, None)
        reports.append(_count(VARIANTS[name], log, out_dir / name, adapter, ran, spec, modes, control_rows, ledger))
    return dict(control.counts), reports


def _calls(control: _RecordingPool, planter: Planter, adapter) -> list[tuple[int, tuple[str, str, str, str], Call]]:
    """Each answer of the control run: its case's place in the run, the call, and what a variant reads of it."""
    return [(index, call, planter.call(outcome.task.case, adapter.api(call[0]), call[3], call[2], observed))
            for index, outcome in sorted(control.outcomes.items()) for call, observed in outcome.observations.items()]


def _with_next(cases: Sequence[Case], variant: Variant) -> list[Case]:
    """The cases `variant` plants into, each with the case after it (which must come back as the control's)."""
    keep = set()
    for i, case in enumerate(cases):
        if variant.plants_into(case):
            keep |= {i, i + 1}
    return [case for i, case in enumerate(cases) if i in keep]


def _gate_variant(spec: Spec, framework: str, variant: type[GateVariant], cases: Sequence[Case], out_dir: Path,
                  options: RunOptions, control: _RecordingPool) -> VariantReport:
    """Run the broken build, then ask each gate of its run with the control run as baseline; a gate that passes
    (or exits otherwise than it must) fails the variant. Each gate's report is kept in <variant>.gates/."""
    report = VariantReport(variant.name, variant.fault)
    if variant is LostDtype:
        # a dtype the control judged somewhere, so that losing it loses coverage
        judged = {r.case_id for r in iter_results(out_dir / "control") if r.verdict.is_judged}
        present = {str(c.dtype) for c in cases if c.id in judged}
        lost = next((d for d in FLOAT_FORMATS if d in present), None)
        if lost is None:
            report.not_applicable = "the control judged no case of a floating dtype"
            return report
        report.fault = report.fault.replace("one dtype", lost)
        no_kernel = Observation(unsupported=f"no kernel for this device: planted by the self-test: the {lost} "
                                            "kernels are lost")
        # the control's answers, but every call of the lost dtype says it has no kernel
        run_conformance(spec, framework, cases, out_dir / variant.name, options, pool=_ReplayPool(
            control, range(len(cases)), lambda index, call, observed: no_kernel if str(cases[index].dtype) == lost
            else observed))
    else:  # a build that cannot be imported: a real worker fails to load it
        run_conformance(spec, f"{__name__}:{class_name(framework, variant.name)}", cases, out_dir / variant.name,
                        options)
    for gate, expected in variant.gates.items():
        gates = Gates(strict=gate == "--strict", fail_on_new=gate == "--fail-on-new", known=gate == "--known")
        known = KnownFindings([], "(no entries)", "") if gates.known else None
        gate_dir = out_dir / f"{variant.name}.gates" / gate.strip("-")
        gate_dir.mkdir(parents=True, exist_ok=True)
        written = write_report(gate_dir, [out_dir / variant.name], known=known, gates=gates,
                               baseline=out_dir / "control" if gates.fail_on_new else None)
        code = written.decision.code
        report.planted += 1
        report.verdicts[f"{gate} exit {code}"] = 1
        if code in expected:
            report.flagged += 1
        else:
            report.missed.append(f"{gate} exited {code}, not {' or '.join(map(str, expected))}: "
                                 + ("; ".join(written.decision.lines) or "the gate passed"))
    return report


def _count(variant: type[Variant], log: Path, run_dir: Path, adapter, cases: Sequence[Case],
           spec: Spec, modes: Sequence[str], control_rows: dict, ledger: DeviationLedger) -> VariantReport:
    """The variant's report: its planted rows (flagged? attributed?), and its other rows against the control's
    (`control_rows`, by `Result.call`) of the cases the variant ran; `ledger` says which calls the profile keeps
    from being sent."""
    report = VariantReport(variant.name, variant.fault)
    # each planted call (case id, api, mode, part), and the cause it must be given
    planted: dict[tuple[str, str, str, str], str | None] = {}
    clean: set[tuple[str, str, str, str]] = set()  # the calls planted into an answer that met the spec
    whole: set[str] = set()
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["whole_case"]:
                whole.add(row["case_id"])
            else:
                call = (row["case_id"], row["api"], row["mode"], row["part"])
                planted[call] = row["rule"]
                if row["clean"]:
                    clean.add(call)
    by_id = {c.id: c for c in cases}
    implementations = adapter.implementations()
    for case_id in whole:  # a hang costs every call of the case that was sent to the framework
        case = by_id[case_id]
        calls = set()
        for mode in modes:
            calls |= {(case_id, api.name, mode, part) for api in adapter.apis for part in case.parts
                      if adapter.unsupported_reason(case, api) is None
                      and in_mode(adapter.unsupported_part, mode, api, part) is None
                      and ledger.unsupported(case, api.name, part, mode) is None}
        planted.update(dict.fromkeys(calls, FRAMEWORK_TIMEOUT))
        clean |= calls
    got = {(d["case_id"], d["api"], d["device"], d["mode"], d["part"]): d for d in iter_details(run_dir)}
    seen = set()
    for row in iter_results(run_dir):
        key = (row.case_id, row.api, row.mode, row.part)
        seen.add(row.call)
        if key not in planted:
            _compare_unplanted(report, row, control_rows.get(row.call))
            continue
        report.planted += 1
        report.verdicts[row.verdict.value] = report.verdicts.get(row.verdict.value, 0) + 1
        if not (row.verdict.is_divergence and not row.documented):
            if len(report.missed) < 10:
                report.missed.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                     f"{row.verdict.value}"
                                     f"{' (documented)' if row.documented else ''} {row.message}")
            continue
        report.flagged += 1
        if key not in clean:  # planted over the framework's own divergence: two faults, either may be the cause
            report.over_divergence += 1
            continue
        rule = planted[key]
        detail = got.get(row.call)
        if row.cause == (rule or UNEXPLAINED) or (rule is None and row.cause in FORMULAS) \
                or _reproduced_by_claim(row, detail, by_id[row.case_id], adapter, spec, ledger):
            report.attributed += 1
            if rule is not None:  # an unexplained row's defect is what it shows, which the fault varies by call
                implementation = implementations.get(row.api, row.api)
                report.defects.setdefault(f"{row.cause} on {implementation}", set()).add(row.defect)
        elif len(report.misattributed) < 10:
            report.misattributed.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                        f"cause {row.cause!r}, "
                                        f"not {rule or UNEXPLAINED!r}; {row.message}")
    for call, control in control_rows.items():  # a call the control judged lost its row: the fault cost more
        if call[0] in by_id and call not in seen:
            report.disturbed += 1
            if len(report.disturbances) < 10:
                report.disturbances.append(f"{' '.join(call[:3])} {_mode_word(call[3])}{call[4]}: no row; the "
                                           f"control: {control.verdict.value}")
    return report


def _compare_unplanted(report: VariantReport, row, control) -> None:
    """A row the variant did not plant into must be the control's: the fault costs only the calls it hit."""
    if control is not None and (row.verdict, row.cause, row.documented) == \
            (control.verdict, control.cause, control.documented):
        return
    report.disturbed += 1
    if len(report.disturbances) < 10:
        was = "no row" if control is None else f"{control.verdict.value} ({control.cause or 'no cause'})"
        report.disturbances.append(f"{row.case_id} {row.api} {row.device} {_mode_word(row.mode)}{row.part}: "
                                   f"{row.verdict.value} ({row.cause or 'no cause'}); the control: {was}")


def _mode_word(mode: str) -> str:
    """A row's mode as a missed row's line names it: nothing for eager."""
    return "" if mode == EAGER else f"{mode} "


FORMULAS = ("pointwise.formula", "gradients.formula")  # what a fault that breaks no rule of its own may be called
CLAIM = "; behaves as "  # how the judge's message states the choices that reproduce an observation
BESIDE = " beside the profile ("  # and the profile entries a residual cause is named beside (judge/casejudge.py)


def _reproduced_by_claim(row, detail: dict | None, case: Case, adapter, spec: Spec, ledger: DeviationLedger) -> bool:
    """Whether the spec choices the row's message says it behaves as do reproduce the planted answer, checked
    here under the comparison rule restated above: a planted fault that happens to be exactly another listed
    convention is rightly called that convention. A claim made beside the profile ("... beside the profile (ids)",
    the judge's residual cause) is checked with those entries of the API's profile applied. A claim that cannot be
    checked (the answer's values are not all recorded, an entry the API does not declare) does not count."""
    if CLAIM not in row.message or detail is None:
        return False
    said, base = row.message.rsplit(CLAIM, 1)[1], spec
    if said.endswith(")") and BESIDE in said:
        said, ids = said[:-1].split(BESIDE, 1)
        declared = {d.id: d for d in ledger.by_api.get(row.api, ()) if d.documents_mode(row.mode)}
        if not ids or any(i not in declared for i in ids.split(", ")):
            return False
        base = apply_deviations(spec, [declared[i] for i in ids.split(", ")])
    offered = {str(alt): alt for alt in alternatives(base)}
    claimed = said.split(", ")
    if not claimed or any(c not in offered for c in claimed):
        return False
    if " + ".join(offered[c].path for c in claimed) != row.cause:
        return False
    observed = _recorded_observation(row, detail)
    if observed is None:
        return False
    expected = expected_for(case, with_alternatives(base, tuple(offered[c] for c in claimed)), row.part,
                            adapter.api(row.api).dialect)
    return bool(accepted(observed, expected))


def _recorded_observation(row, detail: dict) -> Observation | None:
    """The answer a details.jsonl line records in full, or None where its values were cut short."""
    raised = detail.get("raised")
    if raised:
        return Observation(exception_type=raised.split(":", 1)[0], exception_message=raised.split(": ", 1)[-1])
    values = detail.get("got")
    if not values or values.get("truncated"):
        return None
    array = np.array([float(v) for v in values["values"]], dtype=np.float64).reshape(values["shape"])
    return Observation(value=array, dtype=row.dtype, shape=tuple(values["shape"]))
