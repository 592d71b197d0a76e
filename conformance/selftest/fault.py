"""What a planted fault is: the call it is planted into, the variant that plants it, and whether it is a fault.

A `Call` carries the framework's answer and what the reference expects of it, under the spec and under the
API's declared deviations (expectation, kept while a case is planted into). A `Variant` plants one kind of
fault into a call's answer (variants.py holds them, one small class each). A planted answer counts only where
it is a fault by the spec's comparison rule (spec: tolerance.comparison), restated here (accepted, is_fault)
independently of conformance/judge/compare.py, so a comparator that lets a wrong answer pass fails the
self-test. Each row a variant plants into is appended, as it is planted, to the log the count reads (record).

Reads answers and the reference's expectations; never calls a framework, and never asks the judge whether an
answer passes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from conformance.core.case import Case
from conformance.core.choices import with_alternatives
from conformance.core.model import EAGER, Expected, Observation, Spec
from conformance.judge.compare import nearer
from conformance.judge.profiles import DeviationLedger
from conformance.reference.grad import expected_for

ENV_LOG = "KL_SELFTEST_LOG"  # the file where a variant's run logs the rows it changed


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


class GradientVariant(Variant):
    """A fault of a gradient: no call carries it where no API differentiates anything (a plain function,
    `--framework module:function`, is judged for the forward only)."""

    def not_applicable(self, adapter, ledger):
        if not any(api.grads for api in adapter.apis):
            return f"no API of {adapter.name} has gradients (its APIs differentiate no argument)"
        return None


_EXPECTED: dict = {}  # the expectations of the case planted into last, by spec, part and dialect
_ALTERNATIVES: dict = {}  # spec with one other convention, by the spec's hash and the alternative


def expectation(case: Case, spec: Spec, part: str, dialect: str) -> Expected:
    """The spec's expectation of `case`'s `part` in `dialect`, kept while the case is the one planted into."""
    key = (spec.hash, part, dialect)
    if _EXPECTED.get("case") is not case:
        _EXPECTED.clear()
        _EXPECTED["case"] = case
    if key not in _EXPECTED:
        _EXPECTED[key] = expected_for(case, spec, part, dialect)
    return _EXPECTED[key]


def alternative_spec(spec: Spec, alt) -> Spec:
    """`spec` with the one other convention `alt` taken, kept for every case."""
    key = (spec.hash, alt)
    if key not in _ALTERNATIVES:
        _ALTERNATIVES[key] = with_alternatives(spec, (alt,))
    return _ALTERNATIVES[key]


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
    with np.errstate(invalid="ignore", over="ignore"):
        near = np.abs(got - want) <= bound
        if expected.alternate is not None:  # an element that may round either way: within its bound of either
            near |= np.abs(got - nearer(expected, got)) <= bound
    return bool(np.all(near[finite]))


def is_fault(planted: Observation, call: Call) -> bool:
    """A planted answer is a fault when neither the spec nor the API's declared deviations accept it."""
    return not accepted(planted, call.expected) and not (call.deviated is not None and accepted(planted, call.deviated))


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
