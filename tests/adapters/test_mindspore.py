"""MindSpore through its adapter: the documentation's examples and the quirks found."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.model import Verdict
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

FRAMEWORK = "mindspore"




def test_mint_docs_example_reproduces_through_the_cpu_apis(framework_adapter):
    """shared/seeds/004 prints -0.225 for mint.nn.KLDivLoss; mint has no CPU kernel, so the
    same numbers go through ops.kl_div and nn.KLDivLoss, which compute the same formula."""
    case = make_case([[0.5, 0.5], [0.4, 0.6]], [[0.0, 1.0], [1.0, 0.0]], reduction="mean", dtype="float32")
    for name in ("mindspore.ops.kl_div", "mindspore.nn.KLDivLoss"):
        observed = framework_adapter.run(case, framework_adapter.api(name), "cpu", "forward")
        np.testing.assert_allclose(observed.value, -0.225, rtol=1e-6)


def test_ops_docs_example_reproduces(framework_adapter):
    """mindspore.ops.kl_div docs: logits [0.2, 0.7, 0.1], labels [0, 1, 0], 'mean' prints -0.23333333."""
    case = make_case([0.2, 0.7, 0.1], [0.0, 1.0, 0.0], reduction="mean", dtype="float32")
    observed = framework_adapter.run(case, framework_adapter.api("mindspore.ops.kl_div"), "cpu", "forward")
    np.testing.assert_allclose(observed.value, -0.23333333, rtol=1e-7)


def test_mint_says_no_kernel_on_cpu(framework_adapter, spec):
    case = make_case([[0.5, 0.5]], [[0.0, 1.0]], reduction="mean", dtype="float32")
    for name in ("mindspore.mint.nn.KLDivLoss", "mindspore.mint.nn.functional.kl_div"):
        observed = framework_adapter.run(case, framework_adapter.api(name), "cpu", "forward")
        assert observed.unsupported.startswith("no kernel for this device") and "unregistered" in observed.unsupported
        assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.UNSUPPORTED


def test_a_bfloat16_fill_on_cpu_says_no_kernel(framework_adapter, spec):
    """ops.full (the fill factory) has no bfloat16 CPU kernel: "Kernel select failed: Select CPU operator[FillV2]
    fail! Unsupported data type!". The case cannot be built on CPU, which is no kernel for this device, not an
    error of kl_div (mindspore 2.10.0)."""
    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id

    case = build_case(parse_id("fwd/sum/log_target=0/3x0/bfloat16,from=factory/certain/s0"), DEFAULT_SEED)
    for name in ("mindspore.mint.nn.KLDivLoss", "mindspore.mint.nn.functional.kl_div"):
        for part in ("forward", "grad_input"):
            observed = framework_adapter.run(case, framework_adapter.api(name), "cpu", part)
            assert observed.unsupported is not None, f"got {observed}, expected no kernel [{name}, {part}]"
            assert observed.unsupported.startswith("no kernel for this device") and "FillV2" in observed.unsupported
            if part == "forward":
                assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.UNSUPPORTED


def test_apis_without_log_target_are_unsupported_for_log_target_cases(framework_adapter):
    case = make_case([-1.0], [-0.5], reduction="sum", log_target=True, dtype="float32")
    for name in ("mindspore.ops.kl_div", "mindspore.nn.KLDivLoss"):
        assert "log_target" in framework_adapter.unsupported_reason(case, framework_adapter.api(name))


@pytest.mark.parametrize("x, t, behaves_as", [
    ([np.nan, -1.0], [0.0, 0.5], "pointwise.conventions.nan_propagation = masked_by_zero_target"),
    ([-1.0, -1.0], [-0.5, 0.5], "pointwise.conventions.target_negative = zero"),
])
def test_conventions_found_and_explained(framework_adapter, spec, x, t, behaves_as):
    case = make_case(x, t, reduction="none", dtype="float32")
    observed = framework_adapter.run(case, framework_adapter.api("mindspore.ops.kl_div"), "cpu", "forward")
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.NONFINITE
    assert [str(a) for a in explain(case, observed, spec)] == [behaves_as]


def test_mixed_dtypes_are_rejected(framework_adapter, spec):
    case = make_case([-1.0], [0.5], reduction="sum", dtype=("float16", "float32"))
    observed = framework_adapter.run(case, framework_adapter.api("mindspore.ops.kl_div"), "cpu", "forward")
    assert observed.exception_type == "TypeError"
    assert [str(a) for a in explain(case, observed, spec)] == ["dtypes.mixed = reject"]


def test_float64_reductions_vary_in_the_last_bit_between_identical_calls(framework_adapter):
    """docs/frameworks/mindspore.md (`tolerance.reduction`: behaves as `order_varies_between_calls`); the
    shard test leaves MindSpore's errors and messages out of its exact comparison because of this, so it
    must still occur."""
    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id

    case = build_case(parse_id("fwd/batchmean/log_target=0/4x6/float64/nan/s0"), DEFAULT_SEED)
    api = framework_adapter.api("mindspore.nn.KLDivLoss")
    seen = {float(framework_adapter.run(case, api, "cpu", "forward").value) for _ in range(600)}
    assert len(seen) > 1 and max(seen) - min(seen) <= 2 * np.spacing(max(seen))
