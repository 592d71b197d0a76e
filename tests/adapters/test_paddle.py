"""PaddlePaddle through its adapter: the documentation's examples and the quirks found.

The examples are those of the kl_div and KLDivLoss docstrings (Paddle 3.3.1,
https://paddlepaddle.org.cn/documentation/docs/en/api/paddle/nn/functional/kl_div_en.html and
https://paddlepaddle.org.cn/documentation/docs/en/api/paddle/nn/KLDivLoss_en.html). They print shapes
and one `allclose`, so those are what is checked; the inputs are drawn with Paddle as the examples draw them.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.model import Verdict
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.judge.profiles import DeviationLedger
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FRAMEWORK = "paddle"
FUNCTIONAL, MODULE = "paddle.nn.functional.kl_div", "paddle.nn.KLDivLoss"


def _forward(adapter, case, api=FUNCTIONAL):
    return adapter.run(case, adapter.api(api), "cpu", "forward")


def _doc_inputs(paddle, functional_example: bool):
    """The examples' draws: x (log-probabilities for kl_div, uniform in [-10, 10] for KLDivLoss), a target
    uniform in [-10, 10], then a target uniform in [0, 10] for the log_target comparison."""
    paddle.seed(2023)
    shape = (5, 20)
    if functional_example:
        x = paddle.nn.functional.log_softmax(paddle.randn(shape), axis=1).astype("float32")
    else:
        x = paddle.uniform(shape, min=-10, max=10).astype("float32")
    target = paddle.uniform(shape, min=-10, max=10).astype("float32")
    positive = paddle.uniform(shape, min=0, max=10).astype("float32")
    return x.numpy(), target.numpy(), positive.numpy(), paddle.log(positive).numpy()


@pytest.mark.parametrize("api", [FUNCTIONAL, MODULE])
@pytest.mark.parametrize("reduction, printed_shape", [
    ("batchmean", ()),  # the examples: "'batchmean' reduction, loss shape will be []" / paddle.Size([])
    ("mean", ()),
    ("sum", ()),
    ("none", (5, 20)),  # paddle.Size([5, 20])
])
def test_docs_examples_shapes_reproduce(framework_adapter, spec, api, reduction, printed_shape):
    x, target, _, _ = _doc_inputs(framework_adapter.paddle, functional_example=api == FUNCTIONAL)
    case = make_case(x, target, reduction=reduction, dtype="float32")
    observed = _forward(framework_adapter, case, api)
    assert observed.shape == printed_shape and np.shape(observed.value) == printed_shape
    assert observed.dtype == "float32" and np.isfinite(observed.value).all()


@pytest.mark.parametrize("api", [FUNCTIONAL, MODULE])
def test_docs_log_target_example_reproduces(framework_adapter, api):
    """The examples print paddle.allclose(loss(x, target), loss(x, log(target), log_target=True)) -> True."""
    x, _, positive, log_positive = _doc_inputs(framework_adapter.paddle, functional_example=api == FUNCTIONAL)
    plain = _forward(framework_adapter, make_case(x, positive, reduction="none", dtype="float32"), api)
    logged = _forward(framework_adapter, make_case(x, log_positive, reduction="none", log_target=True,
                                                   dtype="float32"), api)
    assert np.allclose(plain.value, logged.value, rtol=1e-05, atol=1e-08)  # paddle.allclose's defaults


def test_batchmean_is_0d_where_the_docstring_prose_says_n(framework_adapter, spec):
    """The prose of both docstrings: "If reduction is 'batchmean', the output loss is the shape of [N]". Paddle
    returns a 0-d tensor, as its own examples print and as the spec's reduced output is: the prose is wrong."""
    rng = np.random.default_rng(3)
    x = np.log(rng.dirichlet(np.ones(6), size=4))
    t = rng.dirichlet(np.ones(6), size=4)
    case = make_case(x, t, reduction="batchmean", dtype="float32")
    for api in (FUNCTIONAL, MODULE):
        observed = _forward(framework_adapter, case, api)
        assert observed.shape == ()
        assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.PASS
        np.testing.assert_allclose(observed.value, (t * (np.log(t) - x)).sum() / 4, rtol=1e-5)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_layouts_are_real_non_contiguous_views(framework_adapter, layout):
    case = make_case(np.full((4, 6), -1.0), np.full((4, 6), 0.5), layout=layout, dtype="float32")
    x, t = framework_adapter.build(case, "cpu")
    assert not x.is_contiguous() and not t.is_contiguous()
    np.testing.assert_array_equal(x.numpy(), case.input)


def test_unknown_reduction_silently_returns_the_unreduced_loss(framework_adapter, spec):
    """A finding: kl_div reduces in Python with if/elif and no else, so any other string is 'none'."""
    case = make_case([[-1.0, -2.0, -0.5]], [[0.5, 0.25, 0.25]], reduction="bogus", dtype="float32")
    unreduced = make_case(case.input, case.target, reduction="none", dtype="float32")
    for api in (FUNCTIONAL, MODULE):
        observed = _forward(framework_adapter, case, api)
        assert not observed.raised and observed.shape == (1, 3)
        np.testing.assert_array_equal(observed.value, _forward(framework_adapter, unreduced, api).value)
        judgement = classify(expected_forward(case, spec), observed, spec)
        assert judgement.verdict is Verdict.ERROR and judgement.cause == "errors.unknown_reduction"


@pytest.mark.parametrize("x, t, behaves_as", [
    # t * (log t - x) is NaN for t < 0 (the spec); Paddle's kernel returns 0 for t <= 0
    ([-1.0, -1.0], [-0.5, 0.5], "pointwise.conventions.target_negative = zero"),
    # a NaN input is masked by a zero target (the same t <= 0 branch)
    ([np.nan, -1.0], [0.0, 0.5], "pointwise.conventions.nan_propagation = masked_by_zero_target"),
])
def test_conventions_found_and_explained(framework_adapter, spec, x, t, behaves_as):
    case = make_case(x, t, reduction="none", dtype="float32")
    for api in (FUNCTIONAL, MODULE):
        observed = _forward(framework_adapter, case, api)
        assert observed.value[0] == 0.0
        assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.NONFINITE
        assert [str(a) for a in explain(case, observed, spec)] == [behaves_as]


def test_log_target_neg_inf_gives_nan(framework_adapter, spec):
    """exp(-inf) * (-inf - x) = 0 * -inf: NaN, where the spec says 0 (p = 0 in log space)."""
    case = make_case([-1.0, -0.5], [-np.inf, -np.inf], reduction="none", log_target=True, dtype="float32")
    observed = _forward(framework_adapter, case)
    assert np.isnan(observed.value).all()
    assert [str(a) for a in explain(case, observed, spec)] == ["pointwise.conventions.log_target_neg_inf = ieee"]


def test_no_broadcasting_and_the_profile_documents_it(framework_adapter, spec):
    case = make_case(np.full(3, -1.0), np.full((2, 3), 0.3), reduction="sum", dtype="float32")
    ledger = DeviationLedger(spec, FRAMEWORK, [api.name for api in framework_adapter.apis])
    for api in (FUNCTIONAL, MODULE):
        observed = _forward(framework_adapter, case, api)
        assert observed.exception_type == "ValueError" and "rank should be same" in observed.exception_message
        assert [str(a) for a in explain(case, observed, spec)] == ["shapes.broadcasting = none"]
        assert ledger.documented(api, observed, lambda s: expected_forward(case, s)) == ("same-shape-required",)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", ("float16", "float32")])
def test_float16_and_bfloat16_have_no_cpu_kernel(framework_adapter, spec, dtype):
    case = make_case([-1.0], [0.5], reduction="sum", dtype=dtype)
    for api in (FUNCTIONAL, MODULE):
        observed = _forward(framework_adapter, case, api)
        assert observed.unsupported.startswith("no kernel for this device") and "is not registered" in observed.unsupported
        assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.UNSUPPORTED


def test_integer_dtype_is_a_refusal_not_a_missing_kernel(framework_adapter, spec):
    """Paddle says "not registered" for int32 too, but the spec rules on integer inputs (errors.integral_dtype:
    TypeError), so the RuntimeError is judged, not hidden as unsupported."""
    case = make_case([[1.0, 2.0]], [[1.0, 0.0]], reduction="sum", dtype="int32")
    observed = _forward(framework_adapter, case)
    assert observed.unsupported is None and observed.exception_type == "RuntimeError"
    judgement = classify(expected_forward(case, spec), observed, spec)
    assert judgement.verdict is Verdict.ERROR and judgement.cause == "errors.integral_dtype"


def test_float32_with_float64_promotes_to_float64(framework_adapter, spec):
    """kl_div casts the float32 argument to float64 in Python ("ugly type promotion"), as the spec promotes."""
    case = make_case([[-1.0, -0.5]], [[0.25, 0.75]], reduction="sum", dtype=("float32", "float64"))
    observed = _forward(framework_adapter, case)
    assert observed.dtype == "float64"
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.PASS


def test_legacy_arguments_are_unsupported(framework_adapter):
    case = make_case([-1.0], [0.5], reduction="sum", size_average=False, dtype="float32")
    for api in framework_adapter.apis:
        assert "size_average" in framework_adapter.unsupported_reason(case, api)


def _grad_case():
    return make_case([[-1.2, -0.4, -2.0]], [[0.3, 0.5, 0.2]], reduction="none", dtype="float64")


def test_grad_input_is_minus_target_times_upstream(framework_adapter, spec):
    """-t * upstream, the upstream gradient being 0.75, 0.875, 1.0 (spec: gradients.upstream)."""
    case = _grad_case()
    for api in framework_adapter.apis:
        observed = framework_adapter.run(case, api, "cpu", "grad_input")
        np.testing.assert_allclose(observed.value, [[-0.3 * 0.75, -0.5 * 0.875, -0.2 * 1.0]], rtol=1e-15)
        assert classify(expected_grad(case, spec, "grad_input"), observed, spec).verdict is Verdict.PASS


def test_label_gets_no_gradient(framework_adapter, spec):
    """A finding: kldiv_loss's backward produces only the input's gradient; paddle.grad returns None for the
    label even with stop_gradient=False (spec: log(target) - input + 1)."""
    case = _grad_case()
    for api in framework_adapter.apis:
        observed = framework_adapter.run(case, api, "cpu", "grad_target")
        assert observed.exception_type == "MissingGradient" and observed.unsupported is None
        assert classify(expected_grad(case, spec, "grad_target"), observed, spec).verdict is Verdict.ERROR


def test_no_double_backward(framework_adapter, spec):
    """A finding: create_graph=True raises, so grad_input cannot be differentiated again."""
    case = _grad_case()
    for api in framework_adapter.apis:
        observed = framework_adapter.run(case, api, "cpu", "grad2_input")
        assert observed.exception_type == "RuntimeError"
        assert "kldiv_loss_grad doesn't have any grad op" in observed.exception_message
        assert classify(expected_grad(case, spec, "grad2_input"), observed, spec).verdict is Verdict.ERROR


def test_grad_input_is_zero_at_a_negative_target(framework_adapter, spec):
    """A finding: the backward kernel returns 0 where t <= 0, where the spec says NaN outside the domain (and
    torch gives -t, the formula); no choice the spec lists yet names 0."""
    case = make_case([[-1.0, -1.0]], [[-0.5, 0.5]], reduction="none", dtype="float64")
    observed = framework_adapter.run(case, framework_adapter.api(FUNCTIONAL), "cpu", "grad_input")
    np.testing.assert_array_equal(observed.value, [[0.0, -0.5 * 0.875]])
    assert classify(expected_grad(case, spec, "grad_input"), observed, spec).verdict is Verdict.NONFINITE


def test_grad_input_ignores_a_nan_input(framework_adapter, spec):
    """grad_input = -t * upstream whatever the input: a NaN input does not reach it (gradients.nan_propagation
    = formula), and at t = 0 it is 0."""
    case = make_case([[np.nan, np.nan]], [[0.5, 0.0]], reduction="none", dtype="float64")
    observed = framework_adapter.run(case, framework_adapter.api(FUNCTIONAL), "cpu", "grad_input")
    np.testing.assert_array_equal(observed.value, [[-0.5 * 0.75, 0.0]])
    assert [str(a) for a in explain(case, observed, spec, part="grad_input")] == \
        ["gradients.conventions.nan_propagation = formula"]


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("part", ["forward", "grad_input", "grad_target", "grad2_input"])
def test_reproducer_lines_compute_what_the_adapter_observes(framework_adapter, layout, part):
    """The reproducer's lines, run here on the same arrays, give the adapter's observation: the same values,
    the same missing label gradient, the same exception."""
    from conformance.core.model import upstream_gradient

    rng = np.random.default_rng(7)
    x = np.log(rng.dirichlet(np.ones(5), size=(2, 3)))
    t = rng.dirichlet(np.ones(5), size=(2, 3))
    case = make_case(x, t, reduction="none", dtype="float32", layout=layout)
    api = framework_adapter.api(MODULE)
    observed = framework_adapter.run(case, api, "cpu", part)
    namespace = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
    source = framework_adapter.repro_source(case, api, "cpu", part)
    if observed.raised and observed.exception_type != "MissingGradient":
        with pytest.raises(Exception, match="kldiv_loss_grad"):
            exec(source, namespace)
        return
    if observed.exception_type == "MissingGradient":
        with pytest.raises(Exception, match=r"\(None\) from ") as raised:
            exec(source, namespace)
        assert type(raised.value).__name__ == "MissingGradient"
        return
    exec(source, namespace)
    np.testing.assert_array_equal(namespace["result"], observed.value)


@pytest.mark.parametrize("part", ["forward", "grad_target"])
def test_reproducer_brings_a_bfloat16_result_to_numpy_by_value_not_by_its_bits(framework_adapter, part):
    """A bfloat16 tensor's .numpy() gives its raw bits (uint16): a gradient reproducer that read them compared
    16128.0 for 0.5 against the spec, and so reproduced any bfloat16 gradient. The line that makes `result`
    runs here on a real bfloat16 tensor (Paddle on CPU computes no bfloat16 kl_div gradient to take it from)."""
    import paddle

    case = make_case([[-1.0, -2.0]], [[0.25, 0.75]], reduction="sum", dtype="float32")
    source = framework_adapter.repro_source(case, framework_adapter.api(FUNCTIONAL), "cpu", part)
    (line,) = [line for line in source.splitlines() if line.startswith("result = ")]
    name = "out" if part == "forward" else "grad"
    namespace = {"np": np, "paddle": paddle, name: paddle.to_tensor([0.5, -3.0], dtype="bfloat16")}
    exec(line, namespace)
    np.testing.assert_array_equal(namespace["result"], [0.5, -3.0])


@pytest.mark.parametrize("part", ["grad_target", "grad2_input"])
def test_issue_snippet_of_a_gradient_runs_and_shows_what_paddle_gives(framework_adapter, spec, part, capsys):
    """An issue draft's snippet (Adapter.snippet) leaves the reproducer's missing-gradient check out: it must
    still be Python, and show the None for label or the double backward's exception, as the run saw them. The
    check's class once spanned two lines, and the snippet kept the second: an IndentationError in every draft."""
    case = _grad_case()
    api = framework_adapter.api(FUNCTIONAL)
    snippet = framework_adapter.snippet(case, api, "cpu", part, expected_grad(case, spec, part))
    code = compile(snippet, "snippet.py", "exec")
    if part == "grad2_input":
        with pytest.raises(RuntimeError, match="kldiv_loss_grad doesn't have any grad op"):
            exec(code, {})
        return
    exec(code, {})
    assert capsys.readouterr().out == "None\n"
