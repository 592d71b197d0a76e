"""Paddle's static modes on real Paddle: the findings of issue 29 are flagged in the mode that has them and not
in the ones that do not, a call that ran eagerly is a fallback, and a reproducer carries the mode's wrapper.

The values are the issue's: x = [[-1, -2], [-0.5, -1.5]], t = [[0.2, 0.3], [0.4, 0.1]] with batchmean is
sum(t * (log t - x)) / 2 = -0.0649 (eager, and the spec); a program with the batch dimension None divides by
the static shape's -1 instead, +0.1299.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conformance.cli import main
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

FRAMEWORK = "paddle"
FUNCTIONAL = "paddle.nn.functional.kl_div"
X, T = [[-1.0, -2.0], [-0.5, -1.5]], [[0.2, 0.3], [0.4, 0.1]]
# sum(t * (log t - x)) / batch, written out by hand
BATCHMEAN = (0.2 * (np.log(0.2) + 1) + 0.3 * (np.log(0.3) + 2) + 0.4 * (np.log(0.4) + 0.5)
             + 0.1 * (np.log(0.1) + 1.5)) / 2
# the reproducers run in this process warn so while Paddle builds their program's backward
pytestmark = pytest.mark.filterwarnings("ignore:Tensor do not have 'place' interface:UserWarning")
CASES = f"""\
- {{id: batchmean, input: {X}, target: {T}, reduction: batchmean, dtype: float32}}
- {{id: target-grad, input: [-1.0], target: [0.3], reduction: none, dtype: float32, grad: [target]}}
"""


@pytest.fixture
def adapter(framework_adapter):
    """The loaded Paddle adapter (the session shares it)."""
    return framework_adapter


def _run(tmp_path, modes, *extra) -> dict:
    """`run` through the CLI on the issue's cases; the rows by (case, mode, part), a divergence's with the value
    it got (details.jsonl)."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "out"
    argv = ["run", "--framework", "paddle", "--api", FUNCTIONAL, "--cases", str(cases), "--suite", "none",
            "--out", str(out), *extra]
    for mode in modes:
        argv += ["--mode", mode]
    main(argv)
    rows = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["case_id"], row["mode"], row["part"]] = row
    for line in (out / "details.jsonl").read_text().splitlines():
        detail = json.loads(line)
        rows[detail["case_id"], detail["mode"], detail["part"]]["got"] = detail["got"]
    return rows


def _got(row) -> list[float]:
    return row["got"]["values"]


def test_dynamic_batch_batchmean_is_flagged_and_static_shapes_pass(tmp_path):
    rows = _run(tmp_path, ["eager", "to-static", "to-static-dynamic-batch"])
    for mode in ("eager", "to-static"):
        row = rows["batchmean", mode, "forward"]
        assert row["verdict"] == "pass", row  # the spec's value, within its bound
    dynamic = rows["batchmean", "to-static-dynamic-batch", "forward"]
    assert dynamic["verdict"] == "value" and not dynamic["documented"], dynamic
    assert _got(dynamic)[0] == pytest.approx(-2 * BATCHMEAN, rel=1e-6)  # -sum: divided by -1, not by 2


def test_target_gradient_of_zeros_under_to_static_is_a_divergence(tmp_path):
    """t = 0.3, x = -1: d/dt t * (log t - x) = log t + 1 - x = 0.796 times the upstream 0.75 is due; eager
    returns no gradient at all (an error row), the program returns zeros (a value row), never a pass."""
    rows = _run(tmp_path, ["eager", "to-static", "to-static-dynamic-batch"])
    assert rows["target-grad", "eager", "grad_target"]["verdict"] == "error"
    for mode in ("to-static", "to-static-dynamic-batch"):
        row = rows["target-grad", mode, "grad_target"]
        assert row["verdict"] == "value", row
        assert _got(row) == [0.0]


def _script_exit(adapter, spec, case, tmp_path, mode: str) -> tuple[int, str]:
    api = adapter.api(FUNCTIONAL)
    script, suffix = adapter.repro_script(case, api, "cpu", "forward", ("the case", "its mode."),
                                          expected_forward(case, spec), "a value", mode)
    path = tmp_path / f"repro_{mode}{suffix}"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    return done.returncode, done.stdout


def test_reproducer_of_the_dynamic_batch_case_shows_its_value(adapter, spec, tmp_path):
    case = make_case(X, T, reduction="batchmean", dtype="float32")
    code, out = _script_exit(adapter, spec, case, tmp_path, "to-static-dynamic-batch")
    assert code == 1, out
    assert "0.1298542" in out, out
    # the same case with static shapes conforms, so the script carries the mode
    code, out = _script_exit(adapter, spec, case, tmp_path, "to-static")
    assert code == 0, out


def test_prim_is_on_for_its_calls_only(adapter, spec):
    """A NaN target: the kl_div kernel gives NaN, the decomposition 0. Prim is back off after the call."""
    core = adapter.paddle.framework.core
    case = make_case([-1.0, -1.0], [np.nan, 0.3], reduction="none", dtype="float32")
    api = adapter.api(FUNCTIONAL)
    seen = {}
    for mode in ("to-static", "to-static-prim", "to-static"):
        seen[mode] = adapter.run(case, api, "cpu", "forward", mode).value
        assert not core._is_fwd_prim_enabled() and not core._is_bwd_prim_enabled()
    assert np.isnan(seen["to-static"][0]) and seen["to-static-prim"][0] == 0.0


def test_to_static_switched_off_is_a_fallback(adapter):
    """paddle.jit.enable_to_static(False) makes every to_static function run eagerly, silently but for a warning
    printed once: the adapter sees the switch and reports a fallback, never the eager answer."""
    case = make_case([-1.0], [0.3], reduction="none", dtype="float32")
    api = adapter.api(FUNCTIONAL)
    for mode in ("to-static", "to-static-sot"):
        adapter.paddle.jit.enable_to_static(False)
        try:
            forward = adapter.run(case, api, "cpu", "forward", mode)
            gradient = adapter.run(case, api, "cpu", "grad_input", mode)
        finally:
            adapter.paddle.jit.enable_to_static(True)
        assert forward.fallback and "enable_to_static" in forward.fallback and forward.value is None
        assert gradient.fallback
        assert adapter.run(case, api, "cpu", "forward", mode).fallback is None


def test_sot_below_its_graph_size_runs_eagerly_and_that_is_a_fallback(adapter):
    """SOT runs a graph of fewer than MIN_GRAPH_SIZE (Paddle's default 10) operators eagerly: kl_div's is
    smaller, so at the default the call is eager and reported as a fallback; the mode's threshold of 0
    compiles it."""
    case = make_case([[-1.0, -2.0], [-0.5, -1.5], [-3.0, -1.0]], [[0.2, 0.3], [0.4, 0.1], [0.5, 0.5]],
                     reduction="batchmean", dtype="float32")
    api = adapter.api(FUNCTIONAL)
    compiled = adapter.run(case, api, "cpu", "forward", "to-static-sot")
    assert compiled.fallback is None and compiled.value is not None
    adapter.sot_min_graph_size = 10
    try:
        eager = adapter.run(make_case(X, T, reduction="batchmean", dtype="float32"), api, "cpu", "forward",
                            "to-static-sot")
    finally:
        del adapter.sot_min_graph_size
    assert eager.fallback and "MIN_GRAPH_SIZE 10" in eager.fallback, eager


@pytest.mark.parametrize("mode", ["to-static", "to-static-dynamic-batch", "to-static-prim", "to-static-sot"])
@pytest.mark.parametrize("part", ["forward", "grad_target"])
def test_reproducer_lines_make_the_live_call_of_the_mode(adapter, spec, mode, part, tmp_path):
    """The reproducer's lines, run from a file, give what the run observed in `mode`, bit for bit, for both APIs
    (the module-style one builds its layer outside the program): the target gradient is one eager does not
    give, and the dynamic batch's batchmean is not eager's."""
    import runpy

    from conformance.core.model import upstream_gradient

    rng = np.random.default_rng(5)
    case = make_case(np.log(rng.dirichlet(np.ones(4), size=3)), rng.dirichlet(np.ones(4), size=3),
                     reduction="batchmean", dtype="float64", layout="transposed")
    for api in adapter.apis:
        observed = adapter.run(case, api, "cpu", part, mode)
        assert observed.value is not None, observed
        script = tmp_path / f"repro_{api.name.replace('.', '_')}.py"
        script.write_text(adapter.repro_source(case, api, "cpu", part, mode), encoding="utf-8")
        core = adapter.paddle.framework.core
        try:
            namespace = runpy.run_path(str(script), init_globals={
                "np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient})
        finally:
            core._set_prim_all_enabled(False)  # the script switches prim on for the rest of its process
        np.testing.assert_array_equal(np.asarray(namespace["result"]), observed.value, err_msg=f"{api.name}")
        source = script.read_text()
        assert ("InputSpec([None, 4]" in source) == (mode == "to-static-dynamic-batch")
        assert ("_set_prim_all_enabled(True)" in source) == (mode == "to-static-prim")
        assert ("full_graph=True" in source) == (mode != "to-static-sot")
        assert ("min_graph_size_guard(0)" in source) == (mode == "to-static-sot")


def test_a_to_static_error_is_paddles_message_not_the_transformed_traceback(adapter):
    """float16: eager has no kernel (unsupported); the program refuses the dtype with a TypeError whose message
    opens with a traceback through this machine's files. The row keeps Paddle's own line only."""
    case = make_case([-1.0], [0.3], reduction="none", dtype="float16")
    observed = adapter.run(case, adapter.api(FUNCTIONAL), "cpu", "forward", "to-static")
    assert observed.exception_type == "TypeError"
    assert observed.exception_message.startswith("(InvalidType) Check data type error for op: kldiv_loss")
    assert "transformed code" not in observed.exception_message and "File " not in observed.exception_message


def test_a_to_static_error_keeps_every_line_of_paddles_message(adapter):
    """Shapes of different ranks: the program raises the ValueError eager raises, its message on two lines (the
    enforce error, then its hint). The row once kept only the hint, "[Hint: Expected dim_x.size() == ...]",
    which names neither the problem nor the op's words for it."""
    case = make_case([[-1.0, -2.0]], [0.3, 0.7], reduction="sum", dtype="float32")
    eager = adapter.run(case, adapter.api(FUNCTIONAL), "cpu", "forward")
    observed = adapter.run(case, adapter.api(FUNCTIONAL), "cpu", "forward", "to-static")
    assert observed.exception_type == eager.exception_type == "ValueError"
    assert eager.exception_message.startswith("(InvalidArgument) Input(X) rank and Input(Target) rank should be same")
    assert observed.exception_message == eager.exception_message.rstrip()  # eager ends with a newline


def test_an_sot_error_is_its_own_message_and_the_origin_not_the_traceback(adapter):
    """SOT raises its InnerError around the ValueError of shapes of different ranks, with the origin's traceback
    through this machine's files. The row keeps SOT's own message and the origin's type and message, as eager
    gives it; it kept the whole traceback, paths included."""
    case = make_case([[-1.0, -2.0]], [0.3, 0.7], reduction="sum", dtype="float32")
    eager = adapter.run(case, adapter.api(FUNCTIONAL), "cpu", "forward")
    observed = adapter.run(case, adapter.api(FUNCTIONAL), "cpu", "forward", "to-static-sot")
    assert observed.exception_type == "InnerError"
    assert observed.exception_message == f"Call paddle_api error: kl_div; origin: ValueError: {eager.exception_message}".rstrip()


def test_an_sot_error_names_no_object_counter_of_the_process(adapter):
    """SOT's message for a layer names its object by a per-process counter ("PaddleLayerVariable(KLDivLoss,
    object_29087, target)"), so the same call's row, and its defect's title, differed from run to run."""
    case = make_case([[-1.0, -2.0]], [0.3, 0.7], reduction="sum", dtype="float32")
    module = adapter.api("paddle.nn.KLDivLoss")
    messages = {adapter.run(case, module, "cpu", "forward", "to-static-sot").exception_message for _ in range(2)}
    (message,) = messages
    assert "PaddleLayerVariable(KLDivLoss, object, target)" in message, message
    assert re.search(r"object_\d", message) is None, message
