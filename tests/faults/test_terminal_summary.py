"""What `run` and `report` print last: the undocumented causes, largest first, as pytest's short summary names its
failures, then the counts with documented against undocumented; a failed gate says which targets and causes failed
it. Text from rows reaches the terminal as plain lines, whatever escape sequences a framework's message holds."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

from conformance.cli import main
from conformance.core.defects import defect_of
from conformance.core.results import iter_results
from tests.helpers import make_result
from tests.report.test_provenance import _run_dir

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: fault-wide, input: [[-1.0, -2.0], [-0.5, -0.1]], target: [[0.25, 0.75], [0.5, 0.5]], reduction: none,
   dtype: float64}
"""
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\r\n\u202e"
API = "torch.nn.functional.kl_div"


def _no_control(text: str) -> None:
    """Nothing a terminal acts on besides the line ends: no escape, C1 control, carriage return or bidi override."""
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), repr(text)


def test_a_run_ends_with_its_undocumented_causes_then_documented_against_undocumented(tmp_path, capsys):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "out"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [r for r in iter_results(out) if r.verdict.is_divergence]
    causes = Counter((r.verdict.value, r.cause) for r in rows if not r.is_accepted)
    assert len(rows) == 2 and len(causes) >= 1
    assert lines[-1].endswith(f"{len(rows)} divergences: {len(rows)} undocumented, 0 documented, 0 known. "
                              f"Report: {out}/report.md")
    defects = Counter(r.defect for r in rows if not r.is_accepted)
    named = lines[-3 - len(defects):-3]
    assert lines[-4 - len(defects)] == f"{len(defects)} undocumented defect{'s' if len(defects) > 1 else ''} " \
                                       f"({len(rows)} rows):"
    assert [line.split(":")[0] for line in named] == [f"UNDOCUMENTED {d}" for d, _ in defects.most_common()]
    assert all(f"[{n} rows; numpy.kl_div; " in line and "reproduce: kl-conformance repro " in line
               for line, (_, n) in zip(named, defects.most_common()))
    assert lines[-3] == "accepted: 0 documented defects (0 rows); 0 known defects (0 rows)"
    assert lines[-2].startswith("unsupported: ")
    report = (out / "report.md").read_text()
    assert report.count("\n### ") == len(Counter((r.verdict.value, r.cause) for r in rows))
    listed = (out / "divergences.md").read_text()
    assert all(f"`{r.case_id}`" in listed for r in rows) and "| `the-fault` |" not in report
    assert "divergences.md" in json.loads((out / "run.json").read_text())["written"]


def _many_causes(tmp_path, causes=13):
    """A run whose undocumented causes (each a defect) have 13, 12, ... 1 rows (`causes` of them, and rows so);
    their names and APIs hold escapes."""
    rows = []
    for c in range(causes):
        for i in range(causes - c):
            row = make_result(case_id=f"c{c}-{i}", case_digest=f"{c:02d}{i:02d}" + "0" * 20, verdict="value",
                              cause=f"rule.{c}{ESCAPES if c == 0 else ''}", api=API + (ESCAPES if i == 1 else ""),
                              message=ESCAPES)
            rows.append(replace(row, defect=defect_of(row, API)))  # the two APIs are one implementation
    rows.append(make_result(case_id="documented", case_digest="f" * 24, verdict="shape", cause="shapes.output",
                            documented=True, documented_by=("dev",)))
    rows.append(make_result(case_id="fine", case_digest="e" * 24))
    return _run_dir(tmp_path / "run", rows), rows


def test_report_names_twenty_defects_largest_first_and_counts_the_rest_as_plain_lines(tmp_path, capsys):
    run, rows = _many_causes(tmp_path, 23)
    merged = tmp_path / "merged"
    assert main(["report", str(run), "--out", str(merged)]) == 0
    printed = capsys.readouterr()
    _no_control(printed.out + printed.err)
    lines = printed.out.strip().splitlines()
    undocumented = sum(range(1, 24))
    assert lines[0] == f"23 undocumented defects ({undocumented} rows):"
    named = [line for line in lines if line.startswith("UNDOCUMENTED ")]
    assert len(named) == 20 and lines[1:21] == named
    sizes = [int(re.search(r" \[(\d+) rows; ", line)[1]) for line in named]
    assert sizes == list(range(23, 3, -1))
    # the escapes are gone (a cause's text with its sequence), line breaks are spaces: what is left is plain text
    assert "(rule.031m )" in named[0] and f"[23 rows; {API}, {API}31m ; forward; float32]" in named[0]
    assert lines[21] == "and 3 more undocumented defects (6 rows): see report.md"
    assert lines[22] == "accepted: 1 documented defect (1 rows); 0 known defects (0 rows)"
    assert lines[24] == (f"merged 1 runs, {len(rows)} results; {undocumented + 1} divergences: {undocumented} "
                         f"undocumented, 1 documented, 0 known. Report: {merged}/report.md")
    summary = json.loads((merged / "summary.json").read_text())
    assert [(c["results"], c["undocumented"], c["documented"]) for c in summary["causes"]] == \
        [(n, n, 0) for n in range(23, 0, -1)] + [(1, 0, 1)]
    assert summary["causes"][-1]["cause"] == "shapes.output"
    assert [(d["rows"], d["status"]) for d in summary["defects"]] == \
        [(n, "undocumented") for n in range(23, 0, -1)] + [(1, "documented")]
    assert {r.defect for r in rows if r.verdict.is_divergence} == {d["id"] for d in summary["defects"]}


def test_a_failed_gate_names_its_targets_and_causes(tmp_path, capsys):
    run, rows = _many_causes(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "strict"), "--strict"]) == 1
    err = capsys.readouterr().err
    _no_control(err)
    undocumented = sum(range(1, 14))
    lines = err.strip().splitlines()
    assert lines[0] == (f"kl-conformance: --strict: {undocumented} divergences neither documented nor known "
                        "(2 targets, 13 defects)")
    # the targets, most first: the API with escapes holds the second row of each cause that has two, the plain
    # one the rest
    assert lines[1] == f"kl-conformance:   torch / {API} / cpu: {undocumented - 12} undocumented"
    assert lines[2] == f"kl-conformance:   torch / {API}31m  / cpu: 12 undocumented"
    assert lines[3] == f"kl-conformance:   13 undocumented defects ({undocumented} rows):"
    assert lines[4].startswith("kl-conformance:   UNDOCUMENTED torch-") and "(rule.031m ) [13 rows; " in lines[4]
    assert lines[-2] == "kl-conformance:   and 3 more undocumented defects (6 rows): see report.md"
    assert lines[-1] == f"kl-conformance: strict: {undocumented} undocumented; gate failed (--strict)"
    junit = (tmp_path / "strict" / "junit.xml").read_text()
    failure = re.search(r'<failure type="gate" message="([^"]*)">([^<]*)</failure>', junit)
    assert failure[1] == lines[0].removeprefix("kl-conformance: ")  # junit.xml's failing gate says the same
    assert "(rule.1) [12 rows; " in failure[2] and f"torch / {API} / cpu: 79 undocumented" in failure[2]
    # --fail-on-new names what is new, by target and by what it is now
    base = _run_dir(tmp_path / "base", [make_result(case_id=r.case_id, case_digest=r.case_digest, api=r.api)
                                        for r in rows])
    assert main(["report", str(run), "--out", str(tmp_path / "new"), "--baseline", str(base), "--fail-on-new"]) == 1
    err = capsys.readouterr().err
    _no_control(err)
    assert f"kl-conformance: --fail-on-new: {undocumented} divergences new or changed since the baseline" in err
    assert f"kl-conformance:   torch / {API} / cpu / forward: {undocumented - 12} failing\n" in err
    assert "kl-conformance:   value rule.1: 12 failing\n" in err


def test_a_rerun_of_a_case_with_escapes_in_its_id_prints_plain_lines(tmp_path, capsys):
    """`run --only` prints the case's details: its id comes from a case file, its message from the framework."""
    cases = tmp_path / "cases.yaml"
    cases.write_text('- {id: "fault-\\e[2J\\e]0;owned\\a", input: [[-1.0, -2.0]], target: [[0.25, 0.75]], '
                     'reduction: sum, dtype: float64}\n')
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--only", "fault-*", "--out", str(tmp_path / "out"), "--no-progress", "--no-repro"]) == 0
    printed = capsys.readouterr()
    _no_control(printed.out + printed.err)
    assert "case fault-\n" in printed.out and "UNDOCUMENTED numpy-test-" in printed.out
