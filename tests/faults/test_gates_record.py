"""The gates read the run's own record (issue 40): a run whose rows disagree with what its run.json counts (its
results by verdict, its cases with results) is refused as damaged, exit 3 in one line, gate or not, instead of
being gated on the rows it still holds; so a selected case without rows is never "not checked". Runs use the
NumPy stand-ins of tests/faults/adapters.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64, grad: [input]}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""


def _run(tmp_path, adapter, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


def _drop_rows(run_dir: Path, case_id: str) -> int:
    """Remove every row of one case from results.jsonl (as a damaged copy would lose them); how many."""
    path = run_dir / "results.jsonl"
    rows = path.read_text().splitlines()
    kept = [line for line in rows if json.loads(line)["case_id"] != case_id]
    path.write_text("".join(line + "\n" for line in kept))
    return len(rows) - len(kept)


def _junit_failures(run_dir: Path) -> int:
    return int(re.search(r'<testsuites [^>]*failures="(\d+)"', (run_dir / "junit.xml").read_text()).group(1))


def test_a_selected_case_without_rows_fails_fail_on_new_closed(tmp_path, capsys):
    """--fail-on-new called the rows of a selected case that has no rows at all "not checked" and exited 0."""
    assert _run(tmp_path, "NumpyAdapter", out="accepted") == 0
    assert _run(tmp_path, "NumpyAdapter", out="new") == 0
    assert _drop_rows(tmp_path / "new", "ok-after") == 1
    capsys.readouterr()
    assert main(["report", str(tmp_path / "new"), "--out", str(tmp_path / "merged"), "--baseline",
                 str(tmp_path / "accepted"), "--fail-on-new"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "numpy-test run is damaged" in err[0]
    assert err[1] == "kl-conformance: gate failed: not everything was judged (--fail-on-new)"
    assert "3 cases with 4 results" in err[0] and "results.jsonl holds 3" in err[0]
    assert _junit_failures(tmp_path / "merged") >= 1  # the dashboard is red too


@pytest.mark.parametrize("gate", [["--strict"], []])
def test_a_run_json_claiming_more_cases_than_rows_is_damaged(tmp_path, capsys, gate):
    """--strict passed a run whose run.json claimed 50 cases over 2 rows. Damaged, it is refused whether a gate
    was asked for or not: its reports would show a run it is not."""
    assert _run(tmp_path, "NumpyAdapter") == 0
    out = tmp_path / "out"
    assert _drop_rows(out, "ok-before") == 2
    manifest = json.loads((out / "run.json").read_text())
    manifest["cases"] = 50
    manifest["counts"] = dict(Counter(r.verdict.value for r in iter_results(out)))  # the counts agree: 2 rows
    (out / "run.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "merged"), *gate]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 + bool(gate) and "damaged" in err[0] and "50 cases with 2 results" in err[0]
    assert err[1:] == ["kl-conformance: gate failed: not everything was judged (--strict)"][:len(gate)]


def test_a_report_of_some_modes_still_refuses_a_damaged_run(tmp_path, capsys):
    """`report --mode` dropped the runs' counts (they are of every mode), and with them the damage check: the
    one divergent row of a mode removed, `report --mode shifted --strict` passed. The runs are checked whole,
    before their rows are cut to the modes kept."""
    assert _run(tmp_path, "ModalAdapter", "--mode", "eager", "--mode", "shifted", out="modal") == 0
    path = tmp_path / "modal" / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    cut = [line for line in lines if not (json.loads(line)["case_id"] == "the-fault"
                                          and json.loads(line)["mode"] == "shifted")]
    assert len(cut) < len(lines)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "modal"), "--out", str(tmp_path / "whole"), "--strict", "--mode",
                 "shifted"]) == 1  # as it ran: its divergence in mode shifted
    path.write_text("".join(cut))
    for gate in (["--strict"], ["--baseline", str(tmp_path / "whole"), "--fail-on-new"], []):
        capsys.readouterr()
        assert main(["report", str(tmp_path / "modal"), "--out", str(tmp_path / "scoped"), "--force", "--mode",
                     "shifted", *gate]) == 3, gate
        err = capsys.readouterr().err
        assert "the numpy-test run is damaged" in err and "results.jsonl holds" in err
    assert _junit_failures(tmp_path / "scoped") >= 1


def test_an_undamaged_run_is_gated_as_before(tmp_path, capsys):
    """No false alarm: a run of some parts only (a case with none of them has no rows, and run.json counts only
    the cases with rows), the merge of its shards, and a report of one of its modes."""
    assert _run(tmp_path, "NumpyAdapter", "--part", "grad_input", out="part") == 0
    manifest = json.loads((tmp_path / "part" / "run.json").read_text())
    assert manifest["cases"] == len({r.case_id for r in iter_results(tmp_path / "part")}) == 1
    capsys.readouterr()
    assert main(["report", str(tmp_path / "part"), "--out", str(tmp_path / "part-report")]) == 0
    for k in (1, 2):
        assert _run(tmp_path, "NanAdapter", "--shard", f"{k}/2", out=f"s{k}") == 0
    assert main(["report", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "halves"),
                 "--strict"]) == 1  # the NaN finding, gated
    assert "is damaged" not in capsys.readouterr().err + (tmp_path / "halves" / "junit.xml").read_text()
    assert _run(tmp_path, "ModalAdapter", "--mode", "eager", "--mode", "shifted", out="modes") == 0
    assert main(["report", str(tmp_path / "modes"), "--out", str(tmp_path / "eager"), "--mode", "eager",
                 "--strict"]) == 0
    assert "is damaged" not in capsys.readouterr().err + (tmp_path / "halves" / "junit.xml").read_text()
