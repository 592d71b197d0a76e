"""Edge conventions, one table per spec rule; expected values are written from the spec's text.

Each row: (input, target, expected) with the value the spec's `choice` prescribes.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.reference.forward import expected_forward
from tests.helpers import make_case

inf, nan = np.inf, np.nan

# spec: pointwise.conventions.target_zero = zero; nan_propagation = propagate; target_negative = nan
PROB_SPACE = [
    (-inf, 0.0, 0.0),          # 0 * log(0 / 0) = 0
    (-1.0, 0.0, 0.0),
    (inf, 0.0, 0.0),
    (-1.0, -0.0, 0.0),         # either sign of zero
    (nan, 0.0, nan),           # NaN propagates even through a zero target
    (-1.0, nan, nan),
    (-1.0, -0.5, nan),         # negative target: outside the domain
    (-inf, 0.5, inf),          # infinities = limit
    (inf, 0.5, -inf),
    (1.0, inf, inf),           # t log t - t x -> +inf for finite x (torch's xlogy form gives NaN)
    (inf, inf, nan),           # inf - inf
    (0.0, 1.0, 0.0),           # 1 * (log 1 - 0)
    (-np.log(4.0), 0.5, 0.5 * (np.log(0.5) + np.log(4.0))),
]
# spec: pointwise.conventions.log_target_neg_inf = zero
LOG_SPACE = [
    (-1.0, -inf, 0.0),
    (-inf, -inf, 0.0),
    (inf, -inf, 0.0),
    (nan, -inf, nan),
    (-1.0, inf, inf),
    (inf, inf, nan),
    (-inf, 0.0, inf),
    (0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("x, t, want", PROB_SPACE)
def test_probability_space_conventions(spec, x, t, want):
    got = expected_forward(make_case([x], [t]), spec).value[0]
    np.testing.assert_equal(got, want) if not np.isfinite(want) or want == 0 else np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize("x, t, want", LOG_SPACE)
def test_log_space_conventions(spec, x, t, want):
    np.testing.assert_equal(expected_forward(make_case([x], [t], log_target=True), spec).value[0], want)


@pytest.mark.parametrize("reduction, shape, want", [
    ("sum", (0, 5), 0.0),            # spec: reductions.sum.empty
    ("mean", (0, 5), nan),           # spec: reductions.mean.empty
    ("batchmean", (0, 5), nan),      # spec: reductions.batchmean.empty
    ("batchmean", (3, 0), 0.0),      # non-empty batch of empty rows
])
def test_empty_reductions(spec, reduction, shape, want):
    np.testing.assert_equal(expected_forward(make_case(np.zeros(shape), np.zeros(shape), reduction=reduction), spec).value, want)


def test_batchmean_divides_by_the_broadcast_batch(spec):
    """spec: reductions.batchmean.divisor = broadcast_dim0: (6,) against (4, 6) is a batch of 4."""
    x = np.full(6, -np.log(6.0))
    t = np.full((4, 6), 0.5)
    each = 0.5 * (np.log(0.5) + np.log(6.0))
    got = expected_forward(make_case(x, t, reduction="batchmean"), spec).value
    np.testing.assert_allclose(got, 24 * each / 4, rtol=1e-15)


def test_batchmean_of_a_0d_input_divides_by_one(spec):
    got = expected_forward(make_case(-1.0, 0.5, reduction="batchmean"), spec).value
    np.testing.assert_allclose(got, 0.5 * (np.log(0.5) + 1.0), rtol=1e-15)


@pytest.mark.parametrize("size_average, reduce, reduction, want", [
    # spec: signature.legacy.mapping, legacy_wins: reduction is ignored, batchmean included
    (False, None, "batchmean", "sum"),
    (None, False, "batchmean", "none"),
    (True, True, "sum", "mean"),
    (None, True, "none", "mean"),
])
def test_legacy_arguments_win(spec, size_average, reduce, reduction, want):
    x, t = np.full((2, 3), -1.0), np.full((2, 3), 0.5)
    got = expected_forward(make_case(x, t, reduction=reduction, size_average=size_average, reduce=reduce), spec)
    plain = expected_forward(make_case(x, t, reduction=want), spec)
    np.testing.assert_array_equal(got.value, plain.value)
    assert got.warnings == ("legacy_arguments",)


@pytest.mark.parametrize("pair, want", [
    (("float16", "bfloat16"), "float32"), (("float32", "float64"), "float64"), (("bfloat16", "bfloat16"), "bfloat16"),
])
def test_result_dtype_follows_promotion(spec, pair, want):
    assert expected_forward(make_case([-1.0], [0.5], dtype=pair), spec).result_dtype == want


@pytest.mark.parametrize("case_kwargs, error_id, exception", [
    (dict(reduction="avg"), "unknown_reduction", "ValueError"),
    (dict(dtype=("int64", "float32")), "integral_dtype", "TypeError"),
    (dict(dtype="bool"), "integral_dtype", "TypeError"),
])
def test_errors(spec, case_kwargs, error_id, exception):
    got = expected_forward(make_case([-1.0], [1.0], **case_kwargs), spec)
    assert (got.error_id, got.error_type) == (error_id, exception)


def test_incompatible_shapes_error(spec):
    got = expected_forward(make_case(np.zeros((4, 6)), np.zeros((4, 5))), spec)
    assert (got.error_id, got.error_type) == ("incompatible_shapes", "ValueError")


def test_low_precision_inputs_are_rounded_first(spec):
    """0.1 is not a float16: the reference uses float16(0.1) = 0.0999755859375."""
    got = expected_forward(make_case([0.0], [0.1], dtype="float16"), spec).value[0]
    t = 0.0999755859375
    np.testing.assert_allclose(got, t * np.log(t), rtol=1e-15)


def test_overflow_of_the_result_dtype_is_infinite(spec):
    """spec: dtypes.precision, reductions.operand: 1e3 * (log 1e3 + 1e2) overflows float16."""
    got = expected_forward(make_case([-100.0], [1000.0], dtype="float16"), spec).value[0]
    assert got == inf


def test_cancelling_0d_term_is_refined(spec):
    """A 0-d case whose log(t) - x cancels is as exact as an array's (found by the load run; issue 11)."""
    t, x = 0.3, -1.2039728043259361  # x = np.log(0.3)
    got = expected_forward(make_case(x, t), spec).value
    # mpmath at 60 digits: 0.3 * (log(0.3) - x) = 2.68065647502113267897580486904e-17
    assert got.shape == () and abs(float(got) - 2.68065647502113267897580486904e-17) <= np.spacing(2.68e-17)


@pytest.mark.parametrize("chunk", [2, 1 << 14], ids=["chunks-of-2", "one-chunk"])
@pytest.mark.parametrize("log_target", [False, True])
def test_the_formula_everywhere_shortcut_sees_every_special_element(log_target, chunk, monkeypatch):
    """pointwise skips the convention masks when kl_term says every element is ordinary (read off
    its chunks' own checks); one special element anywhere (NaN, an infinity, a target <= 0 without
    log_target), in any chunk, must still be seen, and finite extremes are not special."""
    from conformance.reference import klterm
    monkeypatch.setattr(klterm, "CHUNK", chunk)
    ordinary = [-3.0, -1.0, 0.5, 2.0]
    for special in (nan, inf, -inf, 0.0, -0.0, -0.5, 5e-324, 1500.0, -1500.0, 1.7e308, -1.7e308):
        for where in range(4):
            for which in ("input", "target"):
                x, t = np.array(ordinary), np.abs(np.array(ordinary))
                (x if which == "input" else t)[where] = special
                masks = ~np.isfinite(x) | ~np.isfinite(t) | (np.zeros(4, bool) if log_target else t <= 0)
                assert klterm.kl_term(x, t, log_target).ordinary == (not masks.any()), (special, where, which)
    assert klterm.kl_term(np.empty(0), np.empty(0), log_target).ordinary


@pytest.mark.parametrize("small", [True, False], ids=["copied", "checked"])
def test_a_bound_past_float64_is_the_largest_float64_and_others_are_kept(small, monkeypatch):
    """spec: tolerance.comparison -- a finite expectation has a finite bound; NaN bounds stay NaN
    (beyond SMALL elements a bound within range is returned uncopied, after one max())."""
    from conformance.reference import forward
    from conformance.reference.forward import as_bound
    if not small:
        monkeypatch.setattr(forward, "SMALL", 0)
    wide = np.array([1.0, np.finfo(np.float64).max], dtype=np.longdouble)
    wide[1] *= 4
    assert as_bound(wide).tolist() == [1.0, np.finfo(np.float64).max]
    assert np.isnan(as_bound(np.array([nan, 2.0])))[0] and as_bound(np.array([nan, 2.0]))[1] == 2.0
    assert as_bound(np.array([inf, 2.0])).tolist() == [np.finfo(np.float64).max, 2.0]
    assert as_bound(np.array(3.0)).tolist() == 3.0 and as_bound(np.empty((0, 2))).shape == (0, 2)


@pytest.mark.parametrize("log_target", [False, True])
def test_large_and_small_arrays_name_the_same_rules_and_values(spec, log_target, monkeypatch):
    """The paths beyond SMALL elements (reductions, uncopied bounds, the rules read off the convention
    codes only) give what the full-array passes give, on every convention at once."""
    from conformance.reference import forward
    rows = LOG_SPACE if log_target else PROB_SPACE
    case = make_case([r[0] for r in rows], [r[1] for r in rows], log_target=log_target)
    small = expected_forward(case, spec)
    monkeypatch.setattr(forward, "SMALL", 0)
    large = expected_forward(case, spec)
    assert large.rules == small.rules and len(small.rules) >= 3
    assert np.array_equal(large.value, small.value, equal_nan=True) and np.array_equal(large.bound, small.bound)
    assert np.array_equal(large.rule_map, small.rule_map)
