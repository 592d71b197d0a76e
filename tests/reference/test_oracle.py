"""The reference against an independent arbitrary-precision oracle (mpmath, 60 digits)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from conformance.reference.forward import expected_forward
from tests.helpers import make_case

mpmath.mp.dps = 60
N_RANDOM = 10_000


def exact_pointwise(x: float, t: float, log_target: bool) -> mpmath.mpf:
    """The mathematical term, for t > 0 (or any finite t in log space)."""
    x, t = mpmath.mpf(x), mpmath.mpf(t)
    return mpmath.exp(t) * (t - x) if log_target else t * (mpmath.log(t) - x)


def random_points(rng: np.random.Generator, n: int, log_target: bool) -> tuple[np.ndarray, np.ndarray]:
    """Inputs across many magnitudes, plus nearly equal p and q where the terms cancel."""
    x = rng.normal(0, 1, n) * 10.0 ** rng.uniform(-3, 2.5, n)
    if log_target:
        t = rng.normal(0, 1, n) * 10.0 ** rng.uniform(-3, 2, n)
    else:
        t = 10.0 ** rng.uniform(-300, 30, n)
    near = rng.random(n) < 0.2  # q == p up to rounding: the KL term cancels
    x[near] = t[near] if log_target else np.log(t[near])
    return x, t


def cancelling_points(rng: np.random.Generator, n: int, log_target: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every point nearly cancels: x within a few ulps of log t (of t in log space), t near 1,
    subnormal and huge, and q == p up to rounding as the identical family draws them."""
    if log_target:
        t = rng.normal(0, 1, n) * 10.0 ** rng.uniform(-3, 2.8, n)
        return t + rng.integers(-3, 4, n) * np.spacing(t), t
    t = np.concatenate([10.0 ** rng.uniform(-307, 308, n // 4), 1 + rng.normal(0, 1e-4, n // 4),
                        rng.uniform(0, 1, n // 8) * 2.0**-1022])
    x = np.log(t) + rng.integers(-3, 4, t.size) * np.spacing(np.log(t))
    near_one = np.abs(t - 1) < 1e-2
    x[near_one] = np.log1p(t[near_one] - 1)
    identical = rng.uniform(-40, 0, n - t.size)  # x first, t = fl(exp(x))
    return np.concatenate([x, identical]), np.concatenate([t, np.exp(identical)])


def assert_within_one_ulp(x: np.ndarray, t: np.ndarray, got: np.ndarray, log_target: bool) -> None:
    """Every value within 1 ulp of float64 of mpmath's (infinite ones with the right sign)."""
    __tracebackhide__ = True
    bad = []
    for xi, ti, gi in zip(x, t, got):
        exact = exact_pointwise(xi, ti, log_target)
        want = float(exact)
        if not np.isfinite(want):
            assert np.isinf(gi) and np.sign(gi) == np.sign(want), (xi, ti, gi, want)
            continue
        if abs(mpmath.mpf(gi) - exact) > np.spacing(abs(want)):
            bad.append((xi, ti, gi, want))
    assert not bad, (f"{len(bad)} of {len(x)} points over 1 ulp, first: x={bad[0][0]!r}, t={bad[0][1]!r}: "
                     f"got {bad[0][2]!r}, expected {bad[0][3]!r}")


@pytest.mark.parametrize("log_target", [False, True])
def test_pointwise_within_one_ulp_of_mpmath(spec, log_target):
    rng = np.random.default_rng(1234 + log_target)
    x, t = random_points(rng, N_RANDOM, log_target)
    assert_within_one_ulp(x, t, expected_forward(make_case(x, t, log_target=log_target), spec).value, log_target)


@pytest.mark.parametrize("log_target", [False, True])
def test_cancelling_points_within_one_ulp_of_mpmath(spec, log_target):
    """Where the KL term cancels (the case of pytorch#80488) the reference is as exact as elsewhere."""
    x, t = cancelling_points(np.random.default_rng(4321 + log_target), N_RANDOM, log_target)
    assert_within_one_ulp(x, t, expected_forward(make_case(x, t, log_target=log_target), spec).value, log_target)


@pytest.mark.slow
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("draw", [random_points, cancelling_points])
def test_pointwise_within_one_ulp_of_mpmath_long_sweep(spec, log_target, draw):
    """20 times the points of the tests above, in one array: many chunks, every tier."""
    x, t = draw(np.random.default_rng(99 + log_target), 20 * N_RANDOM, log_target)
    assert_within_one_ulp(x, t, expected_forward(make_case(x, t, log_target=log_target), spec).value, log_target)


@pytest.mark.parametrize("reduction", ["sum", "mean", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_reductions_within_spec_bound_of_mpmath(spec, reduction, log_target):
    rng = np.random.default_rng(99)
    for trial in range(20):
        logits_q, logits_p = rng.normal(0, 3, (2, 8, 5))
        x = logits_q - np.log(np.exp(logits_q).sum(-1, keepdims=True))
        logp = logits_p - np.log(np.exp(logits_p).sum(-1, keepdims=True))
        if trial % 4 == 0:
            x = logp.copy()  # identical distributions: KL ~ 0 by cancellation
        t = logp if log_target else np.exp(logp)
        expected = expected_forward(make_case(x, t, reduction=reduction, log_target=log_target), spec)
        total = mpmath.fsum(exact_pointwise(a, b, log_target) for a, b in zip(x.ravel(), t.ravel()))
        exact = total / {"sum": 1, "mean": x.size, "batchmean": x.shape[0]}[reduction]
        err = abs(mpmath.mpf(float(expected.value)) - exact)
        assert err <= float(expected.bound), f"trial {trial}: |err| {float(err):.3g} > bound {float(expected.bound):.3g}"
        assert err <= 2 * np.spacing(abs(float(exact))) + 1e-300, f"trial {trial}: reference itself off by {float(err):.3g}"
