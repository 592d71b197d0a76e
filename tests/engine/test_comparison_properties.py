"""Property tests of the comparison rule (spec: tolerance.comparison) and of the tolerances.

For generated expectations, bounds and non-finite patterns: an answer beyond the bound is never a
pass, one within it is never a divergence, the NaN/inf pattern is judged before any value, and a
bound that is not finite at a finite expectation stops the harness instead of passing. For
generated calls, the reference gives a finite bound wherever it predicts a finite value.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from conformance.core.errors import HarnessBug
from conformance.core.model import FLOAT_DTYPES, Expected, Observation, Verdict
from conformance.judge.compare import classify, passes

SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf])
FINITE = st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False)


@st.composite
def expectations(draw, min_finite: int = 0):
    """An Expected with a random NaN/inf pattern and finite, non-negative bounds at finite elements."""
    shape = draw(array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    n = int(np.prod(shape))
    values = np.array([draw(st.one_of(FINITE, FINITE, SPECIAL)) for _ in range(n)], dtype=np.float64)
    if min_finite and np.isfinite(values).sum() < min_finite:
        values[0] = draw(FINITE)
    bounds = np.array([draw(st.floats(0, 1e300)) for _ in range(n)], dtype=np.float64)
    # never read there, except an infinite bound at a NaN, which accepts any value (compare.accepts_any):
    # at an infinity it is never read, at a NaN it is drawn only by test_an_unspecified_element_accepts_anything
    bounds[~np.isfinite(values)] = draw(st.sampled_from([np.nan, 0.0]))
    bounds[np.isinf(values)] = draw(st.sampled_from([np.inf, np.nan, 0.0]))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    return Expected(result_dtype=dtype, shape=shape, value=values.reshape(shape), bound=bounds.reshape(shape))


def _observed(values, expected):
    return Observation(value=np.asarray(values, dtype=np.float64), dtype=expected.result_dtype,
                       shape=tuple(expected.shape))


@settings(max_examples=300, deadline=None)
@given(expectations(), st.data())
def test_within_the_bound_with_the_same_pattern_is_a_pass(spec, expected, data):
    want = expected.value
    fraction = data.draw(arrays(np.float64, want.shape, elements=st.floats(-1, 1)))
    with np.errstate(invalid="ignore", over="ignore"):  # the bound at non-finite elements is never read
        got = np.where(np.isfinite(want), want + fraction * expected.bound, want)
        # a fraction of the bound can round onto its far side at large magnitudes: keep only exact insides
        inside = np.where(np.isfinite(want), np.abs(got - want) <= expected.bound, True)
    assume(inside.all())
    assert classify(expected, _observed(got, expected), spec).verdict is Verdict.PASS


@settings(max_examples=300, deadline=None)
@given(expectations(min_finite=1), st.data(), st.floats(1.0, 1e6, exclude_min=True))
def test_beyond_the_bound_is_never_a_pass(spec, expected, data, over):
    want = expected.value
    finite = np.flatnonzero(np.isfinite(want))
    i = finite[data.draw(st.integers(0, finite.size - 1))]
    got = want.copy()
    sign = data.draw(st.sampled_from([-1.0, 1.0]))
    with np.errstate(over="ignore"):
        got.reshape(-1)[i] = want.reshape(-1)[i] + sign * (expected.bound.reshape(-1)[i] * over + 1e-300)
    assume(not abs(got.reshape(-1)[i] - want.reshape(-1)[i]) <= expected.bound.reshape(-1)[i])  # rounding
    verdict = classify(expected, _observed(got, expected), spec).verdict
    assert verdict in (Verdict.VALUE, Verdict.NONFINITE)  # NONFINITE when the step overflowed to inf


@settings(max_examples=300, deadline=None)
@given(expectations(), st.data())
def test_the_nonfinite_pattern_is_judged_before_values(spec, expected, data):
    """Any change of the NaN/inf pattern is `nonfinite`, whatever the other elements hold."""
    want = expected.value
    i = data.draw(st.integers(0, want.size - 1))
    with np.errstate(over="ignore"):
        got = np.where(np.isfinite(want), want + 1e300, want)  # every finite element far outside its bound too
    old = want.reshape(-1)[i]
    choices = [v for v in (np.nan, np.inf, -np.inf, 0.0, 1.0)
               if not (v == old or (np.isnan(v) and np.isnan(old)) or (np.isfinite(v) and np.isfinite(old)))]
    got.reshape(-1)[i] = data.draw(st.sampled_from(choices))
    assert classify(expected, _observed(got, expected), spec).verdict is Verdict.NONFINITE


@settings(max_examples=200, deadline=None)
@given(expectations(min_finite=1), st.data())
def test_an_unspecified_element_accepts_anything_and_changes_nothing_else(spec, expected, data):
    """A NaN expectation with an infinite bound (a convention whose choice is `arbitrary`) accepts any value,
    NaN and infinities included; the verdict of the other elements is what it was."""
    want = expected.value.copy().reshape(-1)
    bound = expected.bound.copy().reshape(-1)
    i = data.draw(st.integers(0, want.size - 1))
    assume(np.isfinite(want).sum() > (1 if np.isfinite(want[i]) else 0))  # a judged finite element remains
    want[i], bound[i] = np.nan, np.inf
    unspecified = Expected(result_dtype=expected.result_dtype, shape=expected.shape, value=want.reshape(expected.shape),
                           bound=bound.reshape(expected.shape))
    got = want.copy()
    got[i] = data.draw(st.one_of(FINITE, SPECIAL))
    assert classify(unspecified, _observed(got.reshape(expected.shape), expected), spec).verdict is Verdict.PASS
    j = data.draw(st.sampled_from(np.flatnonzero(np.isfinite(want)).tolist()))
    got[j] = data.draw(SPECIAL)  # a non-finite answer where a finite one is due is still judged
    verdict = classify(unspecified, _observed(got.reshape(expected.shape), expected), spec).verdict
    assert verdict is Verdict.NONFINITE
    assert passes(unspecified, _observed(got.reshape(expected.shape), expected)) is False


@settings(max_examples=200, deadline=None)
@given(expectations(min_finite=1), st.sampled_from([np.inf, np.nan, -1.0]), st.data())
def test_a_bad_bound_at_a_finite_expectation_stops_the_harness(spec, expected, bad, data):
    finite = np.flatnonzero(np.isfinite(expected.value))
    bound = expected.bound.copy()
    bound.reshape(-1)[finite[data.draw(st.integers(0, finite.size - 1))]] = bad
    broken = Expected(result_dtype=expected.result_dtype, shape=expected.shape, value=expected.value, bound=bound)
    with pytest.raises(HarnessBug):
        classify(broken, _observed(expected.value, expected), spec)


OBSERVED = st.one_of(FINITE, SPECIAL, st.just(0.0))


@settings(max_examples=500, deadline=None)
@given(expectations(), st.data())
def test_passes_agrees_with_classify(spec, expected, data):
    """`passes` (what explanations and profiles ask) is exactly `classify(...) is PASS`, for answers near,
    far, non-finite, of another shape, dtype or error."""
    want = expected.value
    kind = data.draw(st.sampled_from(["near", "any", "shape", "dtype", "raised", "error_expected"]))
    if kind == "near":
        fraction = data.draw(arrays(np.float64, want.shape, elements=st.floats(-2, 2)))
        with np.errstate(invalid="ignore", over="ignore"):
            got = np.where(np.isfinite(want), want + fraction * np.nan_to_num(expected.bound), want)
    else:
        got = data.draw(arrays(np.float64, want.shape, elements=OBSERVED))
    observed = _observed(got, expected)
    if kind == "shape":
        observed = Observation(value=got.reshape(-1)[:1], dtype=expected.result_dtype, shape=(1,))
    elif kind == "dtype":
        observed = Observation(value=got, dtype=data.draw(st.sampled_from(FLOAT_DTYPES)), shape=tuple(expected.shape))
    elif kind in ("raised", "error_expected"):
        observed = Observation(exception_type=data.draw(st.sampled_from(["ValueError", "RuntimeError"])),
                               exception_message=data.draw(st.sampled_from(["size mismatch", "bad reduction", ""])))
    if kind == "error_expected":
        expected = Expected(result_dtype=None, shape=(), value=None, bound=None, error_id="incompatible_shapes",
                            error_type="RuntimeError", error_match=data.draw(st.sampled_from([None, "size", "x"])))
    assert passes(expected, observed) == (classify(expected, observed, spec).verdict is Verdict.PASS)


CALL_VALUES = st.one_of(st.floats(-1e4, 1e4), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310,
                                                                 5e-324, -1.5, 700.0, -745.0]))


@settings(max_examples=300, deadline=None)
@given(x=arrays(np.float64, st.integers(1, 6), elements=CALL_VALUES), data=st.data())
def test_the_reference_gives_finite_bounds_wherever_it_predicts_finite_values(spec, x, data):
    from conformance.judge.casejudge import expected_for
    from tests.helpers import make_case

    t = data.draw(arrays(np.float64, x.shape, elements=CALL_VALUES))
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES))
    case = make_case(x, t, reduction=data.draw(st.sampled_from(["none", "sum", "mean", "batchmean"])),
                     log_target=data.draw(st.booleans()), dtype=dtype)
    from conformance.core.rounding import round_to_dtype
    case = type(case)(**{**case.__dict__, "input": round_to_dtype(x, dtype), "target": round_to_dtype(t, dtype)})
    for part in ("forward", "grad_input", "grad_target", "grad2_input"):
        expected = expected_for(case, spec, part)
        finite = np.isfinite(expected.value)
        assert np.all(np.isfinite(expected.bound[finite]) & (expected.bound[finite] >= 0)), (part, x, t, dtype)


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1e300), st.floats(0, 1e300), st.sampled_from(FLOAT_DTYPES), st.floats(0, 1e10))
def test_the_pointwise_bound_is_finite_and_grows_with_the_magnitude(spec, a, b, dtype, s):
    from conformance.core.tolerance import pointwise_bound

    low, high = sorted((a, b))
    bounds = pointwise_bound(np.array([low, high]), np.array([s, s]), dtype, spec)
    assert np.all(np.isfinite(bounds)) and 0 < bounds[0] <= bounds[1]


ANY_FLOAT = st.one_of(FINITE, SPECIAL, st.just(0.0), st.just(-0.0))


@settings(max_examples=300, deadline=None)
@given(st.data(), array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=5))
def test_the_nonfinite_pattern_is_its_definition(data, shape):
    """differs_in_nonfinite_pattern, computed in fewer passes, equals its definition element by element:
    NaN against not NaN, +inf against not +inf, -inf against not -inf."""
    from conformance.judge.compare import differs_in_nonfinite_pattern

    got, want = (data.draw(arrays(np.float64, shape, elements=ANY_FLOAT)) for _ in range(2))
    definition = ((np.isnan(got) != np.isnan(want)) | (np.isposinf(got) != np.isposinf(want))
                  | (np.isneginf(got) != np.isneginf(want)))
    assert np.array_equal(differs_in_nonfinite_pattern(got, want), definition)
    kinds = np.array([np.nan, np.inf, -np.inf, 1.0])  # each kind matches only itself
    assert np.array_equal(differs_in_nonfinite_pattern(kinds[:, None], kinds[None, :]), ~np.eye(4, dtype=bool))


@settings(max_examples=300, deadline=None)
@given(expectations(min_finite=1), st.data())
def test_an_element_with_an_alternate_passes_within_its_bound_of_either_and_only_so(spec, expected, data):
    """Expected.alternate (a term that may round either way): each finite element is judged against the nearer
    of its two values; `passes` and `classify` agree, and the rule is the one restated here."""
    want, bound = expected.value, expected.bound
    finite = np.isfinite(want)
    step = data.draw(arrays(np.float64, want.shape, elements=st.floats(-1e6, 1e6)))
    with np.errstate(invalid="ignore", over="ignore"):
        alternate = np.where(finite, want + step * np.nan_to_num(bound) + step, want)
    assume(np.isfinite(alternate[finite]).all())
    expected = Expected(result_dtype=expected.result_dtype, shape=expected.shape, value=want, bound=bound,
                        alternate=alternate)
    pick = data.draw(arrays(np.bool_, want.shape))
    fraction = data.draw(arrays(np.float64, want.shape, elements=st.floats(-3, 3)))
    with np.errstate(invalid="ignore", over="ignore"):
        centre = np.where(pick, alternate, want)
        got = np.where(finite, centre + fraction * np.nan_to_num(bound), want)
        near = (np.abs(got - want) <= bound) | (np.abs(got - alternate) <= bound)
    assume(np.isfinite(got[finite]).all())
    judged = classify(expected, _observed(got, expected), spec).verdict
    assert (judged is Verdict.PASS) == bool(near[finite].all()) == passes(expected, _observed(got, expected))
