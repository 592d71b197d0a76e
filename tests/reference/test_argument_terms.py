"""dtypes.argument_terms: the target's own terms evaluated in its dtype before promotion (pytorch#117034).

The expected numbers are worked out here by hand, in mpmath at 200 bits with NumPy's float16 and float32 for the
roundings the alternative names; torch 2.13 on CPU gives the same float64 values for the two-rounding calls
(kl_div(float64 input, float16 target)), and torch's CUDA kernels and libtorch 1.13.1's CPU kernels the
float32-computed ones (docs/guide/devices.md).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from conformance.core.choices import Alternative, touched_paths, with_alternatives
from conformance.core.model import Observation
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

OWN = (Alternative("dtypes.argument_terms", "own_dtype"),)
X = -2.0
T = float(np.float16(0.1))  # 0.0999755859375
LOG_T = float(np.float16(-1.3))


def _half(value) -> float:
    """A value rounded to float16 (through float64; both roundings are exact or decisive for these inputs)."""
    return float(np.float16(float(value)))


def _own_dtype_term() -> float:
    """fl16(t * fl16(log t)) - t * x, the rest exact: what the alternative states for log_target false."""
    mpmath.mp.prec = 200
    own = _half(mpmath.mpf(T) * _half(mpmath.log(T)))
    return float(mpmath.mpf(own) - mpmath.mpf(T) * X)


def _own_dtype_log_term() -> float:
    """fl16(exp(t)) * (t - x): the alternative with log_target."""
    mpmath.mp.prec = 200
    return float(_half(mpmath.exp(LOG_T)) * (mpmath.mpf(LOG_T) - X))


@pytest.mark.parametrize("log_target, t, want", [(False, T, _own_dtype_term), (True, LOG_T, _own_dtype_log_term)])
def test_own_dtype_rounds_the_target_terms_in_the_targets_dtype(spec, log_target, t, want):
    case = make_case([X], [t], log_target=log_target, dtype=("float64", "float16"))
    canonical = expected_forward(case, spec)
    own = expected_forward(case, with_alternatives(spec, OWN))
    np.testing.assert_allclose(own.value[0], want(), rtol=2**-52)
    # the canonical expectation is the exact term, from which fl16's rounding is far outside the float64 bound
    assert abs(own.value[0] - canonical.value[0]) > 1e6 * canonical.bound[0]
    assert own.bound[0] == canonical.bound[0]


def test_own_dtype_rounds_exp_target_in_the_input_gradient(spec):
    case = make_case([X], [LOG_T], log_target=True, reduction="sum", dtype=("float64", "float16"))
    mpmath.mp.prec = 200
    scale = 1.25  # spec: gradients.upstream.reduced, the sum's divisor 1
    got = expected_grad(case, with_alternatives(spec, OWN), "grad_input").value[0]
    assert got == -_half(mpmath.exp(LOG_T)) * scale
    assert expected_grad(case, spec, "grad_input").value[0] == pytest.approx(-float(mpmath.exp(LOG_T)) * scale,
                                                                            rel=2**-50)


def test_a_target_as_wide_as_the_result_is_unchanged(spec):
    case = make_case([np.float16(X)], [0.1], dtype=("float16", "float64"))
    assert expected_forward(case, with_alternatives(spec, OWN)).value[0] == expected_forward(case, spec).value[0]


@pytest.mark.parametrize("log_target, t, want", [(False, T, _own_dtype_term), (True, LOG_T, _own_dtype_log_term)])
def test_explain_names_the_own_dtype_terms(spec, log_target, t, want):
    case = make_case([X, X], [t, t], log_target=log_target, dtype=("float64", "float16"))
    assert "dtypes.argument_terms" in touched_paths(case)
    observed = Observation(value=np.array([want(), want()]), dtype="float64", shape=(2,))
    assert explain(case, observed, spec) == OWN


LOG_T32 = float(np.float32(-1.3))


def _single(value) -> float:
    """A value rounded to float32 (through float64, decisive for these inputs)."""
    return float(np.float32(float(value)))


def _other(value, kind=np.float32) -> float:
    """The `kind` (NumPy float32 or float16) neighbour of `value` on the other side from round to nearest (a
    faithful rounding's other answer), found by stepping from the nearest with NumPy."""
    near = kind(float(value))
    toward = kind(np.inf) if mpmath.mpf(float(near)) < value else kind(-np.inf)
    return float(np.nextafter(near, toward))


def test_each_unreduced_element_may_take_its_terms_other_faithful_rounding(spec):
    """A float32 exp or log accurate to one ulp (torch's SLEEF kernels) is not always the nearest: the alternative
    accepts, element by element, the target's term rounded the other way, worked out here in mpmath."""
    mpmath.mp.prec = 200
    case = make_case([X, X], [LOG_T32, 0.0], log_target=True, dtype=("float64", "float32"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    want = float(_other(mpmath.exp(LOG_T32)) * (mpmath.mpf(LOG_T32) - X))
    assert own.alternate[0] == pytest.approx(want, rel=2**-52) and own.alternate[0] != own.value[0]
    assert own.alternate[1] == own.value[1]  # exp(0) = 1 is a float32: one answer only
    # grad_input is -fl32(exp t) * scale, elementwise: the same other answer
    grad = expected_grad(case, with_alternatives(spec, OWN), "grad_input")
    scale = (0.75, 0.875)  # spec: gradients.upstream, unreduced
    assert grad.alternate[0] == pytest.approx(-_other(mpmath.exp(LOG_T32)) * scale[0], rel=2**-52)
    # the spec's own choice takes one value only
    assert expected_forward(case, spec).alternate is None


def test_a_sum_may_take_one_elements_term_the_other_way_and_no_more(spec):
    """torch's float64 sum of float32 log-space targets: one of 24 exp(t) was SLEEF's other neighbour, and a reduced
    result cannot take each element's choice (that window always holds the promoted sum). A sum with exactly one
    element's term rounded the other way is a candidate; the sum with two is not. Worked out here in mpmath."""
    mpmath.mp.prec = 200
    t = [LOG_T32, _single(-0.7), _single(-2.1)]
    case = make_case([X, X, X], t, log_target=True, reduction="sum", dtype=("float64", "float32"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    near = [_single(mpmath.exp(v)) * (mpmath.mpf(v) - X) for v in t]
    moved = [_other(mpmath.exp(v)) * (mpmath.mpf(v) - X) - n for v, n in zip(t, near)]
    assert float(own.value) == pytest.approx(float(sum(near)), rel=2**-52)
    want = sorted(float(sum(near) + m) for m in moved)
    assert own.alternate == pytest.approx(want, rel=2**-52)
    flipped = Observation(value=np.array(want[1]), dtype="float64", shape=())
    assert explain(case, flipped, spec) == OWN
    two = Observation(value=np.array(float(sum(near) + moved[0] + moved[2])), dtype="float64", shape=())
    assert explain(case, two, spec) is None
    assert expected_forward(case, spec).alternate is None  # the spec's own choice: one value


def test_a_sum_over_the_last_axis_takes_one_elements_term_the_other_way_too(spec):
    """MLX's kl_div_loss (dialects.distribution_sum) sums each distribution over the last axis, then reduces: the
    total is still a sum of every element's term, so the spec's "in a sum, at most one element's term the other way"
    holds for it as for torch's. MLX 0.32.4 took exp(31.125) in bfloat16 as the lower neighbour where the upper is
    nearest (its float32 exp, reduced with a float32 ln 2, lands just below the midpoint). Worked out here in
    mpmath; the answer with two elements moved is still no rounding of the sum."""
    mpmath.mp.prec = 200
    t = [LOG_T32, _single(-0.7), _single(-2.1), _single(-0.2)]
    case = make_case([[X, X], [X, X]], [t[:2], t[2:]], log_target=True, reduction="sum", dtype=("float64", "float32"))
    own = expected_forward(case, with_alternatives(spec, OWN), "distribution_sum")
    near = [_single(mpmath.exp(v)) * (mpmath.mpf(v) - X) for v in t]
    moved = [_other(mpmath.exp(v)) * (mpmath.mpf(v) - X) - n for v, n in zip(t, near)]
    assert float(own.value) == pytest.approx(float(sum(near)), rel=2**-52)
    assert own.alternate == pytest.approx(sorted(float(sum(near) + m) for m in moved), rel=2**-52)
    flipped = Observation(value=np.array(float(sum(near) + moved[2])), dtype="float64", shape=())
    assert explain(case, flipped, spec, dialect="distribution_sum") == OWN
    two = Observation(value=np.array(float(sum(near) + moved[0] + moved[2])), dtype="float64", shape=())
    assert explain(case, two, spec, dialect="distribution_sum") is None
    assert expected_forward(case, spec, "distribution_sum").alternate is None  # the spec's own choice: one value


def test_an_answer_with_one_element_rounded_the_other_way_is_explained_and_one_between_is_not(spec):
    """Per element, the answer must be one of the two roundings: an answer half way between them (the exact
    term, off the spec's float64 bound by far less than either) is no rounding of the target's term."""
    mpmath.mp.prec = 200
    case = make_case([X, X], [LOG_T32, LOG_T32], log_target=True, dtype=("float64", "float32"))
    near = float(_single(mpmath.exp(LOG_T32)) * (mpmath.mpf(LOG_T32) - X))
    other = float(_other(mpmath.exp(LOG_T32)) * (mpmath.mpf(LOG_T32) - X))
    observed = Observation(value=np.array([near, other]), dtype="float64", shape=(2,))
    assert explain(case, observed, spec) == OWN
    between = (near + other) / 2
    observed = Observation(value=np.array([near, between]), dtype="float64", shape=(2,))
    assert explain(case, observed, spec) is None


# a float16 target whose term computed in float32 and rounded once differs from fl16(t * fl16(log t))
T_THROUGH = float(np.float16(0.0626220703125))


def _through_float32_term(t: float) -> float:
    """fl16(fl32(t * fl32(log t))) - t * x, the rest exact: a half-precision term computed in float32 (torch's
    CUDA kernels and libtorch 1.13's CPU kernels)."""
    mpmath.mp.prec = 200
    own = _half(_single(mpmath.mpf(t) * _single(mpmath.log(t))))
    return float(mpmath.mpf(own) - mpmath.mpf(t) * X)


def _own_dtype_term_at(t: float) -> float:
    mpmath.mp.prec = 200
    return float(mpmath.mpf(_half(mpmath.mpf(t) * _half(mpmath.log(t)))) - mpmath.mpf(t) * X)


def test_a_half_precision_term_may_be_computed_in_float32_and_rounded_once(spec):
    """torch's CUDA kernels (and libtorch 1.13.1's CPU kernels, which R torch 0.11.0 runs) compute xlogy(t, t) of a
    float16 target in float32 and round it once to float16, where torch 2's CPU kernels round log(t) to float16
    first: both are the target's terms in its own dtype. Worked out here in mpmath; element by element either."""
    through, two_roundings = _through_float32_term(T_THROUGH), _own_dtype_term_at(T_THROUGH)
    assert abs(through - two_roundings) > 1e-5  # a float16 unit apart: the forms are told apart
    case = make_case([X, X], [T_THROUGH, T], dtype=("float64", "float16"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    assert own.value[0] == pytest.approx(two_roundings, rel=2**-52)
    assert own.alternate[0] == pytest.approx(through, rel=2**-52)
    observed = Observation(value=np.array([through, _own_dtype_term()]), dtype="float64", shape=(2,))
    assert explain(case, observed, spec) == OWN


def test_a_sum_computed_in_float32_takes_every_elements_term_that_way(spec):
    """The kernel decides how a half-precision term is rounded, so a sum takes every element's the same way: the
    sum of the float32-computed terms is a candidate; a sum with one element computed that way, of two that
    differ, is not."""
    t = [T_THROUGH, float(np.float16(0.05419921875))]  # both move the same way, so the sums differ
    case = make_case([X, X], t, reduction="sum", dtype=("float64", "float16"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    through = [_through_float32_term(v) for v in t]
    two_roundings = [_own_dtype_term_at(v) for v in t]
    assert all(abs(a - b) > 1e-5 for a, b in zip(through, two_roundings))
    assert float(own.value) == pytest.approx(sum(two_roundings), rel=2**-50)
    assert own.alternate == pytest.approx([sum(through)], rel=2**-50)
    every = Observation(value=np.array(sum(through)), dtype="float64", shape=())
    assert explain(case, every, spec) == OWN
    one = Observation(value=np.array(through[0] + two_roundings[1]), dtype="float64", shape=())
    assert explain(case, one, spec) is None


def test_an_answer_within_rounding_of_the_own_terms_is_no_cause_but_is_said(spec):
    """torch's float32:bfloat16 sum: the target's terms in bfloat16 move the sum by 1.1 of its bounds, so an answer
    there is no evidence of them (explain refuses it), yet that is where it lies (within_rounding says so). An
    answer outside the bound on the other side lies within rounding of nothing once it is past every candidate
    (the sum with one element's term the other way: the nearest lies inside the spec's bound, so no answer there is
    evidence either); nor does one that only a wider bound (the float32 computation's) holds."""
    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id
    from conformance.judge.explain import within_rounding

    case = build_case(parse_id("fwd/sum/log_target=0/4x6/float32:bfloat16/large/s0"), DEFAULT_SEED)
    canonical, own = expected_forward(case, spec), expected_forward(case, with_alternatives(spec, OWN))
    c, o, b = float(canonical.value), float(own.value), float(canonical.bound)
    assert b < abs(o - c) < 2 * b  # outside the spec's bound, within twice it: no evidence either way
    at_own = Observation(value=np.array(o), dtype="float32", shape=())
    assert explain(case, at_own, spec) is None
    assert within_rounding(case, at_own, spec) == OWN
    away = -np.sign(o - c)
    reach = max(away * (np.asarray(own.alternate) - c)) / b  # the farthest candidate on the other side, in bounds
    assert 0 < reach < 1, "a candidate on that side lies inside the spec's bound"
    assert within_rounding(case, Observation(value=np.array(c + away * (reach + 0.9) * b), dtype="float32",
                                             shape=()), spec) == OWN
    other_side = Observation(value=np.array(c + away * (reach + 1.1) * b), dtype="float32", shape=())
    assert within_rounding(case, other_side, spec) is None
    float64 = make_case([X, X], [T, T], dtype="float64")
    off = expected_forward(float64, spec).value + 1e-9  # float32's rounding size, far outside float64's bound
    assert within_rounding(float64, Observation(value=off, dtype="float64", shape=(2,)), spec) is None


def test_a_half_precision_exp_keeps_its_other_neighbour(spec):
    """exp(target) of a float16 log-target may be either neighbour (computed in float32 and rounded once more, it
    lands on one of them): the alternate is the other neighbour, worked out here in mpmath, not a float32 form."""
    mpmath.mp.prec = 200
    case = make_case([X], [LOG_T], log_target=True, dtype=("float64", "float16"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    other = float(_other(mpmath.exp(LOG_T), np.float16) * (mpmath.mpf(LOG_T) - X))
    assert own.alternate[0] == pytest.approx(other, rel=2**-52) and own.alternate[0] != own.value[0]
    grad = expected_grad(case, with_alternatives(spec, OWN), "grad_input")
    assert grad.alternate[0] == pytest.approx(-_other(mpmath.exp(LOG_T), np.float16) * 0.75, rel=2**-52)


def test_the_float32_form_rounds_the_product_in_float32_before_the_targets_dtype(spec):
    """At float16 t = 1 - 2**-11, t * fl32(log t) rounds to -2**-11 in float32 and stays there in float16, while the
    same product rounded once to float16 (or t * fl16(log t)) is -0.000488042...: the float32 step is the form's."""
    mpmath.mp.prec = 200
    t = float(np.float16(1 - 2**-11))
    through = _half(_single(mpmath.mpf(t) * _single(mpmath.log(t))))
    once = _half(mpmath.mpf(t) * _single(mpmath.log(t)))
    assert through == -2.0**-11 and once != through
    case = make_case([X], [t], dtype=("float64", "float16"))
    own = expected_forward(case, with_alternatives(spec, OWN))
    assert own.alternate[0] == pytest.approx(float(mpmath.mpf(through) - mpmath.mpf(t) * X), rel=2**-52)


def test_torch_on_cuda_recorded_is_pytorch_117034_through_float32(spec):
    """torch's CUDA kernels, recorded on a lent GPU (tests/data/cuda-own-dtype.json; CI has none): the target's
    terms computed in float32 and rounded once to its half-precision dtype. The spec's answer is far off, the
    two-rounding form alone does not hold the answers, and the float32-computed one does."""
    import dataclasses
    import json
    from pathlib import Path

    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id
    from conformance.core.model import Verdict
    from conformance.judge.compare import classify

    recorded = json.loads((Path(__file__).parents[1] / "data" / "cuda-own-dtype.json").read_text(encoding="utf-8"))
    assert len(recorded["rows"]) == 2
    for row in recorded["rows"]:
        case = build_case(parse_id(row["case_id"]), DEFAULT_SEED)
        got = np.array([float.fromhex(v) for v in row["got"]]).reshape(row["shape"])
        observed = Observation(value=got, dtype=row["result_dtype"], shape=tuple(row["shape"]))
        own = expected_forward(case, with_alternatives(spec, OWN))
        assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.VALUE, row["case_id"]
        two_roundings = dataclasses.replace(own, alternate=None)
        assert classify(two_roundings, observed, spec).verdict is Verdict.VALUE, row["case_id"]
        assert classify(own, observed, spec).verdict is Verdict.PASS, row["case_id"]
        assert explain(case, observed, spec) == OWN, row["case_id"]


LEGACY_THEN_BATCHMEAN = Alternative("signature.legacy.precedence", "legacy_then_batchmean")


def test_legacy_arguments_dividing_each_element_keep_either_form_of_its_term(spec):
    """reduction='batchmean' with size_average=False and reduce=False: torch computes each element and then divides
    by the batch (signature.legacy.precedence = legacy_then_batchmean). No element is summed with another, so each
    keeps either form of its own term, divided alike: torch's CUDA kernels gave such a row on the lent H200
    (docs/guide/devices.md, 2026-11-29), which the reference had left without the second form."""
    case = make_case([[X], [X]], [[T_THROUGH], [T]], reduction="batchmean", size_average=False, reduce=False,
                     dtype=("float64", "float16"))
    both = (*OWN, LEGACY_THEN_BATCHMEAN)
    through, two_roundings = _through_float32_term(T_THROUGH), _own_dtype_term_at(T_THROUGH)
    expected = expected_forward(case, with_alternatives(spec, both))
    assert expected.value[0, 0] == pytest.approx(two_roundings / 2, rel=2**-52)
    assert expected.alternate[0, 0] == pytest.approx(through / 2, rel=2**-52)
    observed = Observation(value=np.array([[through / 2], [_own_dtype_term() / 2]]), dtype="float64", shape=(2, 1))
    assert explain(case, observed, spec) == both
