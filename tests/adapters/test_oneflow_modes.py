"""OneFlow's mode `graph`: the call compiled as a oneflow.nn.Graph, forward only, and reproducers that build it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.cli import main
from conformance.core.model import Verdict
from conformance.core.results import iter_results
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

FRAMEWORK = "oneflow"
CASES = """
- {id: plain, input: [[-1.0, -2.0], [-0.5, -1.5]], target: [[0.2, 0.3], [0.4, 0.1]], reduction: batchmean,
   dtype: float32, grad: [input, target]}
- {id: elementwise, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float32}
"""


@pytest.fixture
def graph(framework_adapter):
    """The session's adapter, whose calls the tests make in mode graph."""
    return framework_adapter


def test_run_in_mode_graph_compiles_forward_and_has_no_gradients(framework, tmp_path):
    """nn.Graph runs on this CPU: the graph's forward rows conform, its gradient parts are unsupported with the
    reason, and run.json lists no mode it could not run."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    assert main(["run", "--framework", "oneflow", "--mode", "graph", "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / "out"), "--no-progress", "--no-repro"]) in (0, 1)
    rows = [r for r in iter_results(tmp_path / "out")]
    assert {r.mode for r in rows} == {"graph"}
    forward = [r for r in rows if r.part == "forward"]
    assert len(forward) == 4 and all(r.verdict is Verdict.PASS for r in forward)
    gradients = [r for r in rows if r.part != "forward"]
    assert gradients and all(r.verdict is Verdict.UNSUPPORTED and "nn.Graph" in r.message for r in gradients)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["modes"] == ["graph"] and "modes_not_run" not in run


def test_the_reproducer_builds_the_graph(framework, graph, spec, tmp_path):
    """A script written in mode graph makes the call in a oneflow.nn.Graph, and runs to the spec's answer."""
    case = make_case([[-1.0, -2.0]], [[0.25, 0.75]], reduction="sum", dtype="float32")
    for name in ("oneflow.nn.functional.kl_div", "oneflow.nn.KLDivLoss"):
        script, suffix = graph.repro_script(case, graph.api(name), "cpu", "forward", ("title", "about."),
                                            expected_forward(case, spec), mode="graph")
        assert "(flow.nn.Graph)" in script and "KLGraph()(x, t)" in script
        path = tmp_path / f"repro{suffix}"
        path.write_text(script)
        ran = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stdout + ran.stderr


def test_a_graph_that_failed_to_build_is_built_again(framework, graph):
    """OneFlow cannot build a graph whose first build failed ("job name ... already exist"): a second case of the
    same signature (float16 input, float64 target, which OneFlow refuses) gets the framework's own error again."""
    case = make_case([[-1.0, -2.0]], [[0.25, 0.75]], dtype=("float16", "float64"))
    api = graph.api("oneflow.nn.functional.kl_div")
    first, again = (graph.run(case, api, "cpu", "forward", "graph") for _ in range(2))
    assert first.exception_type == again.exception_type == "RuntimeError"
    assert first.exception_message == again.exception_message and "already exist" not in again.exception_message
