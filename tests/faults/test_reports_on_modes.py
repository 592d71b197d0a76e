"""Reports, merges, known files and profile deviations key on the mode (issue 29): every report names a mode that
is not eager (an eager-only report reads as before modes existed), runs of one framework in two modes merge,
`report --mode` scopes a merge, and a known entry or a profile deviation without `mode:` speaks about eager only.
Runs use the NumPy stand-ins with a mode of tests/faults/mode_adapters.py."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.mode_adapters:"
CASES = """
- {id: ok, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: off-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ieee-1, input: [[-.inf, -2.0]], target: [[0.0, 1.0]], reduction: none, dtype: float64}
"""
PROFILE = """
framework: numpy-moded
deviations:
  - id: ieee-target-zero
    apis: [numpy.kl_div]
    set: {pointwise.conventions.target_zero: ieee}
    rationale: the planted IEEE convention, documented
    basis: docs
    reference: https://example.org/planted
"""


def _run(tmp_path, *extra, out="out", adapter="PlantedInModeAdapter", code=0):
    (tmp_path / "cases.yaml").write_text(CASES)
    assert main(["run", "--framework", ADAPTERS + adapter, "--cases", str(tmp_path / "cases.yaml"), "--suite",
                 "none", "--out", str(tmp_path / out), "--no-progress", *extra]) == code
    return tmp_path / out


def test_every_report_names_a_mode_that_is_not_eager(tmp_path):
    out = _run(tmp_path, "--mode", "eager", "--mode", "traced")
    report = (out / "report.md").read_text()
    assert "| numpy-moded / numpy.kl_div / cpu / traced |" in report
    assert "| numpy-moded / numpy.kl_div / cpu |" in report  # eager's row as before
    assert "Modes: eager (3 results), traced (3 results)." in report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["targets"]["numpy-moded/numpy.kl_div/cpu/traced/forward"]["mode"] == "traced"
    assert summary["targets"]["numpy-moded/numpy.kl_div/cpu/forward"]["mode"] == "eager"
    assert summary["modes"] == {"eager": 3, "traced": 3}
    junit = (out / "junit.xml").read_text()
    assert 'classname="numpy-moded.numpy.kl_div.cpu.traced.forward" name="off-1"' in junit
    assert 'classname="numpy-moded.numpy.kl_div.cpu.forward" name="off-1"' in junit
    divergences = (out / "divergences.md").read_text()
    assert "| `off-1` | numpy.kl_div / cpu / traced |" in divergences
    assert "--device=cpu --mode=traced --part=forward" in divergences
    assert "--device=cpu --part=forward" in divergences  # eager's command takes no --mode
    assert "<select data-key='mode'><option value=''>all</option><option value='eager'>eager</option>" \
           "<option value='traced'>traced</option></select>" in (out / "report.html").read_text()
    drafts = sorted(p.read_text() for p in (out / "issues").iterdir())
    # the mode answers as eager does on the same calls: each behaviour is one defect, shown in both modes
    assert drafts and all("- modes: eager, traced" in d for d in drafts)
    # eager alone reads as before modes existed
    eager = _run(tmp_path, out="eager")
    assert "eager" not in (eager / "report.md").read_text()
    assert "data-key='mode'" not in (eager / "report.html").read_text()
    assert set(json.loads((eager / "summary.json").read_text())["targets"]) == \
        {"numpy-moded/numpy.kl_div/cpu/forward"}
    assert "eager" not in (eager / "junit.xml").read_text()


def test_runs_of_one_framework_in_two_modes_merge_and_report_scopes_to_a_mode(tmp_path, capsys):
    eager, traced = _run(tmp_path, out="eager"), _run(tmp_path, "--mode", "traced", out="traced")
    assert main(["report", str(eager), str(traced), "--out", str(tmp_path / "both")]) == 0
    assert {r.mode for r in iter_results(tmp_path / "both")} == {"eager", "traced"}
    capsys.readouterr()
    assert main(["report", str(eager), str(traced), "--out", str(tmp_path / "scoped"), "--mode", "traced"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "left out" in line] == \
        ["kl-conformance: --mode traced: 3 results of the modes eager left out of this report"]
    assert {r.mode for r in iter_results(tmp_path / "scoped")} == {"traced"}
    assert "| numpy-moded / numpy.kl_div / cpu |" not in (tmp_path / "scoped" / "report.md").read_text()
    # a baseline's rows of the mode left out were not checked, never lost
    assert main(["report", str(eager), str(traced), "--out", str(tmp_path / "vs"), "--mode", "traced",
                 "--baseline", str(tmp_path / "both"), "--fail-on-new"]) == 0
    diff = json.loads((tmp_path / "vs" / "baseline.json").read_text())
    assert diff["lost"] == [] and diff["not_checked"] == 3 and diff["unchanged"] == 3
    capsys.readouterr()
    assert main(["report", str(eager), "--out", str(tmp_path / "none"), "--mode", "traced"]) == 2
    assert "no run here was made in mode 'traced'" in capsys.readouterr().err


@pytest.mark.parametrize("mode, accepted", [(None, {"eager"}), ("traced", {"traced"}), ("'*'", {"eager", "traced"})])
def test_a_known_entry_without_mode_accepts_eager_rows_only(tmp_path, mode, accepted):
    known = tmp_path / "known.yaml"
    known.write_text("- {id: off, case_id: 'off-*', reason: pending" + (f", mode: {mode}" if mode else "") + "}\n")
    out = _run(tmp_path, "--mode", "eager", "--mode", "traced", "--known", str(known))
    assert {r.mode for r in iter_results(out) if r.known_by} == accepted


def test_a_known_entry_of_a_mode_not_in_the_report_is_not_stale(tmp_path, capsys):
    known = tmp_path / "known.yaml"
    known.write_text("- {id: off, case_id: 'off-*', reason: pending, mode: traced}\n")
    both = _run(tmp_path, "--mode", "eager", "--mode", "traced")
    assert main(["report", str(both), "--out", str(tmp_path / "eager"), "--mode", "eager", "--known",
                 str(known)]) == 0
    assert "| `off` | 0 | 0 | not in these results |" in (tmp_path / "eager" / "report.md").read_text()
    # and where it runs but matches nothing, it is stale as ever
    known.write_text("- {id: off, case_id: 'ok', reason: pending, mode: traced}\n")
    capsys.readouterr()
    assert main(["report", str(both), "--out", str(tmp_path / "stale"), "--known", str(known)]) == 1
    assert "stale" in capsys.readouterr().err


@pytest.mark.parametrize("mode, documented", [(None, {"eager"}), ("traced", {"traced"}),
                                              ("'*'", {"eager", "traced"})])
def test_a_profile_deviation_without_mode_documents_eager_rows_only(tmp_path, mode, documented):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "numpy-moded.yaml").write_text(PROFILE + (f"    mode: {mode}\n" if mode else ""))
    out = _run(tmp_path, "--mode", "eager", "--mode", "traced", "--profiles", str(profiles))
    ieee = [r for r in iter_results(out) if r.case_id == "ieee-1"]
    assert {r.mode for r in ieee} == {"eager", "traced"} and all(r.verdict.is_divergence for r in ieee)
    assert {r.mode for r in ieee if r.documented} == documented
