"""Keras 3 through its adapter, on the backend of this environment (KERAS_BACKEND): the documentation's
examples, the reductions and dtypes it states, and each finding asserted to still occur, per backend.

Expected values come from the reference (spec: dialects.keras) and from the numbers the documentation
prints; a finding is asserted with the spec choice it takes, or with none where the spec names none.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.core.choices import Alternative, with_alternatives
from conformance.core.model import Verdict, upstream_gradient
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FRAMEWORK = "keras"
CLASS, FUNCTION = "keras.losses.KLDivergence", "keras.losses.kl_divergence"


def _case(q, t, *, reduction="none", dtype="float32", layout="contiguous"):
    """A case in Keras' space: `q` (y_pred) and `t` (y_true) are probabilities."""
    case = make_case(q, t, reduction=reduction, dtype=dtype, layout=layout)
    return replace(case, params=replace(case.params, prob_input=True))


def _expected(case, spec, part="forward"):
    return expected_forward(case, spec, "keras") if part == "forward" else expected_grad(case, spec, part, "keras")


def _run(adapter, case, api=FUNCTION, part="forward"):
    return adapter.run(case, adapter.api(api), adapter.devices()[0], part)


def _judged(adapter, spec, case, api=FUNCTION, part="forward"):
    """(verdict, the spec choices the observation behaves as, or None) of one call."""
    observed = _run(adapter, case, api, part)
    found = explain(case, observed, spec, part, dialect="keras")
    verdict = classify(_expected(case, spec, part), observed, spec).verdict
    return verdict, None if found is None else [str(a) for a in found]


def _rows(rng, shape):
    """Rows of probabilities (softmax of normal logits)."""
    e = np.exp(rng.normal(size=shape))
    return e / e.sum(-1, keepdims=True)


# -- the documentation ---------------------------------------------------------------------------------

def test_kl_divergence_docstring_example(framework_adapter, spec):
    """keras.losses.kl_divergence's example: y_true = randint(0, 2, (2, 3)) as float32, y_pred = random((2, 3))
    (float64); the loss has shape (2,) and equals np.sum(y_true * np.log(y_true / y_pred), axis=-1) with
    both clipped to [1e-7, 1]. y_true is converted to y_pred's dtype, float64, which is what the spec
    promotes to. On torch the clip's 1e-7 is a float32 tensor, so zero targets are clipped to
    1.0000000116860974e-07: the example's own equality fails there (dialects.keras.clip.epsilon_dtype)."""
    rng = np.random.default_rng(2)
    y_true = rng.integers(0, 2, size=(2, 3)).astype(np.float32)
    y_pred = rng.random(size=(2, 3))
    assert (y_true == 0).any()
    case = _case(y_pred, y_true, dtype=("float64", "float32"))
    observed = _run(framework_adapter, case)
    assert observed.shape == (2,) and observed.dtype == "float64"
    t, q = np.clip(y_true.astype(np.float64), 1e-7, 1), np.clip(y_pred, 1e-7, 1)
    documented = np.sum(t * np.log(t / q), axis=-1)
    verdict, behaves_as = _judged(framework_adapter, spec, case)
    if framework_adapter.backend == "torch":
        assert not np.allclose(observed.value, documented, rtol=1e-15, atol=0)
        assert verdict is Verdict.VALUE and behaves_as == ["dialects.keras.clip.epsilon_dtype = float32"]
    else:
        np.testing.assert_allclose(observed.value, documented, rtol=4e-16, atol=0)
        assert verdict is Verdict.PASS


@pytest.mark.parametrize("reduction, documented", [("mean", 0.458), ("sum", 0.916), ("none", [0.916, -3.08e-06])])
def test_kldivergence_class_example(framework_adapter, spec, reduction, documented):
    """The class's worked example (tf.keras.losses.KLDivergence, TensorFlow 2.15 documentation; Keras 3
    keeps the semantics and dropped the example): y_true = [[0, 1], [0, 0]], y_pred = [[0.6, 0.4],
    [0.4, 0.6]] give 0.458 by default, 0.916 with "sum", and [0.916, -3.08e-06] with none (float32).
    The second row is all clipped targets: 1e-7 * (log(1e-7 / 0.4) + log(1e-7 / 0.6))."""
    case = _case([[0.6, 0.4], [0.4, 0.6]], [[0.0, 1.0], [0.0, 0.0]], reduction=reduction)
    observed = _run(framework_adapter, case, CLASS)
    assert observed.dtype == "float32"
    np.testing.assert_allclose(observed.value, documented, rtol=5e-3)  # the three digits the page prints
    assert classify(_expected(case, spec), observed, spec).verdict is Verdict.PASS


def test_reductions_are_the_documented_words(framework_adapter, spec):
    """"sum_over_batch_size" (the default) and "mean" both divide the sum by the number of distributions,
    and None and "none" do not reduce: the adapter's mapping changes nothing. Any other string is the
    class's ValueError, which the spec expects (errors.unknown_reduction)."""
    keras = framework_adapter.keras
    rng = np.random.default_rng(3)
    q, t = _rows(rng, (2, 2, 5)), _rows(rng, (2, 2, 5))
    x, y = (keras.ops.convert_to_tensor(a, dtype="float32") for a in (q, t))
    with framework_adapter._scope(framework_adapter.devices()[0]):
        def call(reduction):
            return framework_adapter.to_numpy(keras.losses.KLDivergence(reduction=reduction)(y, x))[0]
        assert call("mean") == call("sum_over_batch_size") == call("sum") / 4  # 4 distributions, not 20 terms
        np.testing.assert_array_equal(call(None), call("none"))
    case = _case(q, t, reduction="mean")
    assert classify(_expected(case, spec), _run(framework_adapter, case, CLASS), spec).verdict is Verdict.PASS
    for reduction in ("batchmean", "avg"):
        bad = _case(q, t, reduction=reduction)
        observed = _run(framework_adapter, bad, CLASS)
        assert observed.exception_type == "ValueError" and "Invalid value for argument `reduction`" in \
            observed.exception_message
        assert classify(_expected(bad, spec), observed, spec).verdict is Verdict.PASS
    assert "no reduction" in framework_adapter.unsupported_reason(_case(q, t, reduction="sum"),
                                                                  framework_adapter.api(FUNCTION))


def test_function_keeps_float64(framework_adapter, spec):
    """Inputs arrive as the backend's float64 tensors (on JAX only because x64 is on), and kl_divergence
    computes in float64, within float64's bound."""
    rng = np.random.default_rng(4)
    case = _case(_rows(rng, (4, 6)), _rows(rng, (4, 6)), dtype="float64")
    x, _ = framework_adapter.build(case, framework_adapter.devices()[0])
    assert framework_adapter.keras.backend.standardize_dtype(x.dtype) == "float64"
    observed = _run(framework_adapter, case)
    expected = _expected(case, spec)
    assert observed.dtype == "float64" and classify(expected, observed, spec).verdict is Verdict.PASS
    assert np.max(expected.bound) < 1e-14
    for part in ("grad_input", "grad_target", "grad2_input"):
        assert classify(_expected(case, spec, part), _run(framework_adapter, case, part=part), spec).verdict \
            is Verdict.PASS, part


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_class_computes_in_floatx(framework_adapter, spec, dtype):
    """Documented ("dtype: The dtype of the loss's computations. Defaults to None, which means using
    keras.backend.floatx()"), and the spec's choice dtypes.computation = float32 (spec/profiles/keras.yaml): by
    default the class answers float32 whatever the arguments' dtype, a `dtype` divergence that the choice
    reproduces in every part (each gradient the float32 call's, cast back to its argument's dtype); with dtype=
    it computes in the arguments' own dtype."""
    keras = framework_adapter.keras
    assert keras.config.floatx() == "float32"
    rng = np.random.default_rng(5)
    case = _case(_rows(rng, (2, 4)), _rows(rng, (2, 4)), reduction="sum", dtype=dtype)
    observed = _run(framework_adapter, case, CLASS)
    assert observed.dtype == "float32"
    assert classify(_expected(case, spec), observed, spec).verdict is Verdict.DTYPE
    assert _judged(framework_adapter, spec, case, CLASS)[1] == ["dtypes.computation = float32"]
    float32 = with_alternatives(spec, (Alternative("dtypes.computation", "float32"),))
    for part in ("forward", "grad_input", "grad_target", "grad2_input"):
        observed = _run(framework_adapter, case, CLASS, part)
        assert observed.dtype == (dtype if part != "forward" else "float32"), part
        assert classify(_expected(case, float32, part), observed, float32).verdict is Verdict.PASS, part
    x, t = framework_adapter.build(case, framework_adapter.devices()[0])
    with framework_adapter._scope(framework_adapter.devices()[0]):
        own = keras.losses.KLDivergence(reduction="sum", dtype=dtype)(t, x)
    assert keras.backend.standardize_dtype(own.dtype) == dtype


def test_the_profile_documents_the_class_computing_in_floatx(framework_adapter, tmp_path):
    """A run's float64 rows of the class are documented by the profile's entry, as one documented defect whose cause
    is the spec's choice, where the function's float64 rows pass."""
    from conformance.cli import main
    from conformance.core.results import iter_results

    case_id = "fwd/none/log_target=0,input=prob/4x6/float64/softmax/s0"
    assert main(["run", "--framework", "keras", "--only", case_id, "--out", str(tmp_path / "out"), "--no-progress",
                 "--no-repro", "--no-cache"]) == 0
    rows = list(iter_results(tmp_path / "out"))
    of_class = [r for r in rows if r.api == CLASS]
    assert {r.part for r in of_class} == {"forward", "grad_input", "grad_target", "grad2_input"}
    assert any(r.verdict is Verdict.DTYPE for r in of_class)
    for row in of_class:
        assert row.verdict is Verdict.PASS or (row.documented_by == ("the-class-computes-in-floatx",)
                                               and row.cause == "dtypes.computation"), row.message
    assert len({r.defect for r in of_class if r.verdict is not Verdict.PASS}) == 1
    assert all(r.verdict is Verdict.PASS for r in rows if r.api == FUNCTION)


def test_the_profile_documents_inductors_float32_gradients_under_jit_on_torch_only(framework_adapter, tmp_path):
    """Under jit on the torch backend (torch.compile), the function's float16 gradients are computed in float32, as
    Inductor does and PyTorch's maintainers state: the profile's entry, limited to that backend, those dtypes and
    those parts, documents them. Its loss and its float64 calls it leaves alone, and on another backend it
    documents nothing."""
    from conformance.cli import main
    from conformance.core.results import iter_results

    entry = "torch-compile-keeps-half-precision-in-float32"
    ids = ["fwd/none/log_target=0,input=prob/4x6/float16/tiny/s0", "fwd/none/log_target=0,input=prob/4x6/float64/tiny/s0"]
    argv = ["run", "--framework", "keras", "--suite", "modes", "--mode", "jit", "--api", FUNCTION, "--out",
            str(tmp_path / "out"), "--no-progress", "--no-repro", "--no-cache"]
    assert main(argv + [a for i in ids for a in ("--only", i)]) in (0, 1)
    rows = list(iter_results(tmp_path / "out"))
    named = {(r.dtype, r.part) for r in rows if entry in r.documented_by}
    if not framework_adapter.devices()[0].startswith("torch:"):
        assert not named
        return
    assert named == {("float16", "grad_target")}
    assert all(r.cause == "dtypes.computation" for r in rows if entry in r.documented_by)
    # the float16 input gradient's float32 answer is within its bound since spec version 12: the bound covers a
    # subnormal upstream * target divided by the input (dialects.keras.gradients.sensitivity), which eager's
    # float16 order rounds and the float32 computation does not
    float16_input = next(r for r in rows if r.dtype == "float16" and r.part == "grad_input")
    assert float16_input.verdict is Verdict.PASS


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
@pytest.mark.parametrize("api, dtype, reduction", [(CLASS, "float32", "mean"), (CLASS, "float64", "none"),
                                                   (FUNCTION, ("bfloat16", "float32"), "none"),
                                                   (FUNCTION, "float64", "none")])
def test_reproducer_lines_compute_what_the_adapter_observes(framework_adapter, api, dtype, reduction, layout, part):
    """The reproducer's lines, run here, give the adapter's values; every layout gives the contiguous ones."""
    rng = np.random.default_rng(8)
    q, t = _rows(rng, (3, 4)), _rows(rng, (3, 4))
    case = _case(q, t, reduction=reduction, dtype=dtype, layout=layout)
    observed = _run(framework_adapter, case, api, part)
    assert observed.value is not None, observed.exception_message
    names = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
    exec(framework_adapter.repro_source(case, framework_adapter.api(api), framework_adapter.devices()[0], part), names)
    np.testing.assert_array_equal(names["result"], observed.value)
    assert names["result"].shape == observed.shape
    contiguous = _run(framework_adapter, replace(case, layout="contiguous"), api, part)
    np.testing.assert_array_equal(observed.value, contiguous.value)


def test_devices_name_the_backend(framework_adapter):
    """One column per backend in a merged report: the devices say which backend computed."""
    backend = framework_adapter.keras.backend.backend()
    assert framework_adapter.backend == backend
    assert framework_adapter.devices()[0] == f"{backend}:cpu"
    assert all(d.startswith(f"{backend}:") for d in framework_adapter.devices())
    assert backend in framework_adapter.version()
    case, api = _case([[0.5, 0.5]], [[0.25, 0.75]]), framework_adapter.api(FUNCTION)
    other = next(d for d in framework_adapter.known_devices if not d.startswith(f"{backend}:"))
    observed = framework_adapter.run(case, api, other, "forward")
    assert observed.exception_type == "ValueError" and "not one of" in observed.exception_message
    # a bare "cpu" (what `kl-conformance repro` passes when no --device is given) is this backend's CPU
    np.testing.assert_array_equal(framework_adapter.run(case, api, "cpu", "forward").value,
                                  framework_adapter.run(case, api, f"{backend}:cpu", "forward").value)
    assert framework_adapter.repro_source(case, api, "cpu", "forward") == \
        framework_adapter.repro_source(case, api, f"{backend}:cpu", "forward")


# -- findings: each departs from the spec, asserted to still occur, on the backends where it does ------------

def test_float16_ratio_overflows_to_inf(framework_adapter, spec):
    """t / q is rounded to float16 before the log: 0.5 / 1.19e-7 (q = 0 clipped to epsilon) passes 65504
    and the term is +inf where it is 7.62 (dialects.keras.ratio = ieee), on every backend."""
    case = _case([[0.0, 0.5]], [[0.5, 0.5]], dtype="float16")
    observed = _run(framework_adapter, case)
    assert np.isposinf(observed.value[0])
    assert _judged(framework_adapter, spec, case) == (Verdict.NONFINITE, ["dialects.keras.ratio = ieee"])


def test_float64_epsilon(framework_adapter, spec):
    """A zero float64 target is clipped to epsilon: 1e-7 on TensorFlow and JAX, as the spec says; on torch
    1.0000000116860974e-07, because the backend's clip makes 1e-7 a float32 tensor
    (dialects.keras.clip.epsilon_dtype = float32), a relative error of 1e-8 in that term."""
    case = _case([[0.5, 0.5]], [[0.0, 1.0]], dtype="float64")
    observed = _run(framework_adapter, case)
    epsilon = 1.0000000116860974e-07 if framework_adapter.backend == "torch" else 1e-7
    np.testing.assert_allclose(observed.value[0], epsilon * np.log(epsilon / 0.5) + np.log(2), rtol=1e-15)
    verdict, behaves_as = _judged(framework_adapter, spec, case)
    if framework_adapter.backend == "torch":
        assert verdict is Verdict.VALUE and behaves_as == ["dialects.keras.clip.epsilon_dtype = float32"]
    else:
        assert verdict is Verdict.PASS


@pytest.mark.parametrize("q, t, part", [([[0.5, 0.5]], [[1.0, 0.5]], "grad_target"),
                                        ([[1.0, 0.5]], [[0.5, 0.5]], "grad_input")])
def test_clip_derivative_at_its_ends(framework_adapter, spec, q, t, part):
    """At t = 1 or q = 1 the clip is not differentiable. TensorFlow and torch take the derivative from
    inside (1), as the spec does; JAX's clip (a max and a min) splits the tie and gives 1/2, so the
    gradient is half (dialects.keras.clip.boundary = half)."""
    case = _case(q, t, dtype="float64")
    observed = _run(framework_adapter, case, part=part)
    expected = _expected(case, spec, part)
    if framework_adapter.backend == "jax":
        np.testing.assert_allclose(observed.value[0, 0], expected.value[0, 0] / 2, rtol=1e-15)
        assert _judged(framework_adapter, spec, case, part=part) == (Verdict.VALUE,
                                                                     ["dialects.keras.clip.boundary = half"])
    else:
        assert classify(expected, observed, spec).verdict is Verdict.PASS


@pytest.mark.parametrize("q, t, part, selected", [([[np.nan, 0.5]], [[0.5, 0.5]], "grad_input", 0.0),
                                                  ([[0.5, 0.5]], [[np.nan, 0.5]], "grad_target", 0.0),
                                                  ([[0.5, 0.5]], [[np.nan, 0.5]], "grad2_input", 0.0),
                                                  ([[np.nan, 0.5]], [[0.5, 0.5]], "grad_target", np.nan),
                                                  ([[np.nan, 0.5]], [[0.5, 0.5]], "grad2_input", np.nan)])
def test_nan_argument_gets_a_zero_gradient(framework_adapter, spec, q, t, part, selected):
    """The loss is NaN, and so is the spec's gradient. JAX propagates it. TensorFlow's clip_by_value and
    torch's clamp pass the gradient only where the argument compares inside the interval, which NaN does
    not: what flows through the NaN argument's clip is 0 (dialects.keras.clip.nan = zero). What reads the NaN
    another way stays NaN: grad_target's log(t / q) at a NaN input, and d/dt of grad_input, -1 / q, which is
    formed before input's clip selects (0 / NaN)."""
    case = _case(q, t)
    observed = _run(framework_adapter, case, part=part)
    if framework_adapter.backend == "jax":
        assert np.isnan(observed.value[0, 0]) and _judged(framework_adapter, spec, case, part=part)[0] is Verdict.PASS
    else:
        np.testing.assert_equal(observed.value[0, 0], selected)
        assert _judged(framework_adapter, spec, case, part=part) == (
            (Verdict.NONFINITE, ["dialects.keras.clip.nan = zero"]) if selected == 0 else (Verdict.PASS, None))


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_empty_batch_is_not_reduced(framework_adapter, spec, reduction):
    """A (0, 5) batch: the class returns the (0,) per-distribution values unreduced (Keras' reduce_values
    returns values of shape (0,) as they are), where the spec expects a 0-d sum (0) or mean (NaN)."""
    case = _case(np.zeros((0, 5)), np.zeros((0, 5)), reduction=reduction)
    observed = _run(framework_adapter, case, CLASS)
    assert observed.shape == (0,)
    assert classify(_expected(case, spec), observed, spec).verdict is Verdict.SHAPE


def test_errors(framework_adapter, spec):
    """The spec's ValueError for 0-d arguments (no last axis) and for shapes that do not broadcast: JAX
    raises ValueError for the first and TypeError for the second; TensorFlow raises InvalidArgumentError for
    both; torch sums a 0-d tensor over dim -1 and returns a value, and raises RuntimeError for shapes."""
    backend = framework_adapter.backend
    zero_dim, bad = _case(0.5, 0.25), _case(np.full((2, 3), 0.3), np.full((2, 4), 0.25))
    raised = {"tensorflow": ("InvalidArgumentError", "InvalidArgumentError"), "jax": ("ValueError", "TypeError"),
              "torch": (None, "RuntimeError")}[backend]
    for api in (CLASS, FUNCTION):
        for case, exception_type in zip((zero_dim, bad), raised):
            observed = _run(framework_adapter, case, api)
            assert observed.exception_type == exception_type, (api, case.input.shape, observed)
            assert _expected(case, spec).error_type == "ValueError"
            verdict = classify(_expected(case, spec), observed, spec).verdict
            assert verdict is (Verdict.PASS if exception_type == "ValueError" else Verdict.ERROR)


def test_integers_are_computed_not_refused(framework_adapter, spec):
    """The spec expects TypeError for integer arguments. The class casts them to float32 and computes;
    kl_divergence raises TypeError on TensorFlow (epsilon cannot be an int32 tensor), and computes on JAX
    (float64, x64) and torch (float32)."""
    case = _case([[1, 0]], [[0, 1]], dtype="int32")
    answered = {CLASS: "float32", FUNCTION: {"tensorflow": None, "jax": "float64", "torch": "float32"}[
        framework_adapter.backend]}
    for api, dtype in answered.items():
        observed = _run(framework_adapter, case, api)
        verdict = classify(_expected(case, spec), observed, spec).verdict
        if dtype is None:
            assert observed.exception_type == "TypeError" and verdict is Verdict.PASS
        else:
            assert observed.dtype == dtype and verdict is Verdict.ERROR


def test_mixed_dtypes_take_y_preds_dtype(framework_adapter, spec):
    """kl_divergence converts y_true to y_pred's dtype: a float16 input with a float32 target computes and
    answers in float16, where the spec promotes to float32 (the class answers float32: its floatx)."""
    case = _case([[0.25, 0.75]], [[0.5, 0.5]], dtype=("float16", "float32"))
    observed = _run(framework_adapter, case)
    assert observed.dtype == "float16"
    assert classify(_expected(case, spec), observed, spec).verdict is Verdict.DTYPE


def test_float16_gradient_goes_through_the_rounded_ratio(framework_adapter, spec):
    """d/dq of t * log(t / q) is -t / q, but autodiff differentiates through the float16 ratio: with
    t = epsilon it multiplies t / r by -t / q**2, and q**2 = 1e-6 is subnormal in float16. JAX's q**2 underflows
    to 0 and the gradient is -inf: a divergence. TensorFlow and torch answer -1.19e-4 for -8.94e-5, the answer of
    (upstream * epsilon) / q in float16, where the product is a subnormal that rounds back to epsilon: since spec
    version 12 the bound covers that rounding divided by q (dialects.keras.gradients.sensitivity), and they pass."""
    case = _case([[1e-3, 0.5]], [[0.0, 0.5]], dtype="float16")
    observed = _run(framework_adapter, case, part="grad_input")
    if framework_adapter.backend == "jax":
        assert np.isneginf(observed.value[0, 0])
        assert _judged(framework_adapter, spec, case, part="grad_input")[0] is Verdict.NONFINITE
    else:
        assert abs(observed.value[0, 0] - _expected(case, spec, "grad_input").value[0, 0]) > 2e-5
        epsilon, q = np.float16(1e-7), np.float16(1e-3)
        assert observed.value[0, 0] == float(-(np.float16(0.75) * epsilon) / q)  # the float16 order's answer
        assert _judged(framework_adapter, spec, case, part="grad_input")[0] is Verdict.PASS


def test_python_floats_under_x64_beside_the_class_computing_in_floatx(framework_adapter, tmp_path):
    """JAX with x64 makes Python floats float64: the class computes in float32 (its profile's entry) and returns
    gradients cast back to float64, a `dtype` row that only the profile beside dtypes.inferred.python_float
    reproduces; it is named so, the function's rows (no profile entry) by the choice alone, one defect for both.
    On the other backends Python floats are float32, as the spec infers, and these calls pass."""
    from conformance.cli import main
    from conformance.core.results import iter_results

    case_id = "fwd/none/log_target=0,input=prob/4x6/float32,from=list,inferred/certain/s0"
    assert main(["run", "--framework", "keras", "--only", case_id, "--out", str(tmp_path / "out"), "--no-progress",
                 "--no-repro", "--no-cache"]) == 0
    rows = [r for r in iter_results(tmp_path / "out") if r.verdict is not Verdict.PASS]
    if framework_adapter.backend != "jax":
        assert not rows
        return
    gradient = next(r for r in rows if r.api == CLASS and r.part == "grad_input")
    assert gradient.verdict is Verdict.DTYPE and not gradient.documented
    assert gradient.cause == "dtypes.inferred.python_float", gradient.message
    assert "beside the profile (the-class-computes-in-floatx)" in gradient.message
    function = next(r for r in rows if r.api == FUNCTION and r.part == "grad_input")
    assert function.cause == "dtypes.inferred.python_float" and function.defect == gradient.defect
