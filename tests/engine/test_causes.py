"""Honest causes: a divergence is attributed to what reproduces it, never to a rule picked by priority.

The observations here are computed with plain NumPy from the loss's definition, each with one fault a port
was seen to make; the judge must name the rule that fault breaks, or say `unexplained` and list the rules.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance.core.model import Observation
from conformance.judge.casejudge import CaseJudge
from tests.helpers import make_case

X = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]))
T = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
TERMS = T * (np.log(T) - X)  # the pointwise loss: every target positive, no convention applies


def _judged(case, spec, observed, part="forward"):
    return CaseJudge(case, spec).judgement(part, "canonical", observed)


def _value(v):
    v = np.asarray(v, dtype=np.float64)
    return Observation(value=v, dtype="float64", shape=v.shape)


def test_mean_divided_by_the_batch_is_the_mean_divisor(spec):
    """The issue's first planted fault: `mean` divided by size(0) was filed under pointwise.formula."""
    judged = _judged(make_case(X, T, reduction="mean"), spec, _value(TERMS.sum() / X.shape[0]))
    assert judged.verdict.value == "value" and judged.cause == "reductions.mean.divisor"
    assert "divides by the size of dimension 0" in judged.message


def test_batchmean_divided_by_the_element_count_is_the_batchmean_divisor(spec):
    judged = _judged(make_case(X, T, reduction="batchmean"), spec, _value(TERMS.sum() / X.size))
    assert judged.cause == "reductions.batchmean.divisor" and "number of elements" in judged.message


def test_a_gradient_that_ignores_the_upstream_gradient_is_the_upstream_rule(spec):
    """d/dx of sum(t * (log t - x)) is -t; the spec's upstream gradient for a 0-d result is 1.25, so the
    right answer is -1.25 t and a port that ignores it answers -t."""
    judged = _judged(make_case(X, T, reduction="sum"), spec, _value(-T), part="grad_input")
    assert judged.verdict.value == "value" and judged.cause == "gradients.upstream"
    right = _judged(make_case(X, T, reduction="sum"), spec, _value(-1.25 * T), part="grad_input")
    assert right.verdict.value == "pass"


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_a_gradient_of_zeros_is_the_parts_rule_whatever_its_verdict(spec, reduction):
    """MindSpore's mint APIs give zeros for the target's gradient under jit: one behaviour, whether the spec's
    gradient is finite there (a value verdict) or -inf at a zero target (a NaN/inf pattern verdict)."""
    target = T.copy()
    target[0, 0] = 0.0  # grad_target is -inf there (gradients.conventions.target_zero)
    case = make_case(X, target, reduction=reduction)
    finite = _judged(make_case(X, T, reduction=reduction), spec, _value(np.zeros(X.shape)), part="grad_target")
    infinite = _judged(case, spec, _value(np.zeros(X.shape)), part="grad_target")
    assert (finite.verdict.value, infinite.verdict.value) == ("value", "nonfinite")
    for judged in (finite, infinite):
        assert judged.cause == "gradients.parts", judged.message
        assert judged.message.endswith("behaves as fault gives zeros for the whole gradient (the argument taken as a "
                                       "constant) (breaks gradients.parts)")


def test_a_loss_of_zero_is_not_the_zero_gradient_pattern(spec):
    """The pattern is a gradient's: a forward that returns 0 breaks the formula, not gradients.parts."""
    judged = _judged(make_case(X, T, reduction="sum"), spec, _value(0.0))
    assert judged.verdict.value == "value" and judged.cause != "gradients.parts"


def test_a_fault_that_breaks_no_rule_is_unexplained_with_the_rules_it_touches(spec):
    """Every value 1% too large: nobody's choice. Before, broadcasting cases blamed shapes.broadcasting."""
    case = make_case(X[:1], T, reduction="sum")  # input (1, 4) broadcasts against target (3, 4)
    terms = T * (np.log(T) - X[:1])
    judged = _judged(case, spec, _value(terms.sum() * 1.01))
    assert judged.cause == "unexplained"
    assert "shapes.broadcasting" in judged.rules and "pointwise.formula" in judged.rules


def test_a_reduced_result_of_shape_one_is_the_output_shape_rule(spec):
    """(1,) where a 0-d result is due: shapes.output, on empty and 0-d cases alike (not reductions.*.empty)."""
    for case in (make_case(X, T, reduction="batchmean"), make_case(np.zeros((0, 4)), np.zeros((0, 4)), reduction="sum"),
                 make_case(np.float64(-1.0), np.float64(0.5), reduction="batchmean")):
        judged = _judged(case, spec, Observation(value=np.zeros(1), dtype="float64", shape=(1,)))
        assert judged.verdict.value == "shape" and judged.cause == "shapes.output", case.id


def test_a_missing_api_is_not_a_convention(spec):
    """optax before 0.1.8 raised AttributeError (no optax.losses) on every call, and a mixed-dtype case read
    "behaves as dtypes.mixed = reject": a choice that expects a TypeError explains no AttributeError."""
    case = make_case(X, T, reduction="sum", dtype=("float32", "float64"))
    judged = _judged(case, spec, Observation(exception_type="AttributeError",
                                             exception_message="module 'optax' has no attribute 'losses'"))
    assert judged.verdict.value == "error" and judged.cause == "unexplained" and "behaves as" not in judged.message
    assert "dtypes.promotion" in judged.rules
    rejected = _judged(case, spec, Observation(exception_type="TypeError", exception_message="mixed dtypes"))
    assert rejected.cause == "dtypes.mixed" and "dtypes.mixed = reject" in rejected.message


def test_an_answer_the_spec_and_a_choice_both_hold_is_not_that_choice(spec):
    """A sum of near-zero terms: dividing it by the wrong size changes it by less than its bound, so an
    answer outside the spec's bound but inside the wider bound of the sum is no evidence of a wrong divisor."""
    t = np.full((2, 3), 1.0 / 3)
    x = np.log(t) + np.array([[1e-12, -1e-12, 2e-12], [0.0, 1e-12, -1e-12]])
    case = make_case(x, t, reduction="mean")
    canonical = CaseJudge(case, spec).expected(spec, "forward")
    just_outside = float(canonical.value) + 3 * float(canonical.bound)
    judged = _judged(case, spec, _value(just_outside))
    assert judged.verdict.value == "value" and judged.cause == "unexplained"


def test_the_cause_of_a_convention_is_the_choice_that_reproduces_it(spec):
    """A zero target at input -inf: torch gives NaN (target_zero = ieee), the spec 0."""
    case = make_case([[-np.inf, -1.0]], [[0.0, 1.0]], reduction="none")
    judged = _judged(case, spec, _value([[np.nan, 1.0]]))
    assert judged.cause == "pointwise.conventions.target_zero"
    other = dataclasses.replace(case, id="other")
    judged = _judged(other, spec, _value([[np.nan, 2.0]]))  # and the second element wrong as well
    assert judged.cause == "unexplained" and "pointwise.conventions.target_zero" in judged.rules
