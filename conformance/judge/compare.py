"""Classifies an observation against the spec's expectation: the verdict and why.

Order of checks: unsupported, errors, shape, dtype, non-finite pattern, then
values within the bound. Messages follow numpy.testing: the non-finite pattern
first, then counts, where, how bad. Never imports a framework or the reference.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from conformance.core.errors import HarnessBug
from conformance.core.model import UNEXPLAINED, Expected, Judgement, Observation, Spec, Verdict, not_refused

# The cause of a divergence no spec choice explains (casejudge tries the choices and the fault patterns):
# the rules the case touches are listed beside it, and none of them is picked.


def classify(expected: Expected, observed: Observation, spec: Spec) -> Judgement:
    """The verdict for one observation.

    Parameters
    ----------
    expected : what the reference computed from the spec for the case.
    observed : what the adapter saw.
    spec : for the warning patterns (spec: warnings.expected).
    """
    if observed.unsupported is not None:
        return Judgement(Verdict.UNSUPPORTED, not_refused(observed.unsupported))
    if observed.fallback is not None:  # the mode was not what ran: its answer is eager's, never a pass
        return Judgement(Verdict.FALLBACK, f"ran eagerly instead of compiled: {observed.fallback}",
                         cause="harness.fallback")
    missing = missing_warnings(expected, observed, spec)
    judgement = _judge(expected, observed)
    return dataclasses.replace(judgement, missing_warnings=missing)


def passes(expected: Expected, observed: Observation) -> bool:
    """Whether `classify` gives PASS, decided without building its message: explanations and profiles
    try many expectations against one observation. tests/engine/test_comparison_properties.py
    checks that the two always agree."""
    if observed.unsupported is not None or observed.fallback is not None:
        return False
    if expected.error_id is not None:
        return (observed.raised and observed.exception_type == expected.error_type
                and (not expected.error_match
                     or re.search(expected.error_match, observed.exception_message or "") is not None))
    if observed.raised or observed.dtype != expected.result_dtype or observed.value is None:
        return False
    if tuple(observed.shape) != tuple(expected.shape) or np.shape(observed.value) != tuple(expected.shape):
        return False
    bound, got = expected.bound, np.asarray(observed.value, dtype=np.float64)
    want = nearer(expected, got)
    check_bound(want, bound)
    if got.size == 0:
        return True
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(want)
        if finite.all():
            return bool((np.abs(got - want) <= bound).all())
        if (differs_in_nonfinite_pattern(got, want) & ~accepts_any(want, bound)).any():
            return False
        return not (np.where(finite, np.abs(got - want), 0.0) > bound).any()


def _judge(expected: Expected, observed: Observation) -> Judgement:
    """The verdict, with the cause its own kind states where it states one: the error the spec expects
    (errors.<id>), the output shape (shapes.output), the result dtype (dtypes.promotion or dtypes.precision);
    any other divergence is UNEXPLAINED here, with the rules the case touches."""
    raised = f"{observed.exception_type}: {observed.exception_message}"
    if expected.error_id is not None:
        cause = f"errors.{expected.error_id}"
        if not observed.raised:
            return Judgement(Verdict.ERROR, f"error: returned a value; spec expects {expected.error_type} "
                                            f"({cause})", cause=cause, rules=(cause,))
        if observed.exception_type != expected.error_type:
            return Judgement(Verdict.ERROR, f"error: raised {raised}; spec expects {expected.error_type} "
                                            f"({cause})", cause=cause, rules=(cause,))
        if expected.error_match and not re.search(expected.error_match, observed.exception_message or ""):
            return Judgement(Verdict.ERROR, f"error: raised {raised}; spec expects {expected.error_type} with a "
                                            f"message matching {expected.error_match!r} ({cause})", cause=cause,
                             rules=(cause,))
        return Judgement(Verdict.PASS, f"raised {observed.exception_type} as expected ({cause})", cause=cause)
    if observed.raised:
        return Judgement(Verdict.ERROR, f"error: raised {raised}; spec expects a value", cause=UNEXPLAINED,
                         rules=touched_rules(expected, None))

    # a result with no real values (complex ones, which the API judges) states its shape without a value
    held = tuple(observed.shape) if observed.value is None else np.shape(observed.value)
    if tuple(observed.shape) != tuple(expected.shape) or held != tuple(expected.shape):
        shown = tuple(observed.shape) if tuple(observed.shape) != tuple(expected.shape) else held
        return Judgement(Verdict.SHAPE, f"shape: got {shown}, expected {tuple(expected.shape)}",
                         cause="shapes.output", rules=touched_rules(expected, None))
    if observed.dtype != expected.result_dtype:
        return Judgement(Verdict.DTYPE, f"dtype: got {observed.dtype}, expected {expected.result_dtype}",
                         cause="dtypes.promotion" if "dtypes.promotion" in expected.rules else "dtypes.precision",
                         rules=touched_rules(expected, None))
    if observed.value is None:  # never an answer, whatever NaN the spec expects (None would read as NaN)
        return Judgement(Verdict.VALUE, "value: none given; the spec expects one", cause=UNEXPLAINED,
                         rules=touched_rules(expected, None))
    return _judge_values(expected, np.asarray(observed.value, dtype=np.float64))


def _judge_values(expected: Expected, got: np.ndarray) -> Judgement:
    """The element rule (spec: tolerance.comparison): the NaN/inf pattern must match exactly, sign of
    infinity included; then every finite expectation must be met within its finite bound. The sign of a zero
    is never judged (spec: tolerance.comparison.signed_zero): |-0 - 0| is 0, within any bound.

    Is equivalent to ``assert_equal(isnan(got), isnan(want)); assert_equal(got[isinf(want)],
    want[isinf(want)]); assert isfinite(got[finite]).all() and (abs(got - want) <= bound)[finite].all()``.
    """
    want, bound = nearer(expected, got), expected.bound
    finite = np.isfinite(want)
    check_bound(want, bound)
    if got.size == 0:
        return Judgement(Verdict.PASS, "", 0.0, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if finite.all():  # the common case: one pass decides a pass (a non-finite `got` fails `<=`)
            err = np.abs(got - want)
            if (err <= bound).all():
                worst = int(np.argmax(err / np.where(bound > 0, bound, np.finfo(np.float64).tiny)))
                return Judgement(Verdict.PASS, "", float(err.flat[worst]), float(bound.flat[worst]))
    pattern_differs = differs_in_nonfinite_pattern(got, want) & ~accepts_any(want, bound)
    if pattern_differs.any():
        where = np.argwhere(pattern_differs)
        first = tuple(where[0])
        message = (f"nonfinite: {len(where)} of {got.size} elements differ in NaN/inf pattern; "
                   f"first {_index(first)}: got {_num(got[first])}, expected {_num(want[first])}")
        return Judgement(Verdict.NONFINITE, message, cause=UNEXPLAINED, rules=touched_rules(expected, pattern_differs),
                         where=tuple(int(i) for i in first))

    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(got - want), 0.0)  # both finite here; an overflowing difference is inf
        ratio = np.where(finite, err / np.where(bound > 0, bound, np.finfo(np.float64).tiny), 0.0)
    worst = np.unravel_index(int(np.argmax(ratio)), got.shape)
    # the error and bound of one element, the worst relative to its bound: a reader can check a row's verdict
    # against them (a pass has max_abs_err <= bound, a value divergence max_abs_err > bound)
    max_abs_err, worst_bound = float(err[worst]), float(np.where(finite, bound, 0.0)[worst])
    outside = err > bound
    if outside.any():
        message = (f"value: {int(outside.sum())} of {got.size} elements outside bound; worst {_index(worst)}: "
                   f"got {_num(got[worst])}, expected {_num(want[worst])}, "
                   f"|err| {err[worst]:.3g} > bound {worst_bound:.3g}")
        return Judgement(Verdict.VALUE, message, max_abs_err, worst_bound, cause=UNEXPLAINED,
                         rules=touched_rules(expected, outside), where=tuple(int(i) for i in worst))
    return Judgement(Verdict.PASS, "", max_abs_err, worst_bound)


def nearer(expected: Expected, got: np.ndarray) -> np.ndarray:
    """The value each element is judged against: the expected one, or its alternate (Expected.alternate) where
    the answer lies nearer that. An element then passes within its bound of either, and fails outside both. A
    reduced value's alternates are candidates (a sum that took its terms the second way): the nearest is its.

    Is equivalent to ``where(isfinite(value) & isfinite(alternate) & (|got - alternate| < |got - value|),
    alternate, value)``.
    """
    want, other = expected.value, expected.alternate
    if other is None or np.shape(got) != np.shape(want):
        return want
    if np.ndim(want) == 0 and np.ndim(other) == 1 and other.size:  # a sum's candidates: the one nearest the answer
        if not np.isfinite(got):
            return want
        with np.errstate(invalid="ignore", over="ignore"):
            other = other[np.argmin(np.abs(got - other))]
    elif np.shape(other) != np.shape(want):
        return want
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(want) & np.isfinite(other) & (np.abs(got - other) < np.abs(got - want)),
                        other, want)


def inputs_at(judgement: Judgement, case_input: np.ndarray, case_target: np.ndarray,
              shape: tuple[int, ...]) -> Judgement:
    """The judgement with the input and target at the element it is shown at, where the result has the inputs'
    broadcast shape (reduction none, the gradients): a maintainer reads the failing arguments off the message
    without opening another file. A reduced result has no one element to name."""
    if judgement.where is None:
        return judgement
    try:
        broadcast = np.broadcast_shapes(np.shape(case_input), np.shape(case_target))
    except ValueError:
        return judgement
    if tuple(shape) != broadcast:
        return judgement
    x, t = np.broadcast_to(case_input, broadcast), np.broadcast_to(case_target, broadcast)
    at = judgement.where
    return dataclasses.replace(judgement, message=f"{judgement.message}; at input {_num(x[at])}, "
                                                  f"target {_num(t[at])}")


def accepts_any(want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Per element: whether the expectation accepts any value (spec: tolerance.comparison, a convention whose
    choice is arbitrary). The reference marks such an element with a NaN value and an infinite bound, which
    no other expectation has: every other bound is finite or NaN (reference/forward.py: as_bound).

    Is equivalent to ``isnan(want) & (bound == inf)``.
    """
    return np.isnan(want) & (np.asarray(bound) == np.inf)


def differs_in_nonfinite_pattern(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: NaN where the other is not, or an infinity of another sign or none (spec: tolerance.comparison).

    Is equivalent to ``(isnan(got) != isnan(want)) | (isposinf(got) != isposinf(want)) | (isneginf(got) !=
    isneginf(want))``: where neither is NaN, an infinity on either side matches only the same infinity.
    """
    with np.errstate(invalid="ignore"):
        return (np.isnan(got) != np.isnan(want)) | ((np.isinf(got) | np.isinf(want)) & (got != want))


def check_bound(want: np.ndarray, bound: np.ndarray) -> None:
    """Every finite expectation has a finite, non-negative bound; anything else is a harness bug.

    Raises
    ------
    HarnessBug
        naming the first element: an infinite or NaN bound would accept anything, so it must
        never reach a verdict.
    """
    if np.shape(bound) != np.shape(want):
        raise HarnessBug(f"bound of shape {np.shape(bound)} for an expectation of shape {np.shape(want)}")
    bound = np.asarray(bound)
    if bound.size == 0 or (bound.min() >= 0 and bound.max() < np.inf):  # every bound finite, none negative
        return                                                           # (a NaN fails both tests)
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(want) & ~((bound >= 0) & np.isfinite(bound))
    if bad.any():
        first = tuple(np.argwhere(bad)[0])
        raise HarnessBug(f"bound {_num(bound[first])} at {_index(first)} for the finite expectation "
                         f"{_num(want[first])}: the reference must give a finite bound wherever it "
                         f"predicts a finite value (spec: tolerance.comparison)")


def missing_warnings(expected: Expected, observed: Observation, spec: Spec) -> tuple[str, ...]:
    """Ids of expected warnings that no observed warning matches (spec: warnings; advisory only)."""
    if not expected.warnings:
        return ()
    patterns = {row["id"]: row.get("match") for row in spec.data["warnings"]["expected"]}
    missing = []
    for warning_id in expected.warnings:
        pattern = patterns.get(warning_id)
        if pattern and not any(re.search(pattern, text) for text in observed.warnings):
            missing.append(warning_id)
    return tuple(missing)


def touched_rules(expected: Expected, bad: np.ndarray | None) -> tuple[str, ...]:
    """The spec rules the case touches where it diverges: the rule of each `bad` element (the formula's
    included) where the expectation maps its elements, with the rules that shaped the whole result.

    Is equivalent to ``sorted({rule_names[code] for code in rule_map[bad]} | case-wide rules)`` in the order
    of rule_names, then of expected.rules.
    """
    names = expected.rule_names
    if bad is not None and expected.rule_map is not None and bad.shape == expected.rule_map.shape:
        codes = set(np.unique(expected.rule_map[bad]).tolist())
        at_elements = [name for code, name in enumerate(names) if code in codes]
    else:
        at_elements = [names[0], *(r for r in expected.rules if r in names)]
    return tuple(dict.fromkeys([*at_elements, *(r for r in expected.rules if r not in names)]))


def _index(index: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


_SHOWN_AT = re.compile(r"(?:value|nonfinite): [^;]*; (?:worst|first) \[((?:\d{1,9}(?:, \d{1,9})*)?)\]")


def shown_at(message: str) -> tuple[int, ...] | None:
    """The element a value or non-finite divergence's message shows (its judgement's `where`), read back from a
    row's message; None for any other message."""
    found = _SHOWN_AT.match(message)
    if found is None:
        return None
    return tuple(int(i) for i in found.group(1).split(", ")) if found.group(1) else ()


def _num(x: float) -> str:
    return repr(float(x))
