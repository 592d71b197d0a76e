"""The comparator: tables of (expected, observed, verdict) written from the spec, and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from conformance.core.model import Expected, Observation, Verdict
from conformance.judge.compare import classify

nan, inf = np.nan, np.inf


def _expected(value, bound=1e-6, dtype="float32", **kw):
    value = np.asarray(value, dtype=np.float64)
    return Expected(result_dtype=dtype, shape=value.shape, value=value, bound=np.full(value.shape, bound), **kw)


def _observed(value, dtype="float32", **kw):
    value = np.asarray(value, dtype=np.float64)
    return Observation(value=value, dtype=dtype, shape=value.shape, **kw)


@pytest.mark.parametrize("expected, observed, verdict", [
    (_expected([1.0, 2.0]), _observed([1.0, 2.0]), Verdict.PASS),
    (_expected([1.0, 2.0]), _observed([1.0, 2.0 + 5e-7]), Verdict.PASS),           # inside the bound
    (_expected([1.0, 2.0]), _observed([1.0, 2.0 + 2e-6]), Verdict.VALUE),          # outside it
    (_expected([nan, 0.0]), _observed([nan, 0.0]), Verdict.PASS),
    (_expected([0.0, 0.0]), _observed([nan, 0.0]), Verdict.NONFINITE),            # a NaN where 0 is expected
    (_expected([inf]), _observed([-inf]), Verdict.NONFINITE),                    # the sign of inf counts
    (_expected([inf]), _observed([1e38]), Verdict.NONFINITE),
    (_expected([1.0, 2.0]), _observed([[1.0, 2.0]]), Verdict.SHAPE),
    (_expected(1.0), _observed([1.0]), Verdict.SHAPE),                            # 0-d is not (1,)
    (_expected([1.0]), _observed([1.0], dtype="float64"), Verdict.DTYPE),
    (_expected([1.0]), Observation(exception_type="RuntimeError", exception_message="boom"), Verdict.ERROR),
    (Expected(result_dtype=None, error_id="unknown_reduction", error_type="ValueError"),
     Observation(exception_type="ValueError", exception_message="avg"), Verdict.PASS),
    (Expected(result_dtype=None, error_id="unknown_reduction", error_type="ValueError"),
     Observation(exception_type="RuntimeError", exception_message="avg"), Verdict.ERROR),  # other type named
    (Expected(result_dtype=None, error_id="unknown_reduction", error_type="ValueError"),
     _observed([1.0]), Verdict.ERROR),                                             # a value where an error is due
    (_expected([1.0]), Observation(unsupported="no log_target"), Verdict.UNSUPPORTED),
    (_expected(np.zeros((0, 5))), _observed(np.zeros((0, 5))), Verdict.PASS),
    # no value at all is no answer, though None reads as NaN: it passed where a 0-d NaN was expected
    (_expected(nan), Observation(dtype="float32", shape=()), Verdict.VALUE),
    (_expected([[nan, 1.0]]), Observation(dtype="float32", shape=(1, 2)), Verdict.VALUE),
    # a result with no real values (the API judges complex ones by dtype and shape) is judged by its dtype
    (_expected([[1.0, 2.0]]), Observation(dtype="complex64", shape=(1, 2)), Verdict.DTYPE),
])
def test_verdict_table(spec, expected, observed, verdict):
    assert classify(expected, observed, spec).verdict is verdict


def test_messages_name_types_and_worst_element(spec):
    j = classify(Expected(result_dtype=None, error_id="integral_dtype", error_type="TypeError"),
                 Observation(exception_type="RuntimeError", exception_message="no ints"), spec)
    assert "RuntimeError" in j.message and "TypeError" in j.message
    j = classify(_expected([1.0, 2.0, 3.0]), _observed([1.0, 2.5, 3.0]), spec)
    assert j.message.startswith("value: 1 of 3 elements outside bound; worst [1]: got 2.5, expected 2.0")
    assert j.max_abs_err == 0.5 and j.bound == 1e-6


def test_missing_warning_is_reported_but_verdict_kept(spec):
    expected = _expected([1.0], warnings=("mean_not_kl",))
    j = classify(expected, _observed([1.0]), spec)
    assert j.verdict is Verdict.PASS and j.missing_warnings == ("mean_not_kl",)
    j = classify(expected, _observed([1.0], warnings=("UserWarning: use 'batchmean' instead",)), spec)
    assert j.missing_warnings == ()


finite = arrays(np.float64, st.integers(1, 20), elements=st.floats(-1e6, 1e6, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(finite)
def test_identical_arrays_pass(spec, values):
    assert classify(_expected(values, bound=0.0), _observed(values), spec).verdict is Verdict.PASS


@settings(max_examples=200, deadline=None)
@given(finite, st.data())
def test_a_moved_nan_is_nonfinite(spec, values, data):
    i = data.draw(st.integers(0, values.size - 1))
    want = values.copy()
    want[i] = nan
    got = values.copy()
    got[(i + 1) % values.size] = nan
    expected_verdict = Verdict.PASS if values.size == 1 else Verdict.NONFINITE
    assert classify(_expected(want), _observed(got), spec).verdict is expected_verdict


@settings(max_examples=200, deadline=None)
@given(finite, st.floats(1e-12, 1.0), st.floats(1.01, 100.0))
def test_error_past_the_bound_flips_the_verdict(spec, values, bound, over):
    got = values.copy()
    got[0] += bound * over
    if got[0] - values[0] <= bound:  # lost to rounding at this magnitude
        return
    assert classify(_expected(values, bound=bound), _observed(got), spec).verdict is Verdict.VALUE
    got[0] = values[0] + bound / over
    if abs(got[0] - values[0]) <= bound:
        assert classify(_expected(values, bound=bound), _observed(got), spec).verdict is Verdict.PASS


@pytest.mark.parametrize("part", ["forward", "grad_input"])
def test_the_sign_of_a_zero_result_is_not_judged(spec, part):
    """spec: tolerance.comparison.signed_zero says the sign of a zero never matters: on zero targets, whose
    terms and grad_input (-t) are zeros, a result with each zero's sign flipped passes, as do all +0 and all
    -0, while a small number where a zero is expected still fails."""
    from conformance.reference.grad import expected_for
    from tests.helpers import make_case

    assert spec.data["tolerance"]["comparison"]["signed_zero"]["matters"] == "never"
    case = make_case([-1.5, 0.25, -0.5], [0.0, -0.0, 0.0], reduction="none", dtype="float32")
    expected = expected_for(case, spec, part)
    assert (expected.value == 0).all(), expected.value  # every element a zero: the case is about their sign
    flipped = np.where(np.signbit(expected.value), 0.0, -0.0)
    for got in (flipped, np.zeros(3), np.full(3, -0.0)):
        assert classify(expected, _observed(got), spec).verdict is Verdict.PASS, got
    assert classify(expected, _observed([0.0, -1e-3, 0.0]), spec).verdict is Verdict.VALUE
