"""The public Python API against a real framework: its rows and its gate decision are those of `kl-conformance
run` with the same selection (runs only with --framework torch)."""

from __future__ import annotations

import pytest

import conformance.api as kl
from conformance.cli import main
from conformance.core.results import iter_results

SELECTION = ("--family", "zero_prob", "--family", "softmax", "--dtype", "float32", "--reduction", "sum")


@pytest.fixture
def torch_only(request):
    names = request.config.getoption("--framework")
    if "torch" not in names:
        pytest.skip("needs --framework torch")
    if "torch" in request.config.unavailable_frameworks:
        pytest.skip("torch is not installed here (why: the run's last line)")


def test_the_api_run_and_gate_are_the_cli_run_and_gate(torch_only, tmp_path):
    code = main(["run", "--framework", "torch", *SELECTION, "--out", str(tmp_path / "cli"), "--no-progress",
                 "--no-repro", "--strict"])
    outcome = kl.run("torch", selection=kl.Selection(family=("zero_prob", "softmax"), dtype=("float32",),
                                                     reduction=("sum",)))
    key = lambda r: (r.case_id, r.api, r.device, r.part, r.verdict, r.cause, r.documented)
    assert sorted(map(key, outcome.rows)) == sorted(map(key, iter_results(tmp_path / "cli")))
    assert outcome.undocumented, "torch's NaN at a zero target beside an infinite input is undocumented"
    assert kl.gate(outcome, strict=True).code == code == kl.EXIT_GATE
    assert kl.gate(outcome).code == kl.EXIT_OK
