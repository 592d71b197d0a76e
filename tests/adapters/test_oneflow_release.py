"""What differs by OneFlow release (issue 30): OneFlow 0.8.0 has no oneflow.nn.functional.kl_div (0.9.0 has it),
so that API is not run there, with the reason once (run.json apis_not_run, the report), and oneflow.nn.KLDivLoss
is judged; on a release with both, both run. tox -e tests-oneflow-old runs this file on OneFlow 0.8.0.
"""

from __future__ import annotations

import json

import numpy as np

from conformance.cli import main
from conformance.core.results import iter_results

FRAMEWORK = "oneflow"
FUNCTIONAL, LAYER = "oneflow.nn.functional.kl_div", "oneflow.nn.KLDivLoss"
ONLY = "fwd/sum/*/4x6/float32/softmax/*"


def _has_functional() -> bool:
    import oneflow.nn.functional

    return hasattr(oneflow.nn.functional, "kl_div")


def test_the_release_says_which_apis_it_has(framework_adapter):
    offer = framework_adapter.offer
    if _has_functional():
        assert offer.missing_apis == {}
    else:
        assert offer.missing_apis == {FUNCTIONAL: f"oneflow {framework_adapter.version()} has no {FUNCTIONAL}"}


def test_a_run_judges_the_apis_the_release_has(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--framework", "oneflow", "--only", ONLY, "--part", "forward", "--out", str(out),
                 "--no-progress", "--no-repro"]) == 0
    rows = list(iter_results(out))
    manifest = json.loads((out / "run.json").read_text())
    assert {r.verdict.value for r in rows if r.api == LAYER} == {"pass"}
    if _has_functional():
        assert {r.api for r in rows} == {FUNCTIONAL, LAYER} and "apis_not_run" not in manifest
        return
    why = f"oneflow {manifest['framework_version']} has no {FUNCTIONAL}"
    assert {r.api for r in rows} == {LAYER}  # no row, not a flood of errors, for the API the release lacks
    assert manifest["apis_not_run"] == {FUNCTIONAL: why}
    assert (out / "report.md").read_text().count(why) == 1
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count(why) == 1  # said once, in the line that names what was not run


def test_a_dtype_the_release_lacks_is_unsupported_not_an_error(framework_adapter, tmp_path):
    """OneFlow 0.8.0 has no oneflow.int16: its int16 cases are unsupported with that reason (no tensor can be
    made), where 0.9.0 judges them (the spec expects integer inputs to be refused)."""
    import oneflow

    lacking = {d for d in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                           "bool") if not hasattr(oneflow, d)}
    assert set(framework_adapter.offer.missing_dtypes) == lacking
    out = tmp_path / "out"
    assert main(["run", "--framework", "oneflow", "--only", "fwd/*/4x6/int16/*", "--api", LAYER, "--part", "forward",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    rows = list(iter_results(out))
    assert rows
    why = f"oneflow {oneflow.__version__} has no dtype oneflow.int16"
    if "int16" in lacking:
        assert {(r.verdict.value, r.message) for r in rows} == {("unsupported", why)}
    else:
        assert all(r.verdict.value != "unsupported" for r in rows)


def test_what_oneflow_0_8_computes_otherwise(framework_adapter, spec):
    """Findings of OneFlow 0.8.0 that 0.9.0 fixed, stated per release: KLDivLoss(reduction='batchmean') raises
    an AssertionError with no message, and the gradient with respect to the target of a reduced loss comes back
    0-d instead of the target's shape."""
    from conformance.judge.compare import classify
    from conformance.reference.forward import expected_forward
    from conformance.reference.grad import expected_grad
    from tests.helpers import make_case

    adapter, layer = framework_adapter, framework_adapter.api(LAYER)
    x, t = np.log([[0.2, 0.8], [0.5, 0.5]]), np.array([[0.3, 0.7], [0.6, 0.4]])
    batchmean = make_case(x, t, reduction="batchmean", dtype="float32")
    summed = make_case(x, t, reduction="sum", dtype="float32")
    forward = adapter.run(batchmean, layer, "cpu", "forward")
    grad_target = adapter.run(summed, layer, "cpu", "grad_target")
    if adapter.version().startswith("0.8."):
        assert (forward.exception_type, forward.exception_message) == ("AssertionError", "")
        assert grad_target.shape == ()
        assert classify(expected_grad(summed, spec, "grad_target", "canonical"), grad_target, spec).verdict.value \
            == "shape"
    else:
        assert classify(expected_forward(batchmean, spec, "canonical"), forward, spec).verdict.value == "pass"
        assert grad_target.shape == (2, 2)
