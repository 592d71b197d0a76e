"""`run` with a selection by meaning: it runs only those cases, records the selection in run.json (so that
--resume refuses another one), and counts as narrowed for the gates (a known entry about cases it left out is
not called stale)."""

from __future__ import annotations

import json

from conformance.cli import main
from conformance.core.results import iter_results

CASES = """
- {id: legacy-mean, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, size_average: true}
- {id: plain-sum, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: unreduced, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
NUMPY = "tests.faults.adapters:NumpyAdapter"


def _run(tmp_path, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", NUMPY, "--cases", str(cases), "--suite", "none", "--out", str(tmp_path / out),
                 "--no-progress", "--no-repro", *extra])


def test_run_judges_only_the_cases_that_reduce_that_way(tmp_path):
    assert _run(tmp_path, "--reduction", "mean", "--reduction", "none") == 0
    assert {r.case_id for r in iter_results(tmp_path / "out")} == {"legacy-mean", "unreduced"}
    selection = json.loads((tmp_path / "out" / "run.json").read_text())["selection"]
    assert selection["reduction"] == ["mean", "none"] and selection["dtype"] == []
    assert "--reduction" in selection["narrowed_by"]


def test_resume_refuses_another_selection_by_meaning(tmp_path, capsys):
    assert _run(tmp_path, "--dtype", "float64") == 0
    capsys.readouterr()
    assert _run(tmp_path, "--dtype", "float32", "--resume") == 2
    err = capsys.readouterr().err
    assert "--dtype ['float64']" in err and "--resume" in err


def test_a_known_entry_outside_the_selection_is_not_stale(tmp_path, capsys):
    known = tmp_path / "known.yaml"
    known.write_text("- {id: accepted, case_id: plain-sum, verdict: value, reason: tracked upstream}\n")
    assert _run(tmp_path, "--known", str(known), out="whole") == 1  # nothing diverges: the entry is stale
    assert "stale" in capsys.readouterr().err
    assert _run(tmp_path, "--known", str(known), "--family", "user", "--reduction", "none", out="part") == 0


def test_run_and_selftest_say_which_options_left_no_case(tmp_path, capsys):
    """A selection by meaning that leaves nothing is bad input on both commands: one line naming the options,
    exit 2, nothing written."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    common = ["--framework", NUMPY, "--cases", str(cases), "--suite", "none", "--reduction", "batchmean"]
    for command in (["run", *common, "--no-progress", "--no-repro", "--out", str(tmp_path / "run")],
                    ["selftest", *common, "--out", str(tmp_path / "selftest")]):
        capsys.readouterr()
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "no case matches the selection" in err and "--reduction" in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "selftest").exists()
