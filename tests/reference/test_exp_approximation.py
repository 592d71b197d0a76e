"""dtypes.exp = float32_approximation: an exp that reduces its argument in float32 saturates where float32 does
and carries float32's error in every dtype. Its saturation is evidence; its error only places an answer within
rounding of it (explain.within_rounding), beside whatever else the answer shows."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.choices import Alternative, with_alternatives
from conformance.core.model import Observation, upstream_gradient
from conformance.judge.compare import passes
from conformance.judge.explain import explain, within_rounding
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

DIALECT = "distribution_sum"
APPROXIMATION = Alternative("dtypes.exp", "float32_approximation")
NAN_FORMULA = Alternative("gradients.conventions.nan_propagation", "formula")


def _approximated(spec):
    return with_alternatives(spec, (APPROXIMATION,))


def _float32_reduced_exp(t):
    """exp(t) as 2**y with y = t * log2(e) formed in float32 from the target rounded to float32, the power taken
    exactly and the result rounded to float32: the argument reduction whose error grows with |t|."""
    y = np.float32(np.asarray(t, np.float64).astype(np.float32) * np.float32(1.442695))
    return np.exp2(np.float64(y)).astype(np.float32).astype(np.float64)


def _observed(value, dtype="float64"):
    return Observation(value=np.asarray(value, dtype=np.float64), dtype=dtype, shape=np.shape(value))


def test_the_approximation_saturates_a_float64_exp_at_float32s_range(spec):
    """float64: exp(100) is 2.7e43, the approximation's +inf; exp(-90) is 8.2e-40, its 0 (no subnormal results).
    The loss and the input gradient follow in IEEE arithmetic; the spec's own answers stay finite."""
    case = make_case([[0.0, 0.0]], [[100.0, -90.0]], reduction="none", log_target=True, dtype="float64")
    canonical, approximated = expected_forward(case, spec, DIALECT), expected_forward(case, _approximated(spec), DIALECT)
    assert np.isfinite(canonical.value).all() and approximated.value.tolist() == [np.inf]
    single = make_case([[0.0]], [[-90.0]], reduction="none", log_target=True, dtype="float64")
    assert expected_forward(single, _approximated(spec), DIALECT).value.tolist() == [0.0]
    assert expected_forward(single, spec, DIALECT).value[0] == pytest.approx(np.exp(-90.0) * -90.0, rel=1e-15)
    gradient = expected_grad(case, _approximated(spec), "grad_input", DIALECT).value
    assert gradient[0, 0] == -np.inf and gradient[0, 1] == 0.0


def test_a_saturated_answer_is_evidence_of_the_approximation(spec):
    case = make_case([[0.0]], [[100.0]], reduction="none", log_target=True, dtype="float64")
    observed = _observed([np.inf])
    assert [str(a) for a in explain(case, observed, spec, "forward", dialect=DIALECT)] == [str(APPROXIMATION)]


@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_float32s_error_in_a_float64_call_lies_within_rounding_of_the_approximation(spec, part):
    """A float64 call whose exp is reduced in float32: outside float64's bound, within the approximation's, and
    no evidence of it (its answer is within its own bound of the spec's); an answer off by 1% is neither."""
    x, t = np.array([[-3.0, -0.5, 1.25]]), np.array([[-2.0, 0.75, 30.0]])
    case = make_case(x, t, reduction="none", log_target=True, dtype="float64")
    e, g = _float32_reduced_exp(t), np.broadcast_to(upstream_gradient((1,))[:, None], t.shape)
    answer = {"forward": (e * (t - x)).sum(-1),
              "grad_input": -e * g, "grad_target": (e * (t - x) + e) * g,
              "grad2_input": -e * g * upstream_gradient(x.shape)}[part]
    expect = expected_forward if part == "forward" else (lambda c, s, d: expected_grad(c, s, part, d))
    assert not passes(expect(case, spec, DIALECT), _observed(answer))
    assert passes(expect(case, _approximated(spec), DIALECT), _observed(answer))
    assert explain(case, _observed(answer), spec, part, dialect=DIALECT) is None
    assert within_rounding(case, _observed(answer), spec, part, dialect=DIALECT) == (APPROXIMATION,)
    assert within_rounding(case, _observed(answer * 1.01), spec, part, dialect=DIALECT) is None


def test_the_approximation_is_named_last_beside_what_else_the_answer_shows(spec):
    """A NaN input whose input gradient is -exp(t) (the formula, ignoring the NaN) with float32's error: within
    rounding of the NaN convention's choice and the approximation, the approximation last (the row joins the
    convention's defect: core/defects.py, root_cause)."""
    t = np.array([[0.4, 2.5]])
    case = make_case([[np.nan, -1.0]], t, reduction="none", log_target=True, dtype="float64")
    answer = -_float32_reduced_exp(t) * upstream_gradient((1,))[:, None]
    assert within_rounding(case, _observed(answer), spec, "grad_input", dialect=DIALECT) == (NAN_FORMULA, APPROXIMATION)


def test_the_approximation_leaves_probabilities_and_the_spec_alone(spec):
    """Without log_target no term holds exp: the choice changes nothing; with it, the spec's own bound is float64's."""
    plain = make_case([[-1.0]], [[0.5]], reduction="none", log_target=False, dtype="float64")
    assert expected_forward(plain, _approximated(spec), DIALECT).bound == expected_forward(plain, spec, DIALECT).bound
    logged = make_case([[-1.0]], [[0.5]], reduction="none", log_target=True, dtype="float64")
    assert expected_forward(logged, spec, DIALECT).bound[0] < 1e-14
    assert expected_forward(logged, _approximated(spec), DIALECT).bound[0] > 1e-7


@pytest.mark.parametrize("answer", [[-1.35e-7, 0.0], [2.7e-7, 0.0], [0.0, 0.0], [1.35e-7, 3e-7]])
def test_a_wrong_term_near_equal_distributions_is_no_rounding_of_the_approximation(spec, answer):
    """exp's error is relative to the term's value, exp(t) (t - x), not to its terms' magnitudes: where t ~ x the
    term is near 0 and so is what the approximation may move it by. A sign flipped, a term doubled or lost, or a
    nonzero term where t == x is no rounding of it; nor evidence of it beside a saturated element."""
    case = make_case([[-2.000001, -0.5]], [[-2.0, -0.5]], reduction="none", log_target=True, dtype="float64")
    spec_value = expected_forward(case, spec, "canonical").value
    assert spec_value[0, 0] == pytest.approx(np.exp(-2.0) * 1e-6, rel=1e-6) and spec_value[0, 1] == 0.0
    assert within_rounding(case, _observed([answer]), spec, "forward", dialect="canonical") is None
    saturated = make_case([[-2.000001, 0.0]], [[-2.0, -90.0]], reduction="none", log_target=True, dtype="float64")
    assert explain(saturated, _observed([[answer[0], 0.0]]), spec, "forward", dialect="canonical") is None


def test_an_approximation_never_carries_a_set_that_widens_the_bound(spec):
    """Beside the approximation only sets that widen no bound of their own are tried: a float64 NaN input's
    gradient, -exp(t) off by a relative 1e-6, is not within rounding of a whole float32 computation."""
    case = make_case([[np.nan]], [[0.4]], reduction="none", log_target=True, dtype="float64")
    answer = -np.exp(0.4) * upstream_gradient((1,))[0] * (1 + 1e-6)
    found = within_rounding(case, _observed([[answer]]), spec, "grad_input", dialect=DIALECT) or ()
    assert "dtypes.computation" not in {a.path for a in found}


def test_the_loss_and_its_gradients_saturate_alike_at_an_infinite_input(spec):
    """Below `below` exp(t) is 0 whatever the input: 0 * (t - x) at an infinite x is NaN in the loss, as in the
    gradient with respect to target, where the infinities convention gives the spec's limits."""
    case = make_case([[np.inf, -np.inf]], [[-90.0, -90.0]], reduction="none", log_target=True, dtype="float64")
    approximated = _approximated(spec)
    assert np.isnan(expected_forward(case, approximated, "canonical").value).all()
    assert np.isnan(expected_grad(case, approximated, "grad_target", "canonical").value).all()
    assert not np.isnan(expected_forward(case, spec, "canonical").value).any()


def test_a_target_terms_other_rounding_saturates_too(spec):
    """A float32 target's own term rounded the other way (dtypes.argument_terms = own_dtype, Expected.alternate)
    is the approximation's 0 where exp(t) saturates, as the value is: no unsaturated answer passes there."""
    pair = with_alternatives(spec, (Alternative("dtypes.argument_terms", "own_dtype"), APPROXIMATION))
    case = make_case([[0.0, 1.0]], [[-87.9, 5.0]], reduction="none", log_target=True, dtype=("float64", "float32"))
    got = expected_forward(case, pair, "canonical")
    assert got.value[0, 0] == 0.0 and (got.alternate is None or got.alternate[0, 0] == 0.0)
    unsaturated = np.array([[np.exp(np.float32(-87.9)) * -87.9, got.value[0, 1]]])
    assert not passes(got, _observed(unsaturated))


def test_explain_names_the_approximation_after_the_behaviour_beside_it(spec):
    """A row that shows a saturated exp and a NaN input's formula gradient is the NaN convention's row with the
    approximation also showing (explained sets name the approximation last, as within_rounding does). At 88.5
    float32's own exp is finite: only the approximation is +inf there."""
    t = np.array([[0.4, 88.5]])
    case = make_case([[np.nan, 0.0]], t, reduction="none", log_target=True, dtype="float64")
    answer = np.array([[-np.exp(0.4), -np.inf]]) * upstream_gradient((1,))[:, None]
    assert explain(case, _observed(answer), spec, "grad_input", dialect=DIALECT) == (NAN_FORMULA, APPROXIMATION)
