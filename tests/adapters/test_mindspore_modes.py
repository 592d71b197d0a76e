"""MindSpore's mode `jit`: calls compiled by mindspore.jit, proved compiled, and reproducers that compile too."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conformance.cli import main
from conformance.core.model import EAGER, Verdict
from conformance.core.results import iter_results
from conformance.judge.compare import classify
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_for
from tests.helpers import make_case

FRAMEWORK = "mindspore"
# float32's smallest normal is 1.18e-38: this target is subnormal, and t * (log t - x) at x = -inf is +inf
SUBNORMAL_CASE = """
- id: subnormal-target-at-neg-inf-input
  input: [-.inf, -1.0]
  target: [1.0e-39, 0.3]
  reduction: none
  dtype: float32
"""

# a target of one distribution for a batch of two: ops.kl_div's documentation says labels have logits' shape
BROADCAST_CASE = """
- id: target-broadcast-over-the-batch
  input: [[-1.0, -2.0], [-0.5, -1.5]]
  target: [0.25, 0.75]
  reduction: sum
  dtype: float32
"""


@pytest.fixture
def jit(framework_adapter):
    """The session's adapter, whose calls the tests make in mode jit."""
    return framework_adapter


def test_run_flags_the_subnormal_target_flushed_to_zero_under_jit(framework, tmp_path):
    """The issue's finding: mindspore.jit flushes a subnormal float32 target to zero, so the term at x = -inf is 0
    where PyNative (and the spec) give +inf; the run in mode jit flags it, eager passes."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(SUBNORMAL_CASE)
    assert main(["run", "--framework", "mindspore", "--mode", "eager", "--mode", "jit", "--cases", str(cases),
                 "--suite", "none", "--api", "mindspore.ops.kl_div", "--out", str(tmp_path / "out"),
                 "--no-progress", "--no-repro"]) in (0, 1)
    verdicts = {(r.mode, r.part): r for r in iter_results(tmp_path / "out") if r.api == "mindspore.ops.kl_div"}
    assert verdicts[(EAGER, "forward")].verdict is Verdict.PASS
    flushed = verdicts[("jit", "forward")]
    assert flushed.verdict is Verdict.NONFINITE and "got 0.0, expected inf" in flushed.message


def test_shapes_that_differ_are_documented_in_jit_as_in_eager(framework, tmp_path):
    """jit raises eager's ValueError ("the x shape: [2,2,] must be equal to [2,]") for shapes that differ, which
    ops.kl_div's documentation states for the API whatever compiles it (spec/profiles/mindspore.yaml,
    ops-same-shape): documented in both modes, not an undocumented defect of jit."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(BROADCAST_CASE)
    main(["run", "--framework", "mindspore", "--mode", "eager", "--mode", "jit", "--cases", str(cases),
          "--suite", "none", "--api", "mindspore.ops.kl_div", "--out", str(tmp_path / "out"), "--no-progress",
          "--no-repro"])
    rows = [r for r in iter_results(tmp_path / "out") if r.api == "mindspore.ops.kl_div"]
    assert {r.mode for r in rows} == {EAGER, "jit"}
    for row in rows:
        assert "raised ValueError" in row.message, f"got {row.message!r} [{row.mode}]"
        assert row.documented and row.documented_by == ("ops-same-shape",), \
            f"got documented={row.documented} by {row.documented_by}, expected ops-same-shape [{row.mode}]"


def test_the_reproducer_compiles_the_call_and_shows_the_flush(framework, jit, spec, tmp_path):
    """A script written in mode jit carries the mindspore.jit wrapper: it exits 1 (the finding reproduces), and
    the same case's eager script exits 0. The input gradient through the jitted loss flushes too: -t where t is
    subnormal comes back -0."""
    forward = make_case([-np.inf, -1.0], [1e-39, 0.3], dtype="float32")
    gradient = make_case([[-1.0, -2.0]], [[1e-39, 0.3]], dtype="float32")
    api = jit.api("mindspore.ops.kl_div")
    codes = {}
    for case, part, expected in ((forward, "forward", expected_forward(forward, spec)),
                                 (gradient, "grad_input", expected_for(gradient, spec, "grad_input"))):
        for mode in ("jit", EAGER):
            script, suffix = jit.repro_script(case, api, "cpu", part, ("title", "about."), expected, mode=mode)
            path = tmp_path / f"{mode}-{part}{suffix}"
            path.write_text(script)
            codes[part, mode] = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                                               text=True).returncode
    assert codes == {("forward", "jit"): 1, ("forward", EAGER): 0, ("grad_input", "jit"): 1, ("grad_input", EAGER): 0}


def test_a_jit_call_that_ran_eagerly_is_a_fallback(framework, jit, spec, monkeypatch):
    """MS_JIT=0 makes every mindspore.jit function run in PyNative, silently: the row says fallback."""
    monkeypatch.setenv("MS_JIT", "0")
    case = make_case([-1.0, -2.0], [0.25, 0.75], reduction="sum", dtype="float32")
    observed = jit.run(case, jit.api("mindspore.ops.kl_div"), "cpu", "forward", "jit")
    assert "MS_JIT=0" in observed.fallback
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.FALLBACK


def test_gradients_are_a_jitted_training_step(framework, jit, spec):
    """A gradient in jit is mindspore.jit of the function calling mindspore.grad, as MindSpore's tutorials write a
    training step: it conforms, and MindSpore compiled one graph for each API's step (a phase named after it)."""
    from mindspore.graph.api import ms_compile_cache

    case = make_case([[-1.0, -2.0], [-0.5, -1.5]], [[0.2, 0.3], [0.4, 0.1]], reduction="batchmean", dtype="float32")
    before = set(ms_compile_cache)
    for name in ("mindspore.ops.kl_div", "mindspore.nn.KLDivLoss"):
        observed = jit.run(case, jit.api(name), "cpu", "grad_input", "jit")
        assert classify(expected_for(case, spec, "grad_input"), observed, spec).verdict is Verdict.PASS, name
    assert len({p for p in set(ms_compile_cache) - before if "kl_conformance_jit" in p}) == 2


def test_mint_target_gradient_comes_back_from_the_jitted_step_where_eager_has_no_kernel(framework, jit, spec):
    """The issue's silent wrong answer: on CPU the mint APIs have no KLDiv kernel, eager ("The kernel KLDiv
    unregistered") or compiled ("Unsupported op [KLDiv] on CPU", its input gradient "[KLDivGrad]"), so the forward
    and the input gradient are unsupported; the target gradient of the jitted training step comes back, all zeros,
    where d/dt t (log t - x) = log t + 1 - x (at x = -1, t = 0.5: 0.3068...). The run flags it."""
    case = make_case([[-1.0, -2.0]], [[0.5, 0.5]], reduction="sum", dtype="float32")
    for name in ("mindspore.mint.nn.KLDivLoss", "mindspore.mint.nn.functional.kl_div"):
        api = jit.api(name)
        for part in ("forward", "grad_input"):
            observed = jit.run(case, api, "cpu", part, "jit")
            assert observed.unsupported.startswith("no kernel for this device"), (name, part, observed)
            assert "on CPU" in observed.unsupported and "Call Stack" not in observed.unsupported
        observed = jit.run(case, api, "cpu", "grad_target", "jit")
        assert observed.unsupported is None and observed.exception_type is None, (name, observed)
        assert np.array_equal(observed.value, np.zeros((1, 2))), (name, observed.value)
        verdict = classify(expected_for(case, spec, "grad_target"), observed, spec).verdict
        assert verdict is Verdict.VALUE, (name, verdict)
        assert "unregistered" in jit.run(case, api, "cpu", "grad_target").unsupported


def test_a_failed_compile_leaves_nothing_in_the_working_directory(framework, tmp_path, monkeypatch):
    """A graph that fails to compile (an unknown reduction) makes MindSpore dump rank_0/om/analyze_fail.ir, in the
    working directory unless MS_OM_PATH says where: the worker's scratch directory, removed after the run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MS_OM_PATH", raising=False)
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: unknown-reduction, input: [-1.0], target: [0.5], reduction: bogus, dtype: float32}\n")
    assert main(["run", "--framework", "mindspore", "--mode", "jit", "--cases", str(cases), "--suite", "none",
                 "--api", "mindspore.ops.kl_div", "--out", str(tmp_path / "out"), "--no-progress",
                 "--no-repro"]) in (0, 1)
    (row,) = iter_results(tmp_path / "out")
    assert row.mode == "jit" and row.verdict is Verdict.PASS  # the ValueError the spec names, raised compiling
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.yaml", "out"]


ZERO_GRADIENT_CASES = """
- id: positive-targets
  input: [[-1.0, -2.0]]
  target: [[0.5, 0.5]]
  reduction: sum
  dtype: float32
  grad: [target]
- id: a-zero-target
  input: [[-1.0, -2.0]]
  target: [[0.0, 1.0]]
  reduction: none
  dtype: float64
  grad: [target]
"""


def test_zero_target_gradients_are_one_defect_per_implementation(framework, tmp_path):
    """MindSpore gives the target no gradient, zeros: ops.kl_div and nn.KLDivLoss in eager and jit, the mint APIs
    in jit. A value row (the spec's gradient finite) and a NaN-pattern row (-inf at a zero target) are one
    behaviour, the zero-gradient pattern (gradients.parts), so one defect for each implementation, jit's rows of
    ops and nn in eager's defect."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(ZERO_GRADIENT_CASES)
    assert main(["run", "--framework", "mindspore", "--mode", "eager", "--mode", "jit", "--cases", str(cases),
                 "--suite", "none", "--part", "grad_target", "--out", str(tmp_path / "out"), "--no-progress",
                 "--no-repro"]) in (0, 1)
    rows = [r for r in iter_results(tmp_path / "out") if r.verdict.is_divergence]
    assert {r.verdict for r in rows} == {Verdict.VALUE, Verdict.NONFINITE}
    assert {r.cause for r in rows} == {"gradients.parts"}, {r.cause for r in rows}
    defects = {}
    for r in rows:
        defects.setdefault("mint" if ".mint." in r.api else "ops", set()).add(r.defect)
    assert {k: len(v) for k, v in defects.items()} == {"mint": 1, "ops": 1}, defects
    assert {r.mode for r in rows if ".mint." in r.api} == {"jit"}
