"""The false passes issue 11 found, each reproduced through the real reference, comparator and profiles.

Expected values are written from the spec's text (the limit of the formula, the masked convention),
never taken from the reference under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.model import Observation, Verdict
from conformance.judge.compare import classify
from conformance.judge.profiles import DeviationLedger
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

inf, nan = np.inf, np.nan


def _observed(values, dtype="float64"):
    values = np.asarray(values, dtype=np.float64)
    return Observation(value=values, dtype=dtype, shape=values.shape)


@pytest.mark.parametrize("x, t, part, got", [
    # input -inf (q = 0) with t = 0.5: grad_target = log t - x + 1 = +inf; finite answers are wrong
    (-inf, 0.5, "grad_target", 0.0),
    (-inf, 0.5, "grad_target", 5.0),
    (-inf, 0.5, "grad_target", -inf),
    # target +inf: grad_input = -t * upstream = -inf; the other infinity and finite answers are wrong
    (-1.0, inf, "grad_input", inf),
    (-1.0, inf, "grad_input", 0.0),
    (-1.0, inf, "grad_input", -1e308),
])
def test_an_infinite_expectation_accepts_only_that_infinity(spec, x, t, part, got):
    expected = expected_grad(make_case([x], [t], reduction="none"), spec, part)
    assert np.isinf(expected.value[0])
    assert classify(expected, _observed([got]), spec).verdict is Verdict.NONFINITE


def test_the_right_infinity_passes(spec):
    expected = expected_grad(make_case([-inf], [0.5], reduction="none"), spec, "grad_target")
    assert classify(expected, _observed([inf]), spec).verdict is Verdict.PASS


@pytest.fixture
def masked_spec(spec):
    from conformance.core.choices import Alternative, with_alternatives

    return with_alternatives(spec, (Alternative("pointwise.conventions.nan_propagation",
                                                "masked_by_zero_target"),))


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_a_masked_nan_gives_a_finite_bound(masked_spec, reduction):
    """NaN input at a zero target is 0 under masked_by_zero_target: its bound is finite, not NaN."""
    expected = expected_forward(make_case([nan, -1.0], [0.0, 0.5], reduction=reduction), masked_spec)
    assert np.all(np.isfinite(expected.bound)) and np.all(np.isfinite(expected.value))
    want = 0.5 * (np.log(0.5) + 1.0)
    wrong = [123.0, want] if reduction == "none" else want + 1e6
    assert classify(expected, _observed(wrong), masked_spec).verdict is Verdict.VALUE


def test_garbage_at_a_masked_nan_is_not_documented(spec):
    """OneFlow's profile does not document masking, but MindSpore's and OneFlow's behaviour is: whatever a
    profile documents, 123 where the deviated reference predicts 0 must stay undocumented."""
    from conformance.judge.profiles import Deviation

    ledger = DeviationLedger(spec, "oneflow", ["oneflow.nn.functional.kl_div", "oneflow.nn.KLDivLoss"])
    ledger.by_api["oneflow.nn.functional.kl_div"] = (Deviation(
        "masks-nan", ("oneflow.nn.functional.kl_div",), {"pointwise.conventions.nan_propagation":
                                                         "masked_by_zero_target"}, {}, None, "r", "https://x", "docs"),)
    case = make_case([nan], [0.0], reduction="none")
    expect = lambda s: expected_forward(case, s)
    assert ledger.documented("oneflow.nn.functional.kl_div", _observed([0.0]), expect) == ("masks-nan",)
    assert ledger.documented("oneflow.nn.functional.kl_div", _observed([123.0]), expect) == ()


@pytest.mark.parametrize("message, documented", [
    ("kl_div: Integral inputs not supported.", True),
    ("CUDA error: an illegal memory access was encountered", False),  # same type, another failure
    ("", False),
])
def test_a_documented_exception_must_match_its_message_too(spec, message, documented):
    """torch's profile documents RuntimeError('kl_div: Integral inputs not supported') for integer inputs,
    not every RuntimeError (issue 11, found 6)."""
    ledger = DeviationLedger(spec, "torch", ["torch.nn.functional.kl_div", "torch.nn.KLDivLoss"])
    case = make_case(np.zeros((2, 3)), np.zeros((2, 3)), reduction="sum", dtype="int64")
    observed = Observation(exception_type="RuntimeError", exception_message=message)
    expect = lambda s: expected_forward(case, s)
    assert classify(expect(spec), observed, spec).verdict is Verdict.ERROR
    got = ledger.documented("torch.nn.functional.kl_div", observed, expect)
    assert got == (("runtime-error-for-integral-dtypes",) if documented else ())


def test_a_bad_message_pattern_in_a_profile_is_refused(tmp_path, spec):
    from conformance.core.errors import SpecError
    from conformance.judge.profiles import load_profile

    (tmp_path / "torch.yaml").write_text(
        "framework: torch\ndeviations:\n- {id: x, apis: [a], exceptions: {integral_dtype: {type: RuntimeError, "
        "match: 'kl_div: ('}}, rationale: r, basis: docs, reference: 'https://x'}\n")
    with pytest.raises(SpecError, match=r"deviations\[0\]\.exceptions\.integral_dtype\.match: match 'kl_div: \(' "
                                        r"is not a regular expression"):
        load_profile("torch", spec, tmp_path)
