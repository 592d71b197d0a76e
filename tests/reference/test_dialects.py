"""The dialects (spec: dialects): a sum over the last axis, and Keras' clipped probability-space terms.

Expected values come from mpmath, from the frameworks' documentation formulas, or from the numbers
the research notes probed on the real frameworks (written here with where they came from).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from conformance.core.case import Case, DtypePair, Params
from conformance.core.rounding import round_to_dtype
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

mpmath.mp.dps = 50
inf, nan = np.inf, np.nan


def _prob_case(q, t, reduction="none", dtype="float32"):
    q, t = (round_to_dtype(np.asarray(v, dtype=np.float64), dtype) for v in (q, t))
    return Case(id="keras", params=Params(reduction, False, prob_input=True), input=q, target=t,
                dtype=DtypePair(dtype, dtype), family="test")


def _ulps(got, want, dtype="float64"):
    return abs(mpmath.mpf(float(got)) - want) / np.spacing(np.float64(abs(float(want))))


# -- distribution_sum (optax, MLX) -----------------------------------------------------------------------

X = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3]]))
T = np.array([[0.25, 0.25, 0.5], [0.3, 0.3, 0.4]])


def _row_kl(x, t):
    return [mpmath.fsum(mpmath.mpf(b) * (mpmath.log(mpmath.mpf(b)) - mpmath.mpf(a)) for a, b in zip(xr, tr))
            for xr, tr in zip(x, t)]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_distribution_sum_is_one_kl_per_row_then_the_reduction(spec, reduction):
    rows = _row_kl(X, T)
    want = {"none": rows, "sum": [mpmath.fsum(rows)], "mean": [mpmath.fsum(rows) / 2]}[reduction]
    got = expected_forward(make_case(X, T, reduction=reduction), spec, "distribution_sum")
    assert got.shape == ((2,) if reduction == "none" else ())
    assert all(_ulps(g, w) <= 1 for g, w in zip(np.ravel(got.value), want))


def test_distribution_mean_divides_by_distributions_not_elements(spec):
    """A (2, 2, 3) batch: mean over the 4 distributions (MLX's mean, Keras' sum_over_batch_size)."""
    x, t = np.stack([X, X]), np.stack([T, T])
    got = expected_forward(make_case(x, t, reduction="mean"), spec, "distribution_sum")
    assert _ulps(got.value, mpmath.fsum(_row_kl(X, T)) / 2) <= 1


def test_mlx_documentation_formula(spec):
    """MLX's docstring: (mx.exp(targets) * (targets - inputs)).sum(axis), both in log space."""
    logp = np.log(T)
    got = expected_forward(make_case(X, logp, log_target=True), spec, "distribution_sum").value
    np.testing.assert_allclose(got, (np.exp(logp) * (logp - X)).sum(-1), rtol=1e-14)


@pytest.mark.parametrize("reduction, shape, error", [
    ("none", (), "no_distribution_axis"),       # a 0-d tensor has no last axis
    ("batchmean", (2, 3), "unknown_reduction"),  # not a reduction of the dialect
])
def test_distribution_sum_errors(spec, reduction, shape, error):
    case = make_case(np.full(shape, -1.0), np.full(shape, 0.5), reduction=reduction)
    assert expected_forward(case, spec, "distribution_sum").error_id == error
    assert expected_forward(case, spec, "canonical").error_id is None


@pytest.mark.parametrize("shape, reduction, want", [
    ((0, 5), "none", np.zeros(0)), ((0, 5), "sum", 0.0), ((0, 5), "mean", nan),   # no distributions
    ((3, 0), "none", np.zeros(3)), ((3, 0), "mean", 0.0),                        # empty distributions
])
def test_distribution_sum_of_empty_tensors(spec, shape, reduction, want):
    got = expected_forward(make_case(np.zeros(shape), np.zeros(shape), reduction=reduction), spec,
                           "distribution_sum").value
    np.testing.assert_array_equal(got, want)


def test_distribution_sum_gradient_spreads_each_rows_upstream(spec):
    """none: row i's upstream (0.75, 0.875) multiplies every term of the row: grad_input = -t * up_i."""
    got = expected_grad(make_case(X, T), spec, "grad_input", "distribution_sum").value
    np.testing.assert_array_equal(got, -T * np.array([[0.75], [0.875]]))


# -- Keras -----------------------------------------------------------------------------------------------

# epsilon 1e-7 rounded to each dtype: the clip bounds the research notes probed on all three backends
EPSILON = {"float16": 1.1920928955078125e-07, "bfloat16": 1.0011717677116394e-07,
           "float32": 1.0000000116860974e-07, "float64": 1e-07}


def _keras_term(q, t):
    q, t = mpmath.mpf(float(q)), mpmath.mpf(float(t))
    return t * mpmath.log(t / q)


@pytest.mark.parametrize("dtype", list(EPSILON))
def test_keras_clips_both_arguments_to_epsilon_and_one(spec, dtype):
    eps = EPSILON[dtype]
    q = [0.5, 0.5, 0.0, 0.5, 2.0, inf, 0.5, -0.5]
    t = [0.0, -0.5, 1.0, inf, 0.5, 0.5, 2.0, 0.5]
    clipped_q = [0.5, 0.5, eps, 0.5, 1.0, 1.0, 0.5, eps]
    clipped_t = [eps, eps, 1.0, 1.0, 0.5, 0.5, 1.0, 0.5]
    case = _prob_case(np.array(q)[:, None], np.array(t)[:, None], dtype=dtype)
    got = expected_forward(case, spec, "keras")
    for i, (a, b) in enumerate(zip(clipped_q, clipped_t)):
        want = _keras_term(round_to_dtype(np.array(a), dtype), round_to_dtype(np.array(b), dtype))
        if dtype == "float16" and float(b) / float(round_to_dtype(np.array(a), dtype)) > 65504:
            assert np.isfinite(got.value[i])  # exact by the spec's ratio choice; Keras gives +inf (a finding)
        assert abs(mpmath.mpf(float(got.value[i])) - want) <= got.bound[i], (dtype, i)


def test_keras_nan_survives_the_clip(spec):
    got = expected_forward(_prob_case([[nan], [0.5]], [[0.5], [nan]]), spec, "keras").value
    assert np.isnan(got).all()


def test_keras_tolerance_covers_the_rounded_ratio(spec):
    """t = 0.9999, q = 0.99995 (float32): Keras' log(t / q) gives -5.0004546e-05 against the exact
    -5.0007046e-05 (probed: an error of 2.5e-09 from rounding the ratio); the dialect's terms include |t|."""
    got = expected_forward(_prob_case([[0.99995]], [[0.9999]]), spec, "keras")
    keras_value = np.float32(-5.0004546e-05)
    assert abs(float(keras_value) - float(got.value[0])) <= got.bound[0]
    assert got.bound[0] < 1e-6  # still a float32 rounding bound, not a blank cheque


def test_keras_documentation_example(spec):
    """keras.losses.kl_divergence's docstring: the loss equals
    np.sum(clip(y_true, 1e-7, 1) * np.log(clip(y_true, 1e-7, 1) / clip(y_pred, 1e-7, 1)), axis=-1)."""
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, size=(2, 3)).astype(np.float32)
    y_pred = rng.random(size=(2, 3)).astype(np.float32)
    got = expected_forward(_prob_case(y_pred, y_true), spec, "keras")
    t, q = np.clip(y_true, np.float32(1e-7), 1), np.clip(y_pred, np.float32(1e-7), 1)
    np.testing.assert_allclose(got.value, np.sum(t.astype(np.float64) * np.log(t / q.astype(np.float64)), -1),
                               rtol=1e-6)
    assert got.shape == (2,)


def test_keras_ratio_ieee_overflows_in_float16(spec):
    """float16: t / q = 0.5 / 1.19e-7 passes 65504; under the `ieee` ratio choice the term is +inf."""
    from conformance.core.choices import Alternative, with_alternatives

    ieee = with_alternatives(spec, (Alternative("dialects.keras.ratio", "ieee"),))
    case = _prob_case([[0.0], [0.5]], [[0.5], [0.5]], dtype="float16")
    assert expected_forward(case, ieee, "keras").value.tolist() == [inf, 0.0]
    assert np.isfinite(expected_forward(case, spec, "keras").value).all()


def test_keras_input_gradient_bound_covers_a_subnormal_product_divided_by_the_input(spec):
    """float16, a zero target (clipped to epsilon, itself a float16 subnormal) and a subnormal input: the input
    gradient formed as (upstream * target) / input in float16 rounds the product to a subnormal, which reads as the
    upstream ignored (0.875 * epsilon rounds to epsilon); the bound covers that error divided by the input
    (dialects.keras.gradients.sensitivity), and nothing like it where no product underflows."""
    from conformance.core.model import upstream_gradient

    case = _prob_case([[3.1888484954833984e-05, 0.5]], [[0.0, 0.25]], dtype="float16")
    got = expected_grad(case, spec, "grad_input", "keras")
    up = upstream_gradient((1,)).astype(np.float16)[:, None]  # the row's upstream: 0.75
    q16, t16 = case.input.astype(np.float16), np.clip(case.target, 1e-7, 1).astype(np.float16)
    float16_order = (-(up * t16) / q16).astype(np.float64)
    assert float16_order[0, 0] == float(-t16[0, 0] / q16[0, 0])  # the product rounded back to epsilon
    assert (np.abs(float16_order - got.value) <= got.bound).all()
    assert abs(float16_order[0, 0] - got.value[0, 0]) > 8 * 2.0**-24  # more than the bound without the 1 / |input|
    doubled = 2 * got.value[0, 1]  # an answer twice the spec's where the product is normal: still caught
    assert abs(doubled - got.value[0, 1]) > got.bound[0, 1] and got.bound[0, 1] < 1e-2


@pytest.mark.parametrize("which, q, t, want", [
    ("grad_input", 0.5, 0.25, -0.25 / 0.5),
    ("grad_target", 0.5, 0.25, float(mpmath.log(0.5) + 1)),
    ("grad2_input", 0.5, 0.25, -1 / 0.5),
    ("grad_target", 0.5, 1.0, float(mpmath.log(2) + 1)),    # at the clip's end: the derivative from inside
    ("grad_input", 1.0, 0.5, -0.5),
    ("grad_target", 0.5, 0.0, 0.0),                          # clipped: the clip's derivative is 0
    ("grad_input", 2.0, 0.5, 0.0),
    ("grad_input", nan, 0.5, nan),
])
def test_keras_gradients(spec, which, q, t, want):
    got = expected_grad(_prob_case([[q]], [[t]], reduction="sum", dtype="float64"), spec, which, "keras").value
    # 1.25: the upstream of a reduced loss; grad2_input also takes w = 0.75 over grad_input's one element
    np.testing.assert_allclose(got / 1.25 / (0.75 if which == "grad2_input" else 1), [[want]], rtol=1e-14)


def test_keras_boundary_half_alternative(spec):
    """JAX's clip splits the tie at the interval's ends: the `half` choice gives half the derivative."""
    from conformance.core.choices import Alternative, with_alternatives

    half = with_alternatives(spec, (Alternative("dialects.keras.clip.boundary", "half"),))
    case = _prob_case([[0.5]], [[1.0]], reduction="sum", dtype="float64")
    full, halved = (expected_grad(case, s, "grad_target", "keras").value for s in (spec, half))
    np.testing.assert_allclose(halved, full / 2, rtol=1e-15)


@pytest.mark.parametrize("which, q, t, want", [
    ("grad_input", nan, 0.5, 0.0),      # -t/q through input's clip, which selects 0 at NaN
    ("grad_input", 0.5, nan, nan),      # -t/q with t NaN passes input's open clip
    ("grad_target", 0.5, nan, 0.0),     # log(t/q) + 1 through target's clip
    ("grad_target", nan, 0.5, nan),     # log(t/NaN) + 1 passes target's open clip
    ("grad2_input", 0.5, nan, 0.0),     # -1/q, selected away by target's clip, the last it passes
    ("grad2_input", nan, 0.5, nan),     # input's clip selects 0, divided by q = NaN before target's clip
    ("grad_input", 0.5, 0.25, -0.5),    # no NaN: as the spec's own choice
])
def test_keras_clip_nan_zero_alternative(spec, which, q, t, want):
    """TensorFlow's and torch's clips select in their backward (spec: dialects.keras.clip.nan = zero)."""
    from conformance.core.choices import Alternative, with_alternatives

    zero = with_alternatives(spec, (Alternative("dialects.keras.clip.nan", "zero"),))
    got = expected_grad(_prob_case([[q]], [[t]], reduction="sum", dtype="float64"), zero, which, "keras").value
    np.testing.assert_allclose(got / 1.25 / (0.75 if which == "grad2_input" else 1), [[want]], rtol=1e-14)
    canonical = expected_grad(_prob_case([[q]], [[t]], reduction="sum", dtype="float64"), spec, which, "keras").value
    assert np.isnan(canonical).all() == (np.isnan(q) or np.isnan(t))  # the spec's own choice: NaN propagates


def test_keras_clip_nan_zero_keeps_the_half_derivative_at_the_clips_end(spec):
    """Both of JAX-like and TensorFlow-like clips at once (boundary half, nan zero): d/dt of grad_input at a target of
    exactly 1 is -(1/2) / q, the half derivative of target's clip times -1/q, as without the select."""
    from conformance.core.choices import Alternative, with_alternatives

    both = with_alternatives(spec, (Alternative("dialects.keras.clip.boundary", "half"),
                                    Alternative("dialects.keras.clip.nan", "zero")))
    got = expected_grad(_prob_case([[0.5]], [[1.0]], reduction="sum", dtype="float64"), both, "grad2_input",
                        "keras").value
    np.testing.assert_allclose(got / 1.25 / 0.75, [[-0.5 / 0.5]], rtol=1e-14)


def test_keras_terms_within_one_ulp_of_mpmath(spec):
    """The reference's Keras terms (float64, inside the clip) against t * log(t / q) at 50 digits, on
    probabilities across magnitudes, a fifth of them with q == t up to a few ulp (the ratio near 1)."""
    rng = np.random.default_rng(21)
    n = 2000
    t = 10.0 ** rng.uniform(-6.9, 0, n)
    q = 10.0 ** rng.uniform(-6.9, 0, n)
    near = rng.random(n) < 0.2
    q[near] = t[near] * (1 + rng.integers(-4, 5, near.sum()) * 2.0**-52)
    got = expected_forward(_prob_case(q[:, None], t[:, None], dtype="float64"), spec, "keras").value
    bad = [(q[i], t[i]) for i in range(n) if _ulps(got[i], _keras_term(q[i], t[i])) > 1]
    assert not bad, f"{len(bad)} of {n} over 1 ulp, first (q, t) = {bad[0]}"
