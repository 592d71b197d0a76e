"""OneFlow through its adapter: the documentation's examples and the quirks found."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.model import Verdict
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.judge.profiles import DeviationLedger
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

FRAMEWORK = "oneflow"

# shared/seeds/003: oneflow.nn.KLDivLoss docs, printed to 4 decimals
DOC_INPUT = [-0.9021705, 0.08798598, 1.04686249]
DOC_TARGET = [1.22386942, -0.89729659, 0.01615712]




@pytest.mark.parametrize("reduction, log_target, printed", [
    ("none", False, [1.3514, 0.0, -0.0836]),
    ("mean", False, 0.4226),
    ("sum", True, 5.7801),
])
def test_docs_examples_reproduce(framework_adapter, reduction, log_target, printed):
    case = make_case(DOC_INPUT, DOC_TARGET, reduction=reduction, log_target=log_target, dtype="float32")
    for api in framework_adapter.apis:
        observed = framework_adapter.run(case, api, "cpu", "forward")
        np.testing.assert_array_equal(np.round(observed.value, 4), printed)


def test_docs_negative_target_example_is_a_divergence_explained_by_the_zero_convention(framework_adapter, spec):
    case = make_case(DOC_INPUT, DOC_TARGET, reduction="none", dtype="float32")
    observed = framework_adapter.run(case, framework_adapter.apis[1], "cpu", "forward")
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.NONFINITE
    assert [str(a) for a in explain(case, observed, spec)] == ["pointwise.conventions.target_negative = zero"]


def test_nan_input_at_zero_target_is_masked(framework_adapter, spec):
    case = make_case([np.nan, -1.0], [0.0, 0.5], reduction="none", dtype="float32")
    observed = framework_adapter.run(case, framework_adapter.apis[0], "cpu", "forward")
    assert observed.value[0] == 0.0
    assert [str(a) for a in explain(case, observed, spec)] == ["pointwise.conventions.nan_propagation = masked_by_zero_target"]


def test_float16_has_no_cpu_kernel(framework_adapter, spec):
    case = make_case([-1.0], [0.5], reduction="sum", dtype="float16")
    observed = framework_adapter.run(case, framework_adapter.apis[0], "cpu", "forward")
    assert observed.unsupported and observed.unsupported.startswith("no kernel for this device")
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.UNSUPPORTED


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
def test_integral_dtype_is_a_refusal_not_a_missing_kernel(framework_adapter, spec, dtype):
    """OneFlow says "Cannot find the kernel" for an integral or bool argument as for float16 on the CPU, but the
    spec rules on integral inputs (errors.integral_dtype), so the RuntimeError is judged, not hidden as unsupported."""
    case = make_case([[1.0, 0.0]], [[1.0, 0.0]], reduction="sum", dtype=dtype)
    for api in framework_adapter.apis:
        observed = framework_adapter.run(case, api, "cpu", "forward")
        assert observed.unsupported is None and observed.exception_type == "RuntimeError", observed
        judgement = classify(expected_forward(case, spec), observed, spec)
        assert judgement.verdict is Verdict.ERROR and judgement.cause == "errors.integral_dtype"


def test_no_broadcasting(framework_adapter, spec):
    case = make_case(np.full(3, -1.0), np.full((2, 3), 0.3), reduction="sum", dtype="float32")
    observed = framework_adapter.run(case, framework_adapter.apis[0], "cpu", "forward")
    assert observed.raised and observed.exception_type == "RuntimeError"
    # the spec's choice expects a ValueError: a RuntimeError is not that choice, so no choice explains it ...
    assert explain(case, observed, spec) is None
    # ... and OneFlow's profile documents it, with the exception OneFlow raises
    ledger = DeviationLedger(spec, "oneflow", [a.name for a in framework_adapter.apis])
    assert ledger.documented(framework_adapter.apis[0].name, observed, lambda s: expected_forward(case, s)) == \
        ("same-shape-required",)


def test_legacy_arguments_are_unsupported(framework_adapter):
    case = make_case([-1.0], [0.5], reduction="sum", size_average=False, dtype="float32")
    for api in framework_adapter.apis:
        assert "size_average" in framework_adapter.unsupported_reason(case, api)


def test_float64_kernel_is_float32_accurate(framework_adapter, spec):
    """A finding, pinned: OneFlow 0.9.0 evaluates kl_div's log at float32 precision for float64."""
    case = make_case([-1.0, -2.3, -0.7], [0.3, 0.1234567, 0.6], reduction="none", dtype="float64")
    observed = framework_adapter.run(case, framework_adapter.apis[0], "cpu", "forward")
    judgement = classify(expected_forward(case, spec), observed, spec)
    assert judgement.verdict is Verdict.VALUE and 1e-10 < judgement.max_abs_err < 1e-6
