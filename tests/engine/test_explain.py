"""explain tries only the alternatives whose choice points touch a case; that must lose nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, generate_cases
from conformance.core.choices import Alternative, alternatives, touched_paths, with_alternatives
from conformance.core.model import Observation
from conformance.judge.explain import indistinguishable, explain
from conformance.reference.forward import expected_forward, takes_input_space
from conformance.reference.grad import expected_grad
from tests.helpers import make_case


def _expect(case, spec, part, dialect):
    return expected_forward(case, spec, dialect) if part == "forward" else expected_grad(case, spec, part, dialect)


def _dialects(case, spec):
    """The dialects whose APIs take the case's input space (spec: dialects)."""
    return [d for d in spec.data["dialects"] if takes_input_space(case, d, spec)]


def _same(a, b) -> bool:
    if (a.error_id, a.result_dtype, a.shape) != (b.error_id, b.result_dtype, b.shape):
        return False
    if a.value is None or b.value is None:
        return a.value is None and b.value is None
    return (np.array_equal(a.value, b.value, equal_nan=True)
            and np.array_equal(a.bound, b.bound, equal_nan=True))


@pytest.fixture(scope="module")
def suite(spec):
    return list(generate_cases(spec, DEFAULT_SEED))


@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_an_untouched_alternative_never_changes_an_expectation(spec, suite, part):
    """The `touches` tests may say yes too often, never too seldom (every default case, every alternative)."""
    alt_specs = [(alt, with_alternatives(spec, (alt,))) for alt in alternatives(spec)]
    checked = 0
    for case in suite:
        if part not in case.parts:
            continue
        touched = touched_paths(case)
        for dialect in _dialects(case, spec):
            canonical = _expect(case, spec, part, dialect)
            for alt, alt_spec in alt_specs:
                if alt.path not in touched:
                    assert _same(_expect(case, alt_spec, part, dialect), canonical), \
                        f"{case.id} {part} ({dialect}): {alt} changes it"
                    checked += 1
    assert checked > 1000


def test_touched_paths_follow_the_values_after_rounding(spec, suite):
    """A float16 target of 1e-9 rounds to 0: the zero-target conventions touch it."""
    case = next(c for c in suite if c.dtype.target == "float16" and not c.params.log_target
                and c.input.shape == c.target.shape and c.params.reduction == "none")
    tiny = dataclasses.replace(case, target=np.full(case.target.shape, 1e-9))
    half = dataclasses.replace(case, target=np.full(case.target.shape, 0.5))
    assert "pointwise.conventions.target_zero" in touched_paths(tiny)
    assert "pointwise.conventions.target_zero" not in touched_paths(half)


def test_explain_finds_each_alternative_it_can_tell_apart(spec, suite):
    """An observation computed under an alternative is explained by a set under which it passes."""
    found = 0
    for alt in alternatives(spec):
        alt_spec = with_alternatives(spec, (alt,))
        for case, dialect in ((c, d) for c in suite for d in _dialects(c, spec)):
            canonical, under_alt = expected_forward(case, spec, dialect), expected_forward(case, alt_spec, dialect)
            if under_alt.error_id is not None or canonical.error_id is not None or _same(canonical, under_alt) \
                    or indistinguishable(under_alt, canonical):  # a difference within rounding tells nothing
                continue
            observed = Observation(value=under_alt.value, dtype=under_alt.result_dtype, shape=under_alt.shape)
            behaves_as = explain(case, observed, spec, dialect=dialect)
            assert behaves_as is not None, f"{case.id} ({dialect}): {alt} not found"
            found += 1
            break
    assert found >= 5


@pytest.mark.parametrize("part, reduction, formula", [
    # grad_input = -target * upstream / numel: 1.25 / 3 (spec: gradients.upstream.reduced, reductions.mean)
    ("grad_input", "mean", lambda t: -np.asarray(t) * 1.25 / 3),
    # grad2_input = -w * upstream, w = 0.75 + 0.125 * i (spec: gradients.second_order.definition)
    ("grad2_input", "sum", lambda t: -1.25 * (0.75 + 0.125 * np.arange(len(t)))),
])
def test_a_formula_valued_alternative_explains_an_observation_rounded_as_the_formula_is(spec, part, reduction, formula):
    """Under target_negative = formula the negative target's gradient is the formula's value, with the formula's
    bound (u times its terms, spec: tolerance.gradient): an observation 1 ulp of float32 from it is explained."""
    x, t = [0.3, 0.2, 0.1], [-0.5, 0.25, 0.3]
    case = make_case(x, t, reduction=reduction, dtype="float32")
    value = formula(t).astype(np.float32)
    value[0] = np.nextafter(value[0], np.float32(np.inf))
    observed = Observation(value=value.astype(np.float64), dtype="float32", shape=(3,))
    assert explain(case, observed, spec, part=part) == (Alternative("gradients.conventions.target_negative",
                                                                    "formula"),)


ARBITRARY_CASES = {
    # a NaN input: grad_input = -target * 1.25 / 3 elsewhere (spec: gradients.upstream.reduced, reductions.mean)
    "gradients.conventions.nan_propagation": ([np.nan, 0.2, 0.1], [0.3, 0.25, 0.3]),
    # a negative target: outside the domain
    "gradients.conventions.target_negative": ([0.3, 0.2, 0.1], [-0.5, 0.25, 0.3]),
}


@pytest.mark.parametrize("path", sorted(ARBITRARY_CASES))
def test_arbitrary_accepts_any_value_where_its_convention_applies_and_nothing_else(spec, path):
    """Under `arbitrary` the element the convention covers takes any value (NaN and infinities included);
    every other element is judged as before, so an answer wrong there still fails."""
    from conformance.judge.compare import classify
    from conformance.core.model import Verdict

    x, t = ARBITRARY_CASES[path]
    case = make_case(x, t, reduction="mean", dtype="float32")
    declared = with_alternatives(spec, (Alternative(path, "arbitrary"),))
    expected = expected_grad(case, declared, "grad_input")
    right = (-np.asarray(t) * 1.25 / 3).astype(np.float32).astype(np.float64)
    for anything in (123.0, np.inf, -np.inf, np.nan, 0.0):
        got = right.copy()
        got[0] = anything
        assert classify(expected, Observation(value=got, dtype="float32", shape=(3,)), declared).verdict \
            is Verdict.PASS, anything
    for wrong, verdict in ((right[1] + 1e-3, Verdict.VALUE), (np.nan, Verdict.NONFINITE), (np.inf, Verdict.NONFINITE)):
        got = right.copy()
        got[0], got[1] = 123.0, wrong
        assert classify(expected, Observation(value=got, dtype="float32", shape=(3,)), declared).verdict is verdict


@pytest.mark.parametrize("path", sorted(ARBITRARY_CASES))
def test_explain_never_names_arbitrary(spec, path):
    """`arbitrary` fits every answer where it applies, so it is no explanation: explain leaves it out (the
    spec's documents_only) and an answer nothing else gives stays unexplained."""
    x, t = ARBITRARY_CASES[path]
    case = make_case(x, t, reduction="mean", dtype="float32")
    got = (-np.asarray(t) * 1.25 / 3).astype(np.float32).astype(np.float64)
    got[0] = 123.0
    assert Alternative(path, "arbitrary") not in alternatives(spec)
    assert explain(case, Observation(value=got, dtype="float32", shape=(3,)), spec, part="grad_input") is None


def test_a_sum_whose_candidate_lies_near_the_specs_answer_is_no_evidence():
    """A reduced value's alternates are candidates (the sum with one element's term the other way): an alternative
    whose nearest answer is far from the spec's, but one of whose candidates lies within rounding of it, cannot
    be told from the spec's answer by what a framework returns, so it explains nothing."""
    from conformance.core.model import Expected

    def summed(value, alternate=None):
        return Expected(result_dtype="float64", shape=(), value=np.array(value), bound=np.array(1.0),
                        alternate=None if alternate is None else np.array(alternate))

    spec_answer = summed(100.0)
    assert not indistinguishable(summed(110.0), spec_answer)
    assert not indistinguishable(summed(110.0, [95.0, 120.0]), spec_answer)  # every candidate 5 bounds away
    assert indistinguishable(summed(110.0, [120.0, 101.5]), spec_answer)  # one within twice the bounds together
    assert indistinguishable(summed(110.0), summed(100.0, [108.0]))  # and the spec's own, where it has them


def test_an_answer_is_evidence_of_a_sum_by_the_candidate_it_matched():
    """What tells an answer from the spec's is the candidate it matched: the nearest sum far from the spec's answer
    is evidence, though another candidate lies near it; a candidate near it is not."""
    from conformance.core.model import Expected
    from conformance.judge.explain import as_answered

    summed = Expected(result_dtype="float64", shape=(), value=np.array(110.0), bound=np.array(1.0),
                      alternate=np.array([101.5, 120.0]))
    spec_answer = Expected(result_dtype="float64", shape=(), value=np.array(100.0), bound=np.array(1.0))
    at = {got: as_answered(summed, Observation(value=np.array(got), dtype="float64", shape=())) for got in
          (110.2, 119.5, 101.0)}
    assert [float(e.value) for e in at.values()] == [110.0, 120.0, 101.5]
    assert [indistinguishable(e, spec_answer) for e in at.values()] == [False, False, True]
