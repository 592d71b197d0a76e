"""The spec's tolerance formulas, checked against their arithmetic written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.core.tolerance import summation_gamma
from conformance.reference.forward import expected_forward
from tests.helpers import make_case


def test_pointwise_bound_is_relative_to_the_terms(spec):
    """t = 0.5, x = -1, float32: 8 * (2**-24 * (|0.5 log 0.5| + |0.5 * -1|) + 2**-149)."""
    got = expected_forward(make_case([-1.0], [0.5], dtype="float32"), spec).bound[0]
    want = 8 * (2.0**-24 * (abs(0.5 * math.log(0.5)) + 0.5) + 2.0**-149)
    assert math.isclose(got, want, rel_tol=1e-12)


def test_log_target_bound_includes_underflow_sensitivity(spec):
    """log_target: exp(t) may underflow, amplified by |t - x| (spec: tolerance.pointwise.sensitivity)."""
    t, x = -20.0, -3000.0
    got = expected_forward(make_case([x], [t], log_target=True, dtype="float16"), spec).bound[0]
    p = math.exp(t)
    want = 8 * (2.0**-11 * (abs(p * t) + abs(p * x)) + 2.0**-24 * (1 + abs(t - x)))
    assert math.isclose(got, want, rel_tol=1e-12)


def test_summation_gamma(spec):
    """spec: tolerance.reduction.gamma, (ceil(log2(max(n, 1))) + 1) * u, written out by hand."""
    assert summation_gamma(0, 0.5, spec) == 0.5  # an empty sum has no terms to scale it
    assert summation_gamma(1, 2.0**-24, spec) == 2.0**-24
    assert summation_gamma(1024, 2.0**-24, spec) == 11 * 2.0**-24  # ceil(log2 1024) = 10, exactly
    assert summation_gamma(1025, 2.0**-24, spec) == 12 * 2.0**-24


def test_near_zero_kl_is_judged_against_sum_of_magnitudes(spec):
    """Identical distributions: the bound scales with sum |L_i|, not with |sum L_i| ~ 0."""
    p = np.array([[0.25, 0.25, 0.5]])
    case = make_case(np.log(p), p, reduction="sum", dtype="float32")
    expected = expected_forward(case, spec)
    assert abs(float(expected.value)) < 1e-7 and float(expected.bound) > 0


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_bound_written_over_its_magnitude_equals_the_one_pass_bound(spec, dtype):
    """pointwise_bound(overwrite=True) computes a large bound a piece at a time in magnitude's own buffer: every
    element equals the one-pass formula bit for bit (scalar and per-element s, a size that is not a whole
    number of pieces, huge, tiny and zero magnitudes), and whatever it cannot overwrite is computed as before."""
    from conformance.core.tolerance import PIECE, pointwise_bound

    rng = np.random.default_rng(5)
    n = 2 * PIECE + 123
    magnitude = rng.uniform(0, 4, n) * 10.0 ** rng.integers(-320, 308, n)
    magnitude[:5] = [0.0, 5e-324, 1e-310, 1.7e308, np.nan]
    for s in (0, rng.uniform(0, 3000, n)):
        want = pointwise_bound(magnitude, s, dtype, spec)
        given = magnitude.copy()
        got = pointwise_bound(given, s, dtype, spec, overwrite=True)
        assert got is given  # no second array
        assert got.tobytes() == np.asarray(want, dtype=np.float64).tobytes()
    for kept in (magnitude.astype(np.longdouble), magnitude[::2], magnitude[:PIECE]):  # not overwritten
        before = kept.copy()
        got = pointwise_bound(kept, 0, dtype, spec, overwrite=True)
        assert got is not kept and np.array_equal(kept, before, equal_nan=True)
        assert np.array_equal(got, pointwise_bound(before, 0, dtype, spec), equal_nan=True)
