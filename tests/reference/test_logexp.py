"""The double-double pieces of the reference against exact arithmetic (mpmath at 60 digits, fractions).

Each test checks a bound a docstring proves, on the points where it is tightest: x within a
few ulps of log t, t near 1, subnormal and huge t, huge x, every table bucket's edges.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest

from conformance.reference import logexp_tables, tablegen
from conformance.reference.doubledouble import fast_two_sum, split, truncation_split, two_diff, two_prod, two_sum
from conformance.reference.klterm import exact_log_term, kl_term
from conformance.reference.logexp import TIER_A_MIN, TIER_B_MIN, exp_parts, fast_log_diff, precise_log_diff

mpmath.mp.dps = 60
LOW27 = ~((1 << 27) - 1)


def exact_diff(t: float, x: float) -> mpmath.mpf:
    return mpmath.log(mpmath.mpf(t)) - mpmath.mpf(x)


def hard_points(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """t over the whole positive range (subnormal to huge) and x within a few ulps of log t."""
    t = np.concatenate([10.0 ** rng.uniform(-307, 308, n), rng.uniform(0.5, 2.0, n), 1 + rng.normal(0, 1e-6, n),
                        rng.uniform(0, 1, n) * 2.0**-1022, np.exp(rng.uniform(-50, 0, n))])
    x = np.log(t) + rng.integers(-3, 4, t.size) * np.spacing(np.log(t))
    near_one = (t > 0.99) & (t < 1.01)
    x[near_one] = np.log1p(t[near_one] - 1)  # x = fl(log t) where t is near 1 too
    identical = slice(4 * n, 5 * n)  # x first, then t = fl(exp(x)), as the identical family draws them
    x[identical] = rng.uniform(-50, 0, n)
    t[identical] = np.exp(x[identical])
    return t, x


def test_tables_module_is_what_tablegen_builds():
    """reference/logexp_tables.py is generated: regenerate it with `python -m conformance.reference.tablegen`."""
    stored = Path(logexp_tables.__file__).read_text()
    assert stored == tablegen.render(tablegen.build())


def test_reduced_argument_within_tablegen_bound():
    """Every level-1 bucket, at its edges and inside: f C - 1 stays within R3 (tier B's series needs it)."""
    rng = np.random.default_rng(5)
    edges = 0.5 + np.arange(256) / 512
    f = np.concatenate([edges, np.nextafter(edges + 1 / 512, 0), rng.uniform(0.5, 1.0, 200_000)])
    bits = f.view(np.int64)
    j1 = (bits >> 44) & 0xFF
    fh = (bits & LOW27).view(np.float64)
    c1 = logexp_tables.LOG1_C[j1]
    r1 = (fh * c1 - 1) + (f - fh) * c1
    i2 = np.rint(r1 * 2**16).astype(np.int64) + logexp_tables.J2_MAX
    c2 = logexp_tables.LOG2_C[i2]
    i3 = np.rint((r1 * c2 + (c2 - 1)) * 2**24).astype(np.int64) + logexp_tables.J3_MAX
    c3 = logexp_tables.LOG3_C[i3]
    worst = max(abs(Fraction(float(fi)) * Fraction(float(c1i * c2i * c3i)) - 1)
                for fi, c1i, c2i, c3i in zip(f[::97], c1[::97], c2[::97], c3[::97]))
    assert worst <= Fraction(logexp_tables.R3)
    assert np.all(c1 * c2 * c3 == (c1 * c2) * c3)  # C is exact: no rounding in either order


def test_two_prod_is_exact_with_a_truncation_split_of_its_second_factor():
    rng = np.random.default_rng(9)
    a = rng.uniform(1, 2.01, 20_000) * 2.0 ** rng.integers(-30, 30, 20_000)
    b = rng.uniform(0.5, 1, 20_000) * 2.0 ** rng.integers(-30, 30, 20_000)
    b_hi = (b.view(np.int64) & LOW27).view(np.float64)
    head, rest = truncation_split(b)
    assert all(Fraction(float(hi)) + Fraction(float(lo)) == Fraction(float(bi)) for bi, hi, lo in zip(b, head, rest))
    np.testing.assert_array_equal(head, b_hi)  # the 26-bit head: 27 low bits cleared
    for parts in (None, (b_hi, b - b_hi), truncation_split(b)):
        p, e = two_prod(a, b, split(a), parts)
        assert all(Fraction(float(pi)) + Fraction(float(ei)) == Fraction(float(ai)) * Fraction(float(bi))
                   for ai, bi, pi, ei in zip(a, b, p, e))


def test_times_is_exact_for_subnormal_and_normal_targets_alike():
    """With dl = 0, times() gives hi + lo == t dh exactly wherever its product is exact: subnormal t beside a
    huge dh reaches that path too (t then split by Veltkamp), alone or in one chunk with normal t."""
    from conformance.reference.klterm import times

    rng = np.random.default_rng(12)
    subnormal = rng.integers(1, 2**52, 3000).astype(np.float64) * 5e-324
    normal = rng.uniform(0.5, 1, 3000) * 2.0 ** rng.integers(-1000, 0, 3000)
    for t in (subnormal, normal, np.concatenate([subnormal, normal])):
        dh = rng.uniform(1, 2, t.size) * 2.0 ** rng.integers(70, 900, t.size)
        dh = np.where(t * dh > 2.0**-960, dh, 2.0**100)  # keep |t dh| in the exact product's range
        hi, lo = times(t, dh, np.zeros(t.size), (np.empty(t.size), np.empty(t.size)))
        assert all(Fraction(float(h)) + Fraction(float(l)) == Fraction(float(ti)) * Fraction(float(di))
                   for ti, di, h, l in zip(t, dh, hi, lo))


def test_error_free_transformations_leave_their_arguments_untouched():
    """They work in place on their own temporaries only: a caller's arrays (and parts) are never written."""
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 3000) * 10.0 ** rng.uniform(-10, 10, 3000), rng.normal(0, 1, 3000)
    a_parts, b_parts = split(a), truncation_split(b)
    kept = [v.copy() for v in (a, b, *a_parts, *b_parts)]
    for results in (two_sum(a, b), two_diff(a, b), fast_two_sum(a, b), split(a), truncation_split(b),
                    two_prod(a, b), two_prod(a, b, a_parts, b_parts)):
        assert not any(np.shares_memory(r, v) for r in results for v in (a, b, *a_parts, *b_parts))
    for now, before in zip((a, b, *a_parts, *b_parts), kept):
        np.testing.assert_array_equal(now, before)
    hi, lo = fast_two_sum(np.array([1.0, 2.0**60]), np.array([2.0**-60, 1.0]))  # |a| >= |b|: exact
    assert hi.tolist() == [1.0, 2.0**60] and lo.tolist() == [2.0**-60, 1.0]


def test_two_sum_and_two_diff_are_exact():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 5000) * 10.0 ** rng.uniform(-20, 20, 5000), rng.normal(0, 1, 5000)
    for (s, e), sign in ((two_sum(a, b), 1), (two_diff(a, b), -1)):
        assert all(Fraction(float(si)) + Fraction(float(ei)) == Fraction(float(ai)) + sign * Fraction(float(bi))
                   for ai, bi, si, ei in zip(a, b, s, e))


def test_tier_a_certifies_within_its_bound_and_everything_far_from_cancelling():
    rng = np.random.default_rng(11)
    t = np.concatenate([10.0 ** rng.uniform(-307, 308, 4000), rng.uniform(0, 1, 500) * 2.0**-1022])
    x = np.log(t) + rng.choice([-1, 1], t.size) * 10.0 ** rng.uniform(-3.5, 3, t.size)
    x[:50] = rng.choice([-1e308, 1e308, 1e200], 50)
    sigma, beta, certified = fast_log_diff(t, x)
    for ti, xi, s, b, ok in zip(t, x, sigma, beta, certified):
        d = exact_diff(ti, xi)
        if abs(d) >= 2.0**-8.7:
            assert ok, (ti, xi)
        if ok:
            assert abs(mpmath.mpf(s) + mpmath.mpf(b) - d) <= 2.0**-56 * abs(d), (ti, xi)
            assert abs(b) <= 2.0**-8 * abs(s)
    assert TIER_A_MIN == 2.0**-8.8


def test_tier_b_error_bound_and_what_it_certifies():
    """|dh + dl - d| <= 2**-124.55 + 2**-101 |dh| (the proven bound) on cancelling points; certified from 2**-68.5."""
    t, x = hard_points(np.random.default_rng(12), 2000)
    dh, dl, certified = precise_log_diff(t, x)
    for ti, xi, h, lo, ok in zip(t, x, dh, dl, certified):
        d = exact_diff(ti, xi)
        err = abs(mpmath.mpf(h) + mpmath.mpf(lo) - d)
        assert err <= 2.0**-124.55 + 2.0**-100.9 * abs(h), (ti, xi, float(err))
        if abs(d) >= 2.0**-68.4:
            assert ok, (ti, xi)
        if ok:
            assert err <= 2.0**-56 * abs(d) and abs(lo) <= np.spacing(abs(h)) / 2, (ti, xi)
    assert TIER_B_MIN == 2.0**-68.5


def test_exp_parts_relative_error():
    rng = np.random.default_rng(13)
    t = np.concatenate([rng.uniform(-1400, 1400, 3000), rng.normal(0, 3, 3000), [0.0, -0.0, 1400.0, -1400.0]])
    mh, ml, k = exp_parts(t)
    assert np.all(np.abs(ml) < 2.0**-9 * mh) and np.all((mh >= 1) & (mh < 2))
    for ti, h, lo, ki in zip(t, mh, ml, k):
        exact = mpmath.exp(mpmath.mpf(ti)) / mpmath.mpf(2) ** int(ki)
        assert abs((mpmath.mpf(h) + mpmath.mpf(lo)) / exact - 1) <= 2.0**-59.9, ti


@pytest.mark.parametrize("x, t", [(0.0, 1.0), (1e-300, 1.0), (-5e-324, 1.0), (float(np.log(0.3)), 0.3),
                                  (float(np.log(5e-324)), 5e-324), (float(np.log(1e308)), 1e308),
                                  (float(np.log1p(1e-12)), 1 + 1e-12)])
def test_exact_log_term_within_one_ulp(x, t):
    hi, lo = exact_log_term(x, t)
    exact = mpmath.mpf(t) * exact_diff(t, x)
    assert abs(mpmath.mpf(hi) - exact) <= np.spacing(abs(float(exact)))
    assert abs(mpmath.mpf(hi) + mpmath.mpf(lo) - exact) <= 2.0**-100 * abs(exact) + 2.0**-1074


def test_kl_term_nonfinite_and_non_positive_match_the_long_double_formula():
    """What the conventions code receives where an input is not finite (or t <= 0) is unchanged."""
    values = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -2.0, 0.7, 1e-310, 1e308, -1e308, -800.0, 800.0])
    x, t = (a.ravel() for a in np.meshgrid(values, values))
    for log_target in (False, True):
        hi, lo, *_ = kl_term(x, t, log_target)
        wide_x, wide_t = x.astype(np.longdouble), t.astype(np.longdouble)
        with np.errstate(all="ignore"):
            old = (np.exp(wide_t) * (wide_t - wide_x) if log_target else wide_t * (np.log(wide_t) - wide_x)).astype(np.float64)
        special = ~np.isfinite(old) | ~np.isfinite(x) | ~np.isfinite(t) | (~log_target & (t <= 0))
        np.testing.assert_array_equal(hi[special], old[special])
        assert np.all(np.isfinite(lo))


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_term_gives_the_same_values_in_any_chunking(log_target):
    """A large array (many chunks, mixed tiers) equals the same elements computed a few at a time."""
    rng = np.random.default_rng(21)
    n = 150_000
    t = rng.uniform(0, 2, n) if not log_target else rng.normal(0, 3, n)
    x = np.where(rng.random(n) < 0.5, np.log(np.abs(t)) if not log_target else t, rng.normal(-1, 2, n))
    x[:40_000] = np.log(t[:40_000]) if not log_target else x[:40_000]  # a run of chunks that all cancel
    hi, lo, magnitude, _ = kl_term(x, t, log_target)
    bare = kl_term(x, t, log_target, residual=False)
    assert bare[1] is None
    np.testing.assert_array_equal(bare[0], hi)
    np.testing.assert_array_equal(bare[2], magnitude)
    picks = rng.choice(n, 300, replace=False)
    for i in picks:
        one = kl_term(x[i:i + 1], t[i:i + 1], log_target)
        assert (one[0][0], one[1][0], one[2][0]) == (hi[i], lo[i], magnitude[i]) or np.isnan(hi[i])


def test_the_reference_cache_key_covers_these_modules():
    """An edit to any module that computes the term must invalidate cached expectations."""
    from conformance.judge.cachekey import REFERENCE_ROOTS, code_modules

    for module in ("klterm", "logexp", "logexp_tables", "doubledouble"):
        assert f"conformance.reference.{module}" in code_modules(REFERENCE_ROOTS)


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_term_at_the_edges_of_float64_within_one_ulp(log_target):
    """Subnormal and huge operands and results, overflow, |t| past exp's float64 range: the rare paths."""
    if log_target:
        ts = [-1400.0, -1000.0, -745.5, -700.0, -1e-300, 0.0, 5e-324, 1.0, 700.0, 709.9, 745.0, 1000.0, 1400.0, 2000.0]
        xs = lambda t: [t, t - 1e-10 * max(1.0, abs(t)), t + 3 * np.spacing(t), 0.0, -1e300, 1e300, -1.7e308, 1.7e308]
    else:
        ts = [5e-324, 1e-310, 2.0**-1022, 1e-300, 0.3, 1.0, 1 + 2.0**-52, 1e300, 1.7e308]
        xs = lambda t: [float(np.log(t)), float(np.log(t)) - 1e-9, 0.0, -745.0, -1e300, 1e300, -1.7e308, 1.7e308]
    pairs = [(x, t) for t in ts for x in xs(t)]
    x, t = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    hi, lo, *_ = kl_term(x, t, log_target)
    for xi, ti, gi in zip(x, t, hi):
        xm, tm = mpmath.mpf(float(xi)), mpmath.mpf(float(ti))
        exact = mpmath.exp(tm) * (tm - xm) if log_target else tm * (mpmath.log(tm) - xm)
        if abs(exact) > mpmath.mpf(np.finfo(np.float64).max) * (1 + mpmath.mpf(2) ** -53):
            assert gi == np.sign(float(exact)) * np.inf, (xi, ti, gi)
        else:
            assert abs(mpmath.mpf(gi) - exact) <= np.spacing(abs(float(exact))), (xi, ti, gi, float(exact))


def test_decompose_splits_every_positive_float64_exactly():
    """f * 2**E == t with f in [1/2, 1), and the bits _level1 indexes by are t's top 8 significand
    bits (normalised for subnormals), checked against Python's frexp on every binade's edges."""
    from conformance.reference.logexp import decompose
    edges = [2.0**e for e in range(-1074, 1024)]
    t = np.array(sorted({v for e in edges for v in (e, np.nextafter(e, 0), np.nextafter(e, np.inf) , 1.75 * e)
                         if 0 < v < np.inf}))
    f, exponent, bits = decompose(t)
    for value, f_i, e_i, bits_i in zip(t.tolist(), f.tolist(), exponent.tolist(), bits.tolist()):
        want_f, want_e = math.frexp(value)
        assert (f_i, e_i) == (want_f, float(want_e)), value
        assert (bits_i >> 44) & 0xFF == int((want_f - 0.5) * 2**9), value  # the top 8 bits below the leading 1
