"""Reference gradients against mpmath derivatives and against finite differences of the reference."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from conformance.core.model import upstream_gradient
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

mpmath.mp.dps = 50
N_RANDOM = 10_000


def _points(rng, n, log_target):
    x = rng.normal(-1.0, 2.0, n) * 10.0 ** rng.uniform(-2, 1.5, n)
    t = rng.normal(0, 2, n) if log_target else 10.0 ** rng.uniform(-30, 5, n)
    return x, t


def _exact(x, t, log_target, wrt):
    f = (lambda a, b: mpmath.exp(b) * (b - a)) if log_target else (lambda a, b: b * (mpmath.log(b) - a))
    a, b = mpmath.mpf(x), mpmath.mpf(t)
    return mpmath.diff(lambda v: f(v, b), a) if wrt == "input" else mpmath.diff(lambda v: f(a, v), b)


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("part", ["grad_input", "grad_target"])
def test_pointwise_gradients_agree_with_mpmath(spec, log_target, part):
    rng = np.random.default_rng(7 + log_target)
    x, t = _points(rng, N_RANDOM, log_target)
    expected = expected_grad(make_case(x, t, log_target=log_target), spec, part)
    upstream = upstream_gradient(x.shape)
    bad = []
    for i in range(N_RANDOM):
        want = _exact(x[i], t[i], log_target, part.removeprefix("grad_")) * mpmath.mpf(upstream[i])
        err = abs(mpmath.mpf(expected.value[i]) - want)
        # the reference itself is far inside the bound it gives frameworks: within 4 ulp of float64
        if err > 4 * np.spacing(abs(float(want))) + 1e-300:
            bad.append((x[i], t[i], expected.value[i], float(want)))
    assert not bad, f"{len(bad)} of {N_RANDOM} off, first: {bad[0]}"


@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_central_differences_of_the_reference(spec, reduction, log_target):
    """d/dx_i of sum(upstream * loss) by central differences equals grad_input (smooth region)."""
    rng = np.random.default_rng(3)
    x = rng.normal(-1.5, 0.5, (3, 4))
    t = rng.normal(-1.0, 0.5, (3, 4)) if log_target else rng.uniform(0.1, 1.0, (3, 4))
    weights = upstream_gradient(x.shape if reduction == "none" else ())
    objective = lambda a, b: float(np.sum(weights * expected_forward(
        make_case(a, b, reduction=reduction, log_target=log_target), spec).value))
    for part, arg in (("grad_input", 0), ("grad_target", 1)):
        got = expected_grad(make_case(x, t, reduction=reduction, log_target=log_target), spec, part).value
        h = 1e-6
        for index in np.ndindex(x.shape):
            args = [x.copy(), t.copy()]
            args[arg][index] += h
            up = objective(*args)
            args[arg][index] -= 2 * h
            numeric = (up - objective(*args)) / (2 * h)
            assert abs(numeric - got[index]) <= 1e-6 * max(1.0, abs(got[index])), (part, index, numeric, got[index])


def test_broadcast_gradients_are_summed_back(spec):
    """input (3,) against target (2, 3), sum: grad_input_j = -sum_i t_ij * upstream."""
    t = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    got = expected_grad(make_case(np.full(3, -1.0), t, reduction="sum"), spec, "grad_input")
    assert got.shape == (3,)
    np.testing.assert_allclose(got.value, -1.25 * t.sum(0), rtol=1e-15)


@pytest.mark.parametrize("log_target, x, t, part, want", [
    # spec: gradients.conventions, written from the text
    (False, -1.0, 0.0, "grad_input", 0.0),
    (False, -1.0, 0.0, "grad_target", -np.inf),       # one-sided limit
    # spec: gradients.conventions.infinite_input = limit -- at p = 0 with q = 0 the loss jumps to +inf
    (False, -np.inf, 0.0, "grad_target", np.inf),
    (False, -np.inf, 0.0, "grad_input", 0.0),
    (True, -np.inf, -np.inf, "grad_target", np.inf),
    (False, np.inf, 0.0, "grad_target", -np.inf),
    (True, np.inf, -np.inf, "grad_target", -np.inf),
    (True, np.inf, -np.inf, "grad_input", 0.0),
    # input -inf with p > 0: the formula's limit, log(t) - x + 1 = +inf; grad_input -t
    (False, -np.inf, 0.5, "grad_target", np.inf),
    (False, -np.inf, 0.5, "grad_input", -0.5 * 1.25),
    (True, -np.inf, -1.0, "grad_target", np.inf),
    (False, -1.0, -0.5, "grad_input", np.nan),        # outside the domain
    (False, -1.0, -0.5, "grad_target", np.nan),
    (True, -1.0, -np.inf, "grad_input", 0.0),
    (True, -1.0, -np.inf, "grad_target", 0.0),
    (False, np.nan, 0.5, "grad_input", np.nan),       # NaN propagates
    (False, -1.0, 0.5, "grad_input", -0.5 * 1.25),
    (False, -1.0, 0.5, "grad_target", (np.log(0.5) + 2.0) * 1.25),
    (True, -1.0, 0.0, "grad_target", 2.0 * 1.25),
])
def test_gradient_conventions(spec, log_target, x, t, part, want):
    got = expected_grad(make_case(x, t, reduction="sum", log_target=log_target), spec, part).value
    np.testing.assert_allclose(got, want, rtol=1e-15) if np.isfinite(want) else np.testing.assert_equal(got, want)


def test_gradient_has_the_argument_dtype_and_shape(spec):
    case = make_case(np.zeros((2, 3)), np.full((2, 3), 0.5), reduction="mean", dtype=("float16", "float32"))
    assert expected_grad(case, spec, "grad_input").result_dtype == "float16"
    assert expected_grad(case, spec, "grad_target").result_dtype == "float32"


def test_upstream_pattern_matches_the_spec_text():
    """spec: gradients.upstream: 0.75 + 0.125 * (i mod 5); 1.25 for a scalar."""
    np.testing.assert_array_equal(upstream_gradient((2, 3)), [[0.75, 0.875, 1.0], [1.125, 1.25, 0.75]])
    assert upstream_gradient(()) == 1.25


@pytest.mark.parametrize("reduction", ["none", "sum", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_second_order_is_the_derivative_of_grad_input_by_target(spec, reduction, log_target):
    """grad2_input = d/dt sum(w * grad_input), w = upstream(grad_input's shape): central differences."""
    rng = np.random.default_rng(11)
    x = rng.normal(-1.5, 0.5, (4,))
    t = rng.normal(-1.0, 0.5, (3, 4)) if log_target else rng.uniform(0.1, 1.0, (3, 4))
    w = upstream_gradient(x.shape)
    objective = lambda b: float(np.sum(w * expected_grad(
        make_case(x, b, reduction=reduction, log_target=log_target), spec, "grad_input").value))
    got = expected_grad(make_case(x, t, reduction=reduction, log_target=log_target), spec, "grad2_input").value
    assert got.shape == t.shape
    h = 1e-6
    for index in np.ndindex(t.shape):
        b = t.copy()
        b[index] += h
        up = objective(b)
        b[index] -= 2 * h
        numeric = (up - objective(b)) / (2 * h)
        assert abs(numeric - got[index]) <= 1e-6 * max(1.0, abs(got[index])), (index, numeric, got[index])


@pytest.mark.parametrize("part, want", [("grad_input", 0.0), ("grad_target", 0.0), ("grad2_input", 0.0)])
def test_target_negative_zero_choice_gives_zero_gradients(spec, part, want):
    """spec: gradients.conventions.target_negative.choices.zero -- Paddle's clamped loss has no slope there."""
    from conformance.core.choices import Alternative, with_alternatives

    zero = with_alternatives(spec, (Alternative("gradients.conventions.target_negative", "zero"),))
    got = expected_grad(make_case([-1.0], [-0.5], reduction="sum"), zero, part).value
    np.testing.assert_array_equal(got, [want])


# exp(11.5) = 98715.77 overflows float16 (largest 65504); the mean of 2 scales by 1.25 / 2 = 0.625
# (spec: gradients.upstream.reduced). Worked by hand, and what torch 2.13 gives on CPU:
HELD = {  # reductions.operand = result_dtype: exp(target) is +inf in float16
    "grad_input": [-np.inf, -np.inf],     # -inf * 0.625
    "grad_target": [np.inf, np.nan],      # inf * (11.5 - 0) + inf; inf * (11.5 - 13) + inf = -inf + inf
    "grad2_input": [-np.inf, -np.inf],    # -inf * w * 0.625
}
WIDE_F32 = {  # reductions.operand = float32_accumulation: exp(target) finite in float32, each gradient rounded to float16
    "grad_input": [-61696.0, -61696.0],   # -98715.77 * 0.625 = -61697.4, to float16
    "grad_target": [np.inf, -30848.0],    # 98715.77 * 12.5 * 0.625 overflows; 98715.77 * -0.5 * 0.625 = -30848.7
    "grad2_input": [-46272.0, -53984.0],  # -98715.77 * 0.625 * w, w = 0.75, 0.875 (spec: gradients.upstream.none)
}


@pytest.mark.parametrize("part", sorted(HELD))
@pytest.mark.parametrize("operand, want", [("result_dtype", HELD), ("float32_accumulation", WIDE_F32)])
def test_gradient_intermediates_are_held_in_the_operand_dtype(spec, part, operand, want):
    """spec: reductions.operand -- the gradients' exp(target) is a tensor of the result dtype, as the forward's
    terms are; float32_accumulation keeps it in float32 and rounds only each gradient."""
    from conformance.core.choices import Alternative, with_alternatives

    case = make_case([0.0, 13.0], [11.5, 11.5], log_target=True, reduction="mean", dtype="float16")
    chosen = spec if operand == "result_dtype" else with_alternatives(spec, (Alternative("reductions.operand",
                                                                                          operand),))
    got, expected = expected_grad(case, chosen, part), np.array(want[part])
    finite = np.isfinite(expected)
    np.testing.assert_equal(np.where(finite, 0.0, got.value), np.where(finite, 0.0, expected))  # NaN, inf and its sign
    assert (np.abs(got.value[finite] - expected[finite]) <= got.bound[finite]).all()


def test_the_xlogy_product_rule_loses_the_one_at_subnormal_targets(spec):
    """spec: gradients.target_product_rule = xlogy -- grad_target = log(t) * s + fl(fl(s) * t) / t - x * s,
    s = 1.25 / 3 (the mean of 3, spec: gradients.upstream.reduced). Worked by hand in mpmath with float32's
    roundings; torch 2.13 on CPU gives -43.032887, -42.241802, 0.12785533 and NaN for t = +inf."""
    from conformance.core.choices import Alternative, with_alternatives

    tiny = 2.0**-149
    targets = [tiny, 3 * tiny, 0.5]
    case = make_case([0.0, 0.0, 0.0], targets, reduction="mean", dtype="float32")
    xlogy = with_alternatives(spec, (Alternative("gradients.target_product_rule", "xlogy"),))
    s = mpmath.mpf(1.25) / 3
    g = float(np.float32(float(s)))
    want = [float(mpmath.log(t) * s + float(np.float32(g * t)) / mpmath.mpf(t)) for t in targets]
    got = expected_grad(case, xlogy, "grad_target")
    assert (np.abs(got.value - want) <= got.bound).all()
    # 0 * g rounds to 0 at t = 2**-149 and 1.25 * 2**-149 to 2**-149 at t = 3 * 2**-149: the 1 is lost, then a third
    canonical = expected_grad(case, spec, "grad_target")
    assert abs(canonical.value[0] - want[0]) > 0.4 and abs(canonical.value[1] - want[1]) > 0.08
    assert canonical.value[2] == got.value[2]
    at_inf = make_case([0.0], [np.inf], reduction="sum", dtype="float32")
    assert np.isnan(expected_grad(at_inf, xlogy, "grad_target").value[0])
    assert expected_grad(at_inf, spec, "grad_target").value[0] == np.inf
