"""The gates fail closed on modes (issue 29): a mode's call that ran eagerly instead (a `fallback` row) and a mode
a run could not run here (run.json's `modes_not_run`) were not checked, so every gate asked for exits 3 on them,
on `run` and on `report`; without a gate a line says so and the exit stays 0. A fallback where the baseline
answered is lost coverage. Runs use the NumPy stand-ins with a mode of tests/faults/mode_adapters.py."""

from __future__ import annotations

import json
import re

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.mode_adapters:"
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""


def _run(tmp_path, adapter, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


def _failures(run_dir) -> int:
    head = re.search(r"<testsuites [^>]*>", (run_dir / "junit.xml").read_text()).group(0)
    return int(re.search(r'failures="(\d+)"', head).group(1))


def test_a_fallback_row_fails_every_gate_closed(tmp_path, capsys):
    """A compiled call that ran eagerly answered eager's value: no gate may pass it, and --strict does not call it
    a finding of the framework (exit 3, not 1: the mode was not checked)."""
    assert _run(tmp_path, "FallbackModeAdapter", "--mode", "traced", out="plain") == 0
    assert [r.case_id for r in iter_results(tmp_path / "plain") if r.verdict.value == "fallback"] == ["the-fault"]
    assert "1 results ran eagerly instead of in mode traced (fallback): not checked" in capsys.readouterr().err
    known = tmp_path / "known.yaml"
    known.write_text("[]\n")
    for gate, out in ((["--strict"], "strict"), (["--known", str(known)], "known"),
                      (["--baseline", str(tmp_path / "plain"), "--fail-on-new"], "same")):
        capsys.readouterr()
        assert _run(tmp_path, "FallbackModeAdapter", "--mode", "traced", *gate, out=out) == 3, gate
        err = capsys.readouterr().err
        assert f"{gate[-1] if gate[0] != '--known' else '--known'}: numpy-moded / numpy.kl_div / cpu / traced: 1 " \
               "results ran eagerly" in err
        assert "divergences neither documented nor known" not in err  # not counted as a finding of the framework
        assert _failures(tmp_path / out) >= 2  # the row and the gate: the dashboard is red too
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged"), "--strict"]) == 3
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged-plain")]) == 0
    # eager alone, the same cases: nothing ran eagerly in place of a mode, and the gate passes
    assert _run(tmp_path, "FallbackModeAdapter", "--strict", out="eager") == 0


def test_a_fallback_where_the_baseline_answered_is_lost_coverage(tmp_path, capsys):
    assert _run(tmp_path, "ModedAdapter", "--mode", "traced", out="accepted") == 0
    capsys.readouterr()
    assert _run(tmp_path, "FallbackModeAdapter", "--mode", "traced", "--baseline", str(tmp_path / "accepted"),
                "--fail-on-new", out="new") == 1
    err = capsys.readouterr().err
    assert "1 results lost" in err and "ran eagerly instead of in mode traced" in err
    diff = json.loads((tmp_path / "new" / "baseline.json").read_text())
    assert [(d["case_id"], d["mode"], d["before"][0], d["after"][0]) for d in diff["lost"]] == \
        [("the-fault", "traced", "pass", "fallback")]
    assert diff["fixed"] == [] and [d["case_id"] for d in diff["failing"]] == ["the-fault"]


def test_a_mode_not_run_here_fails_every_gate_closed(tmp_path, capsys):
    """A mode whose package is missing is not run (run.json's modes_not_run): its calls were never checked."""
    modes = ["--mode", "traced", "--mode", "absent"]
    assert _run(tmp_path, "UnusableModeAdapter", *modes, out="plain") == 0
    assert "did not run mode absent: the stand-in's compiler is not installed" in capsys.readouterr().err
    assert {r.mode for r in iter_results(tmp_path / "plain")} == {"traced"}
    assert _run(tmp_path, "UnusableModeAdapter", *modes, "--strict", out="strict") == 3
    assert "--strict: tests.faults.mode_adapters:UnusableModeAdapter did not run mode absent" in \
        capsys.readouterr().err
    assert _failures(tmp_path / "strict") == 1
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged"), "--strict"]) == 3
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert summary["runs"][0]["modes_not_run"] == {"absent": "the stand-in's compiler is not installed"}
    assert "Not run: tests.faults.mode_adapters:UnusableModeAdapter mode absent" in \
        (tmp_path / "merged" / "report.md").read_text()
    # the modes it can run, asked alone, pass the gate
    assert _run(tmp_path, "UnusableModeAdapter", "--mode", "traced", "--strict", out="usable") == 0


def test_no_known_entry_accepts_a_fallback(tmp_path, capsys):
    """An entry naming the fallback verdict is refused in one line; one matching the row by its selectors alone
    does not accept it either."""
    known = tmp_path / "known.yaml"
    known.write_text("- {id: ran-eagerly, case_id: the-fault, verdict: fallback, reason: compiles slowly}\n")
    assert _run(tmp_path, "FallbackModeAdapter", "--mode", "traced", "--known", str(known), out="refused") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "entry 1, field 'verdict'" in err[0] and "no entry accepts 'fallback'" in err[0]
    known.write_text("- {id: ran-eagerly, case_id: the-fault, mode: '*', reason: compiles slowly}\n")
    assert _run(tmp_path, "FallbackModeAdapter", "--mode", "traced", "--known", str(known), out="kept") == 3
    assert not any(r.known_by for r in iter_results(tmp_path / "kept"))
