"""Every gated run says what it decided in one line, pass or fail (issue 41): what each check counted (baseline:
new, changed, fixed, lost; known: accepted, and how the entries fared; strict: the undocumented), then the
outcome; summary.json records the same decision. Runs use the NumPy stand-ins of tests/faults/adapters.py."""

from __future__ import annotations

import json

import jsonschema

from conformance import api
from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import load_schema
from tests.faults.adapters import NumpyAdapter, call_observed

ADAPTERS = "tests.faults.adapters:"
FAULTLESS = "tests.faults.test_gate_decision:FaultlessAdapter"
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64, grad: [input]}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""


class FaultlessAdapter(NumpyAdapter):
    """The honest NumPy kl_div on the fault case too (NumpyAdapter raises there): every row passes."""

    def misbehave(self, case):
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))


def _run(tmp_path, adapter, *extra, out):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", adapter if ":" in adapter else ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


def _decision(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(summary, load_schema("summary.schema.json"))
    return summary["decision"]


def _divergent(run_dir) -> int:
    return sum(1 for r in iter_results(run_dir) if r.verdict.is_divergence)


def test_a_failed_and_a_passed_baseline_gate_each_say_their_counts_in_one_line(tmp_path, capsys):
    assert _run(tmp_path, FAULTLESS, out="honest") == 0
    capsys.readouterr()
    assert _run(tmp_path, "OffByOneAdapter", "--baseline", str(tmp_path / "honest"), "--fail-on-new",
                out="broken") == 1
    new = _divergent(tmp_path / "broken")  # each a pass in the baseline: a new divergence
    assert new >= 1
    line = f"baseline: {new} new, 0 changed, 0 fixed, 0 lost; gate failed (--fail-on-new)"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"kl-conformance: {line}"
    assert _decision(tmp_path / "broken") == {
        "gates": ["--fail-on-new"], "outcome": "failed", "exit_code": 1, "line": line,
        "counts": {"baseline": {"new": new, "changed": 0, "fixed": 0, "lost": 0}},
        "failed": [l for l in _decision(tmp_path / "broken")["failed"] if l.startswith("--fail-on-new: ")]}
    # the fix, gated against the broken run: what was divergent is fixed, and the gate passes, said as loudly
    assert _run(tmp_path, FAULTLESS, "--baseline", str(tmp_path / "broken"), "--fail-on-new", out="fixed") == 0
    line = f"baseline: 0 new, 0 changed, {new} fixed, 0 lost; gate passed (--fail-on-new)"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"kl-conformance: {line}"
    decision = _decision(tmp_path / "fixed")
    assert (decision["outcome"], decision["exit_code"], decision["line"], decision["failed"]) == \
        ("passed", 0, line, [])


def test_strict_and_known_together_are_one_line(tmp_path, capsys):
    known = tmp_path / "known.yaml"
    known.write_text("- {id: off, case_id: the-fault, verdict: value, reason: tracked upstream}\n"
                     "- {id: gone, case_id: ok-after, verdict: value, reason: fixed since}\n")
    assert _run(tmp_path, "OffByOneAdapter", "--strict", "--known", str(known), out="out") == 1
    accepted = _divergent(tmp_path / "out")
    line = (f"known: {accepted} accepted; known entries: 1 matched, 0 not exercised, 1 stale; strict: 0 undocumented; "
            "gate failed (--strict, --known)")
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"kl-conformance: {line}" and "stale" in err[0]
    assert _decision(tmp_path / "out")["line"] == line
    # the API's gate decides the same, in the same words
    assert api.gate(tmp_path / "out", strict=True, known=known).line == line


def test_an_ungated_run_prints_no_decision_and_records_none_asked(tmp_path, capsys):
    assert _run(tmp_path, "OffByOneAdapter", out="out") == 0
    assert "gate" not in capsys.readouterr().err
    decision = _decision(tmp_path / "out")
    assert (decision["gates"], decision["outcome"], decision["line"], decision["counts"]) == \
        ([], "not gated", "no gate asked", {})
