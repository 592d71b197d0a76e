"""MLX through its adapter: the docstring's formula, its reductions, and the quirks found (docs/frameworks/).

mlx.nn.losses.kl_div_loss(inputs, targets, axis=-1, reduction="none") takes both arguments as
log-probabilities and sums over the distribution axis (spec: dialects.distribution_sum).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, build_case
from conformance.cases.ids import parse_id
from conformance.core.case import Construction
from conformance.core.choices import Alternative, with_alternatives
from conformance.core.model import Verdict, upstream_gradient
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FRAMEWORK = "mlx"
DIALECT = "distribution_sum"
API = "mlx.nn.losses.kl_div_loss"

# log-softmax rows: two distributions over three classes
LOG_Q = np.log([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
LOG_P = np.log([[0.2, 0.3, 0.5], [0.7, 0.1, 0.2]])


def _run(adapter, case, part="forward"):
    return adapter.run(case, adapter.api(API), "cpu", part)


def _judge(adapter, spec, case, part="forward"):
    observed = _run(adapter, case, part)
    expected = expected_forward(case, spec, DIALECT) if part == "forward" else expected_grad(case, spec, part, DIALECT)
    return observed, classify(expected, observed, spec)


def _behaves_as(adapter, spec, case, part="forward"):
    observed = _run(adapter, case, part)
    return [str(a) for a in explain(case, observed, spec, part, dialect=DIALECT) or ()]


def test_the_docstring_formula_reproduces(framework_adapter, spec):
    """"Computes the following when reduction == 'none': (mx.exp(targets) * (targets - inputs)).sum(axis)",
    evaluated here in NumPy float64: one value per distribution, within the spec's bound of float32."""
    case = make_case(LOG_Q, LOG_P, reduction="none", log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert judgement.verdict is Verdict.PASS and observed.shape == (2,) and observed.dtype == "float32"
    x, t = LOG_Q.astype(np.float32).astype(np.float64), LOG_P.astype(np.float32).astype(np.float64)
    formula = (np.exp(t) * (t - x)).sum(-1)
    assert np.all(np.abs(observed.value - formula) <= expected_forward(case, spec, DIALECT).bound)


def test_mean_divides_by_the_number_of_distributions(framework_adapter, spec):
    """mean is the mean of the per-distribution values (the dialect), not of the elements: on a (2, 2, 3)
    batch it is the sum over 4 distributions divided by 4; sum is the sum."""
    x, t = np.stack([LOG_Q, LOG_Q[::-1]]), np.stack([LOG_P, LOG_P[::-1]])
    per_distribution = (np.exp(t) * (t - x)).sum(-1)
    for reduction, want in (("mean", per_distribution.sum() / 4), ("sum", per_distribution.sum())):
        case = make_case(x, t, reduction=reduction, log_target=True, dtype="float64")
        observed = _run(framework_adapter, case)
        assert observed.shape == () and observed.value == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("reduction", ["batchmean", "avg", "SUM", "elementwise_mean"])
def test_reductions_outside_the_dialect_raise_value_error(framework_adapter, spec, reduction):
    case = make_case(LOG_Q, LOG_P, reduction=reduction, log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.exception_type == "ValueError" and "Invalid reduction" in observed.exception_message
    assert judgement.verdict is Verdict.PASS


def test_probability_targets_are_unsupported(framework_adapter):
    case = make_case(LOG_Q, np.exp(LOG_P), reduction="none", log_target=False, dtype="float32")
    assert framework_adapter.unsupported_reason(case, framework_adapter.api(API)) == \
        f"{API} takes the target as log-probabilities only"


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_layouts_are_real_strided_arrays(framework_adapter, layout):
    """The built inputs are evaluated views of their buffers: the buffer protocol shows their strides."""
    case = make_case(LOG_Q, LOG_P, reduction="none", log_target=True, dtype="float32", layout=layout)
    for array in framework_adapter.build(case, "cpu"):
        view = memoryview(array)
        assert view.shape == LOG_Q.shape and not view.c_contiguous
    assert view.strides == {"transposed": (4, 8), "strided": (24, 8)}[layout]


def test_float64_arrives_as_float64(framework_adapter):
    """mx.array of a float64 NumPy array is float32 (MLX's conversion default); the adapter asks for float64."""
    mx = framework_adapter.mx
    assert mx.array(np.zeros(2)).dtype == mx.float32
    case = make_case(LOG_Q, LOG_P, reduction="none", log_target=True, dtype="float64")
    assert _run(framework_adapter, case).dtype == "float64"


def test_mixed_float16_bfloat16_promotes_but_takes_exp_in_bfloat16(framework_adapter, spec):
    """Finding: float16 input with a bfloat16 target gives float32, as the spec's promotion says, but
    mx.exp(targets) is taken on the bfloat16 target before promotion, so the result carries bfloat16's
    rounding of exp(target) (as torch's does)."""
    from conformance.core.rounding import round_to_dtype

    case = make_case(LOG_Q, LOG_P, reduction="sum", log_target=True, dtype=("float16", "bfloat16"))
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.dtype == "float32" and judgement.verdict is Verdict.VALUE \
        and judgement.cause == "unexplained" and "dtypes.promotion" in judgement.rules  # no choice reproduces it
    x, t = round_to_dtype(LOG_Q, "float16"), round_to_dtype(LOG_P, "bfloat16")
    exp_in_bfloat16 = (round_to_dtype(np.exp(t), "bfloat16") * (t - x)).sum()
    assert observed.value == pytest.approx(exp_in_bfloat16, rel=1e-6)


def test_a_bfloat16_exp_at_its_other_neighbour_in_a_sum_is_the_targets_own_dtype(framework_adapter, spec):
    """In the default suite's float32:bfloat16 sum of large log targets, MLX takes exp(31.125) in bfloat16 as the
    neighbour below where the one above is nearest (its float32 exp lands just under the midpoint), and the sum is
    about two thousand bounds off the spec's. The spec's own_dtype choice allows one element of a sum the other
    neighbour: the row joins the target's-own-dtype defect instead of a defect of its own that no choice
    reproduces."""
    from conformance.core.rounding import round_to_dtype

    case = build_case(parse_id("fwd/sum/log_target=1/4x6/float32:bfloat16/large/s0"), DEFAULT_SEED)
    observed, judgement = _judge(framework_adapter, spec, case)
    assert judgement.verdict is Verdict.VALUE
    t = round_to_dtype(case.target, "bfloat16").ravel()
    assert 31.125 in t
    # alone, with input 0: the loss is exp(31.125) * 31.125, its exp the bfloat16 neighbour below the nearest
    nearest = float(round_to_dtype(np.exp(np.array([31.125])), "bfloat16")[0])
    assert nearest > np.exp(31.125)  # so the other neighbour is the one below, a bfloat16 unit (2**37 here) down
    term = _run(framework_adapter, make_case([[0.0]], [[31.125]], log_target=True, dtype=("float32", "bfloat16")))
    got = float(np.ravel(term.value)[0])
    assert abs(got - (nearest - 2.0**37) * 31.125) < abs(got - nearest * 31.125)
    assert _behaves_as(framework_adapter, spec, case) == ["dtypes.argument_terms = own_dtype"]


def test_incompatible_shapes_raise_value_error(framework_adapter, spec):
    case = make_case(np.zeros((2, 4)), np.zeros((2, 3)), reduction="sum", log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.exception_type == "ValueError" and judgement.verdict is Verdict.PASS


# -- findings: each a real call, judged by the harness ------------------------------------------------

@pytest.mark.parametrize("dtype", [("int32", "int32"), ("bool", "bool"), ("float32", "int64")])
def test_integer_inputs_are_accepted(framework_adapter, spec, dtype):
    """Finding: integer and bool arguments are promoted (exp of an integer array is float32) where the spec
    expects TypeError."""
    case = make_case(np.zeros((2, 3)), np.ones((2, 3)), reduction="sum", log_target=True, dtype=dtype)
    observed, judgement = _judge(framework_adapter, spec, case)
    assert not observed.raised and observed.dtype == "float32"
    assert judgement.verdict is Verdict.ERROR and judgement.cause == "errors.integral_dtype"


def test_zero_dim_raises_index_error(framework_adapter, spec):
    """Finding: 0-d arguments have no axis -1; MLX raises IndexError where the spec expects ValueError."""
    case = make_case(-1.0, -0.5, reduction="sum", log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.exception_type == "IndexError" and "Invalid axis -1" in observed.exception_message
    assert judgement.verdict is Verdict.ERROR and judgement.cause == "errors.no_distribution_axis"


def test_one_hot_target_in_log_space_gives_nan(framework_adapter, spec):
    """Finding: exp(-inf) * (-inf - x) is 0 * -inf = NaN, so a one-hot target makes its row NaN."""
    case = make_case([[-1.0, -0.5]], [[-np.inf, 0.0]], reduction="none", log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert np.isnan(observed.value).all() and judgement.verdict is Verdict.NONFINITE
    assert _behaves_as(framework_adapter, spec, case) == ["pointwise.conventions.log_target_neg_inf = ieee"]


def test_grad_target_is_nan_at_a_log_target_of_minus_infinity(framework_adapter, spec):
    case = make_case([[-1.0, -0.5]], [[-np.inf, 0.0]], reduction="sum", log_target=True, dtype="float32")
    observed = _run(framework_adapter, case, "grad_target")
    assert np.isnan(observed.value[0, 0]) and np.isfinite(observed.value[0, 1])
    assert _behaves_as(framework_adapter, spec, case, "grad_target") == ["gradients.conventions.log_target_neg_inf = nan"]


def test_grad_input_ignores_a_nan_input(framework_adapter, spec):
    """Finding: d/dinput is -exp(target) * upstream whatever the input, so a NaN input gets a finite gradient."""
    case = make_case([[np.nan, -0.5]], [[-0.25, -2.0]], reduction="sum", log_target=True, dtype="float32")
    observed = _run(framework_adapter, case, "grad_input")
    np.testing.assert_allclose(observed.value, -np.exp([[-0.25, -2.0]]) * 1.25, rtol=1e-6)
    assert _behaves_as(framework_adapter, spec, case, "grad_input") == ["gradients.conventions.nan_propagation = formula"]


def test_float64_is_float32_accurate(framework_adapter, spec):
    """Finding: MLX's CPU exp is a float32 polynomial for every dtype (mlx/backend/cpu/simd/math.h), so a
    float64 loss carries float32 error: ~1e-8 relative, far outside float64's bound."""
    case = make_case(LOG_Q, LOG_P, reduction="none", log_target=True, dtype="float64")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.dtype == "float64" and judgement.verdict is Verdict.VALUE
    assert 1e-10 < judgement.max_abs_err < 1e-6


def test_float64_exp_overflows_at_float32_range(framework_adapter, spec):
    """Finding: the float32 exp saturates at 88 whatever the dtype: a float64 log target of 89 gives +inf where
    exp(89) * (89 - 0) is about 4e40, finite in float64."""
    case = make_case([[0.0]], [[89.0]], reduction="none", log_target=True, dtype="float64")
    observed, judgement = _judge(framework_adapter, spec, case)
    assert observed.value[0] == np.inf and judgement.verdict is Verdict.NONFINITE


def test_exp_flushes_results_below_float32_normal_range_to_zero(framework_adapter, spec):
    """Finding: exp(x) is 0 below x = -88 (float32's smallest normal is exp(-87.3)); the spec's terms there are
    float32 subnormals. The gradient with respect to input, -exp(target), comes back 0."""
    case = make_case([[-100.0]], [[-95.0]], reduction="none", log_target=True, dtype="float32")
    for part in ("forward", "grad_input"):
        observed, judgement = _judge(framework_adapter, spec, case, part)
        assert observed.value.ravel()[0] == 0.0 and judgement.verdict is Verdict.VALUE, part


def test_the_float64_saturation_is_the_float32_approximation(framework_adapter, spec):
    """The float64 +inf at a log target of 89 is what the spec's float32_approximation choice gives (exp is +inf
    above 88 in every dtype): the evidence of that choice, which names the behaviour (ml-explore/mlx#3047)."""
    case = make_case([[0.0]], [[89.0]], reduction="none", log_target=True, dtype="float64")
    assert _behaves_as(framework_adapter, spec, case) == ["dtypes.exp = float32_approximation"]


@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_float64_float32_error_lies_within_rounding_of_the_approximation(framework_adapter, spec, part):
    """The float64 answers with float32's error are no evidence of the approximation (they are within its bound
    of the spec's answer), but lie within rounding of it, so their rows join its defect, not one per part, dtype
    width and size of error."""
    from conformance.judge.explain import within_rounding

    case = make_case(LOG_Q, LOG_P * 3, reduction="none", log_target=True, dtype="float64")
    observed, judgement = _judge(framework_adapter, spec, case, part)
    assert judgement.verdict is Verdict.VALUE
    assert explain(case, observed, spec, part, dialect=DIALECT) is None
    assert [str(a) for a in within_rounding(case, observed, spec, part, dialect=DIALECT)] == \
        ["dtypes.exp = float32_approximation"]


def test_a_run_names_the_approximation_once_and_links_its_upstream_bug(framework_adapter, tmp_path):
    """Saturated and float32-accurate float64 rows of every part are one defect, whose cause is the approximation,
    linked to ml-explore/mlx#3047 (the profile's upstream entry); before spec version 13 they were a dozen
    `unexplained` defects, split by part, dtype width and size of error."""
    import json

    from conformance.cli import main
    from conformance.core.results import iter_results

    ids = ["fwd/none/log_target=1/4x6/float64/large/s0", "fwd/none/log_target=1/4x6/float64/softmax/s0",
           "fwd/sum/log_target=1/4x6/float64/tiny/s0"]
    out = tmp_path / "out"
    assert main(["run", "--framework", FRAMEWORK, "--out", str(out), "--no-progress", "--no-repro", "--no-cache",
                 *[a for i in ids for a in ("--only", i)]]) in (0, 1)
    divergent = [r for r in iter_results(out) if r.verdict is not Verdict.PASS and r.verdict is not Verdict.UNSUPPORTED]
    assert {r.part for r in divergent} == {"forward", "grad_input", "grad_target", "grad2_input"}
    assert {r.defect for r in divergent} == {divergent[0].defect}
    assert any(r.cause == "dtypes.exp" for r in divergent)  # the evidence: a saturated exp
    summary = json.loads((out / "summary.json").read_text())
    defect = next(d for d in summary["defects"] if d["id"] == divergent[0].defect)
    assert "https://github.com/ml-explore/mlx/issues/3047" in json.dumps(defect)


def test_grad_target_is_nan_where_exp_overflows_as_the_spec_holds_it(framework_adapter, spec):
    """Autodiff sums the product rule's two terms, exp(t) * (t - x) * g + exp(t) * g, which are -inf and +inf once
    exp(t) overflows (float16: t = 35), so the sum is NaN. Spec 6 holds a gradient's intermediates in the result
    dtype, as it does the forward's terms (reductions.operand = result_dtype): that NaN is the spec's answer. Kept
    wide (reductions.operand = float32_accumulation), the answer would be exp(t) * (t - x + 1) * g = -inf."""
    case = make_case([[235.0]], [[35.0]], reduction="none", log_target=True, dtype="float16")
    observed, judgement = _judge(framework_adapter, spec, case, "grad_target")
    assert np.isnan(observed.value[0, 0]) and judgement.verdict is Verdict.PASS
    wide = with_alternatives(spec, (Alternative("reductions.operand", "float32_accumulation"),))
    assert expected_grad(case, wide, "grad_target", DIALECT).value[0, 0] == -np.inf


# -- gradients and the reproducer --------------------------------------------------------------------

@pytest.mark.parametrize("part", ["grad_input", "grad_target", "grad2_input"])
def test_gradients_follow_the_spec_on_a_well_posed_batch(framework_adapter, spec, part):
    case = make_case(LOG_Q, LOG_P, reduction="mean", log_target=True, dtype="float32")
    observed, judgement = _judge(framework_adapter, spec, case, part)
    assert observed.shape == (2, 3) and judgement.verdict is Verdict.PASS, judgement.message


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_reproducer_lines_compute_what_the_adapter_observes(framework_adapter, layout, part):
    """The reproducer's lines, run here on the same arrays, give the adapter's observation."""
    rng = np.random.default_rng(7)
    case = make_case(np.log(rng.dirichlet(np.ones(5), size=(2, 3))), np.log(rng.dirichlet(np.ones(5), size=(2, 3))),
                     reduction="none", log_target=True, dtype="bfloat16", layout=layout)
    api = framework_adapter.api(API)
    observed = framework_adapter.run(case, api, "cpu", part)
    namespace = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
    exec(framework_adapter.repro_source(case, api, "cpu", part), namespace)
    np.testing.assert_array_equal(namespace["result"], observed.value)


def _mlx_release(adapter) -> tuple[int, ...]:
    return tuple(int(part) for part in adapter.version().split(".")[:3])


def test_constructions_make_the_arrays_the_case_asks_for(framework_adapter):
    """Explicit dtypes from a list and from mx.full, and float32 inferred from Python floats (MLX's default); a
    NumPy float64 array without a dtype is float32 in MLX (the adapter's module doc), a dtype the case does not
    ask for. Values are compared only where the release makes them exactly (see the mlx#2856 test below)."""
    import mlx.core as mx

    for case_id, dtype in (("fwd/none/log_target=1/4x6/float16,from=list/certain/s0", mx.float16),
                           ("fwd/none/log_target=1/4x6/bfloat16,from=list/certain/s0", mx.bfloat16),
                           ("fwd/none/log_target=1/4x6/float32,from=list,inferred/certain/s0", mx.float32),
                           ("fwd/none/log_target=1/scalar/float16,from=factory/certain/s0", mx.float16),
                           ("fwd/none/log_target=1/scalar/float32,from=factory,inferred/certain/s0", mx.float32),
                           ("fwd/sum/log_target=1/3x0/float64,from=list/certain/s0", mx.float64),
                           ("fwd/none/log_target=1/4x6/float16,from=numpy,inferred/certain/s0", mx.float16),
                           ("fwd/none/log_target=1/4x6/float64,from=numpy,inferred/certain/s0", mx.float32)):
        case = build_case(parse_id(case_id), DEFAULT_SEED)
        x, t = framework_adapter.build(case, "cpu")
        for array, values in ((x, case.input), (t, case.target)):
            assert array.dtype == dtype and tuple(array.shape) == values.shape, case_id
            if dtype != mx.bfloat16:
                np.testing.assert_array_equal(np.array(array).astype(np.float64), values.astype(np.float32)
                                              if case.construction == Construction("numpy", True) else values)


def test_float64_from_python_floats_went_through_float32_in_mlx_0_30_0(framework_adapter, spec):
    """mlx#2856: MLX 0.30.0 made a float64 array from Python floats through float32 (mx.array of a list, and
    mx.full of a scalar); MLX 0.32.4 makes them exactly. Seen on those two releases, so asserted there only.
    The construction case's loss is -input term by term, so the rounding is all the divergence there is."""
    import mlx.core as mx

    release = _mlx_release(framework_adapter)
    if release != (0, 30, 0) and release < (0, 32, 4):
        pytest.skip(f"MLX {framework_adapter.version()}: not checked on this release")
    listed = build_case(parse_id("fwd/none/log_target=1/4x6/float64,from=list/certain/s0"), DEFAULT_SEED)
    filled = build_case(parse_id("fwd/none/log_target=1/scalar/float64,from=factory/certain/s0"), DEFAULT_SEED)
    rounded = release == (0, 30, 0)
    for case in (listed, filled):
        x, _ = framework_adapter.build(case, "cpu")
        made = np.array(x.astype(mx.float64)).astype(np.float64)
        assert x.dtype == mx.float64
        np.testing.assert_array_equal(made, case.input.astype(np.float32).astype(np.float64) if rounded
                                      else case.input)
    verdicts = {part: _judge(framework_adapter, spec, listed, part)[1].verdict for part in ("forward", "grad_target")}
    assert verdicts == dict.fromkeys(verdicts, Verdict.VALUE if rounded else Verdict.PASS)
    # the same values from a NumPy array were exact in both releases: only the construction differs
    assert _judge(framework_adapter, spec, replace(listed, construction=Construction()))[1].verdict is Verdict.PASS
