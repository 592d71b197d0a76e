"""optax (JAX) through its adapter: the documented formula, x64, and the quirks found, each a real call.

optax's docstrings have no example to reproduce; they state the formula ("Kullback-Leibler
divergence of predicted distribution from target distribution with shape [...]"), which the
tests below check against the spec's distribution_sum dialect.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.model import Verdict, upstream_gradient
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FRAMEWORK = "optax"
KL = "optax.losses.kl_divergence"
KL_LOG = "optax.losses.kl_divergence_with_log_targets"


def _expected(case, spec, part="forward"):
    return expected_forward(case, spec, "distribution_sum") if part == "forward" else \
        expected_grad(case, spec, part, "distribution_sum")


def _run(adapter, case, api=KL, part="forward"):
    return adapter.run(case, adapter.api(api), "cpu", part)


def _behaves_as(adapter, spec, case, api=KL, part="forward"):
    observed = _run(adapter, case, api, part)
    judgement = classify(_expected(case, spec, part), observed, spec)
    found = explain(case, observed, spec, part, dialect="distribution_sum")
    return judgement.verdict, None if found is None else [str(a) for a in found]


def _softmax_pair(rng, shape):
    logits = rng.normal(size=(2, *shape))
    log_q = logits[0] - np.log(np.exp(logits[0]).sum(-1, keepdims=True))
    p = np.exp(logits[1]) / np.exp(logits[1]).sum(-1, keepdims=True)
    return log_q, p


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_documented_formula_one_kl_per_distribution(framework_adapter, spec, dtype):
    """Both functions return sum(p * (log p - log q)) over the last axis, "with shape [...]"."""
    log_q, p = _softmax_pair(np.random.default_rng(3), (2, 3, 5))
    for api, case in ((KL, make_case(log_q, p, dtype=dtype)),
                      (KL_LOG, make_case(log_q, np.log(p), log_target=True, dtype=dtype))):
        observed = _run(framework_adapter, case, api)
        assert observed.shape == (2, 3) and observed.dtype == dtype
        assert classify(_expected(case, spec), observed, spec).verdict is Verdict.PASS
        # the same numbers, independently of the reference: KL of each row, in float64
        np.testing.assert_allclose(observed.value, (p * (np.log(p) - log_q)).sum(-1),
                                   rtol=1e-6 if dtype == "float32" else 1e-14)


def test_x64_makes_float64_real(framework_adapter, spec):
    """load() enables x64: float64 in, float64 out, accurate to float64's bound (float32 arithmetic
    would miss it by eight orders of magnitude)."""
    import jax

    assert jax.config.jax_enable_x64
    log_q, p = _softmax_pair(np.random.default_rng(4), (4, 6))
    case = make_case(log_q, p, dtype="float64")
    x, _ = framework_adapter.build(case, "cpu")
    assert str(x.dtype) == "float64"
    observed = _run(framework_adapter, case)
    expected = _expected(case, spec)
    assert observed.dtype == "float64" and classify(expected, observed, spec).verdict is Verdict.PASS
    assert np.max(expected.bound) < 1e-14


def test_gradients_carry_the_upstream_of_the_reduced_shape(framework_adapter, spec):
    """jax.vjp with the upstream of the (rows,) result: grad_input = -p * upstream[row]."""
    log_q, p = _softmax_pair(np.random.default_rng(6), (3, 4))
    case = make_case(log_q, p, dtype="float64")
    observed = _run(framework_adapter, case, part="grad_input")
    np.testing.assert_allclose(observed.value, -p * upstream_gradient((3,))[:, None], rtol=1e-15)
    for part in ("grad_input", "grad_target", "grad2_input"):
        for api, c in ((KL, case), (KL_LOG, make_case(log_q, np.log(p), log_target=True, dtype="float64"))):
            assert classify(_expected(c, spec, part), _run(framework_adapter, c, api, part), spec).verdict is Verdict.PASS


def test_each_api_takes_one_target_space_and_no_reduction(framework_adapter):
    plain, log = framework_adapter.api(KL), framework_adapter.api(KL_LOG)
    assert "log_target" in framework_adapter.unsupported_reason(make_case([-1.0], [-0.5], log_target=True), plain)
    assert "log-probabilities only" in framework_adapter.unsupported_reason(make_case([-1.0], [0.5]), log)
    for reduction in ("sum", "mean", "batchmean", "avg"):
        assert "no reduction" in framework_adapter.unsupported_reason(make_case([-1.0], [0.5], reduction=reduction),
                                                                      plain)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_views_are_taken_by_jax_and_give_the_contiguous_values(framework_adapter, layout, part):
    """A JAX array has no strides: swapaxes and [..., ::2] make new arrays. The values a user gets
    through them are those of the contiguous case (docs/frameworks/optax.md: layouts are not a strided kernel path)."""
    log_q, p = _softmax_pair(np.random.default_rng(7), (4, 6))
    contiguous = _run(framework_adapter, make_case(log_q, p, dtype="float32"), part=part)
    viewed = _run(framework_adapter, make_case(log_q, p, dtype="float32", layout=layout), part=part)
    np.testing.assert_array_equal(viewed.value, contiguous.value)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
@pytest.mark.parametrize("api, dtype", [(KL, "float64"), (KL, ("bfloat16", "float32")), (KL_LOG, "float16")])
def test_reproducer_lines_compute_what_the_adapter_observes(framework_adapter, api, dtype, layout, part):
    log_q, p = _softmax_pair(np.random.default_rng(8), (3, 4))
    t = np.log(p) if api == KL_LOG else p
    case = make_case(log_q, t, log_target=api == KL_LOG, dtype=dtype, layout=layout)
    observed = _run(framework_adapter, case, api, part)
    names = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
    exec(framework_adapter.repro_source(case, framework_adapter.api(api), "cpu", part), names)
    np.testing.assert_array_equal(names["result"], observed.value)
    assert names["result"].shape == observed.shape


# -- quirks: each departs from the spec, and each is explained by the spec choice it takes ----------------

def test_zero_target_with_infinite_input_makes_the_whole_distribution_nan(framework_adapter, spec):
    """where(t == 0, 0, log t) - x is -x = inf at t = 0, x = -inf; times t = 0 gives NaN, and the sum
    over the axis spreads it to the distribution (optax PR #1786). The other row is unaffected."""
    case = make_case([[-np.inf, 0.0], [-1.0, -0.5]], [[0.0, 1.0], [0.5, 0.5]], dtype="float32")
    observed = _run(framework_adapter, case)
    assert np.isnan(observed.value[0]) and np.isfinite(observed.value[1])
    verdict, behaves_as = _behaves_as(framework_adapter, spec, case)
    assert verdict is Verdict.NONFINITE and behaves_as == ["pointwise.conventions.target_zero = ieee"]


def test_log_target_minus_inf_is_nan(framework_adapter, spec):
    """A one-hot target in log space: exp(-inf) * (-inf - x) = 0 * -inf = NaN."""
    case = make_case([[-0.1, -2.5]], [[0.0, -np.inf]], log_target=True, dtype="float32")
    verdict, behaves_as = _behaves_as(framework_adapter, spec, case, KL_LOG)
    assert verdict is Verdict.NONFINITE and behaves_as == ["pointwise.conventions.log_target_neg_inf = ieee"]


@pytest.mark.parametrize("api, x, t, behaves_as", [
    # d/dt of t * where(t == 0, 0, log t) at t = 0: the untaken branch's 1/t gives 0 * inf = NaN (PR #1786)
    (KL, [[-1.0, -1.0]], [[0.0, 1.0]], "gradients.conventions.target_zero = nan"),
    (KL_LOG, [[-1.0, -1.0]], [[-np.inf, 0.0]], "gradients.conventions.log_target_neg_inf = nan"),
])
def test_grad_target_is_nan_where_the_target_has_probability_zero(framework_adapter, spec, api, x, t, behaves_as):
    case = make_case(x, t, log_target=api == KL_LOG, dtype="float32")
    verdict, found = _behaves_as(framework_adapter, spec, case, api, "grad_target")
    assert verdict is Verdict.NONFINITE and found == [behaves_as]


@pytest.mark.parametrize("x, t, behaves_as", [
    ([[np.nan, -1.0]], [[0.5, 0.5]], "gradients.conventions.nan_propagation = formula"),
    ([[-1.0, -1.0]], [[-0.5, 0.5]], "gradients.conventions.target_negative = formula"),
])
def test_grad_input_is_minus_target_where_the_loss_is_nan(framework_adapter, spec, x, t, behaves_as):
    case = make_case(x, t, dtype="float32")
    observed = _run(framework_adapter, case, part="grad_input")
    np.testing.assert_array_equal(observed.value, -np.asarray(t) * upstream_gradient((1,))[0])
    verdict, found = _behaves_as(framework_adapter, spec, case, part="grad_input")
    assert verdict is Verdict.NONFINITE and found == [behaves_as]


def test_grad_target_at_infinite_target_is_nan(framework_adapter, spec):
    """d/dt of t * (log t - x) at t = +inf is log t - x + t * (1 / t) = inf + inf * 0 = NaN; the limit is
    +inf. Spec 6 names the product rule that computes the "+1" as t * (1 / t) (or (g * t) / t): it gives NaN at
    t = +inf (gradients.target_product_rule = xlogy)."""
    case = make_case([[-1.0, -1.0]], [[np.inf, 0.5]], dtype="float64")
    observed = _run(framework_adapter, case, part="grad_target")
    assert np.isnan(observed.value[0, 0]) and np.isposinf(_expected(case, spec, "grad_target").value[0, 0])
    verdict, found = _behaves_as(framework_adapter, spec, case, part="grad_target")
    assert verdict is Verdict.NONFINITE and found == ["gradients.target_product_rule = xlogy"]


def test_subnormal_targets_are_flushed_to_zero_on_cpu(framework_adapter, spec):
    """XLA:CPU treats float32 subnormals as zero (JAX's Sharp Bits: "flush-to-zero semantics on some
    backends"). A subnormal target then takes optax's t == 0 branch: the term is 0, not t * log t,
    grad_input is -0, not -t, and grad_target is NaN (the where-gradient pitfall), not finite."""
    t = np.float32(1e-39)  # subnormal in float32
    case = make_case([[0.0, 0.0]], [[float(t), 1.0]], dtype="float32")
    forward = _run(framework_adapter, case)
    assert forward.value[0] == 0.0 and _expected(case, spec).value[0] < -8e-38
    assert classify(_expected(case, spec), forward, spec).verdict is Verdict.VALUE
    grad_input = _run(framework_adapter, case, part="grad_input")
    assert grad_input.value[0, 0] == 0.0 and classify(_expected(case, spec, "grad_input"), grad_input, spec).verdict \
        is Verdict.VALUE
    grad_target = _run(framework_adapter, case, part="grad_target")
    assert np.isnan(grad_target.value[0, 0])
    assert classify(_expected(case, spec, "grad_target"), grad_target, spec).verdict is Verdict.NONFINITE


def test_float16_subnormal_target_gradient_rounds_its_product_rule(framework_adapter, spec):
    """float16 is not flushed, but grad_target = up * (log t - x) + (up * t) / t rounds the subnormal
    up * t: with t = 4 * 2**-24 and up = 1.125 (row 3), up * t = 4.5 units rounds to 4, so the last term
    is 1.0, not 1.125, past the bound (as torch's known subnormal_product_rule)."""
    t = 4 * 2.0**-24  # subnormal in float16
    x, p = np.full((4, 2), -1.0), np.full((4, 2), 0.5)
    x[3, 0], p[3, 0] = -5.04296875, t
    case = make_case(x, p, dtype="float16")
    observed = _run(framework_adapter, case, part="grad_target")
    expected = _expected(case, spec, "grad_target")
    assert upstream_gradient((4,))[3] == 1.125
    assert abs((observed.value[3, 0] - expected.value[3, 0]) - (1.0 - 1.125)) < 0.01
    assert classify(expected, observed, spec).verdict is Verdict.VALUE


def test_errors(framework_adapter, spec):
    """Integer dtypes: TypeError, as the spec says. A 0-d input: ValueError (no axis -1), as the spec says.
    Incompatible shapes: TypeError from jnp's broadcasting, where the spec says ValueError."""
    integral = make_case(np.zeros((2, 3)), np.zeros((2, 3)), dtype="int64")
    zero_dim = make_case(-1.0, 0.5, dtype="float32")
    for case in (integral, zero_dim):
        observed = _run(framework_adapter, case)
        assert classify(_expected(case, spec), observed, spec).verdict is Verdict.PASS, observed.exception_message
    bad = make_case(np.zeros((2, 3)), np.zeros((2, 4)), dtype="float32")
    observed = _run(framework_adapter, bad)
    assert observed.exception_type == "TypeError" and "incompatible shapes" in observed.exception_message
    assert _expected(bad, spec).error_type == "ValueError"
    assert classify(_expected(bad, spec), observed, spec).verdict is Verdict.ERROR
