"""Gates for CI: --strict when nothing ran, a worker that cannot restart, --fail-on-new against a
baseline, and a known-findings file that accepts findings and fails when an entry is stale."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.core.results import iter_results

CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
ADAPTERS = "tests.faults.adapters:"


def _run(tmp_path, adapter, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


def test_strict_fails_when_the_framework_did_not_run(tmp_path, capsys):
    """`run --framework torch --strict` exited 0 when torch could not even be imported."""
    assert _run(tmp_path, "UnloadableAdapter", out="plain") == 0
    assert _run(tmp_path, "UnloadableAdapter", "--strict", out="strict") == 3
    err = capsys.readouterr().err
    assert "--strict: " in err and "did not run" in err and "No module named 'numpy_kl'" in err
    assert json.loads((tmp_path / "strict" / "run.json").read_text())["status"] == "not_run"
    # and the merge of a run that did not run
    assert main(["report", str(tmp_path / "strict"), "--out", str(tmp_path / "merged")]) == 0
    assert main(["report", str(tmp_path / "strict"), "--out", str(tmp_path / "merged"), "--force",
                 "--strict"]) == 3
    assert main(["report", str(tmp_path / "absent"), "--allow-missing", "--strict", "--out",
                 str(tmp_path / "merged2")]) == 3


def test_strict_fails_when_nothing_was_judged(tmp_path, capsys):
    """No case of this file asks for a gradient: --part grad_input judges nothing."""
    assert _run(tmp_path, "NumpyAdapter", "--part", "grad_input", "--strict") == 3
    assert "produced no results" in capsys.readouterr().err


def test_a_worker_that_cannot_restart_stops_the_run_cleanly(tmp_path, monkeypatch, capsys):
    """It used to end in a traceback. Now the crash and every earlier row are kept, run.json says why
    the run stopped, the report is written; --strict fails (the crash, and the cases not judged)."""
    monkeypatch.setenv("KL_TEST_LOAD_ONCE", str(tmp_path / "loaded-once"))
    assert _run(tmp_path, "NoRestartAdapter", "--strict", out="strict") == 1
    err = capsys.readouterr().err
    assert "--strict: the tests.faults.adapters:NoRestartAdapter run stopped before its end" in err
    monkeypatch.setenv("KL_TEST_LOAD_ONCE", str(tmp_path / "loaded-once-again"))
    assert _run(tmp_path, "NoRestartAdapter") == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "could not be restarted" in err and "--resume" in err
    rows = {r.case_id: r.verdict.value for r in iter_results(tmp_path / "out")}
    assert rows == {"ok-before": "pass", "the-fault": "crash"}
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["status"] == "stopped" and "device in a bad state" in manifest["reason"]
    assert (tmp_path / "out" / "report.md").exists()


def _known(tmp_path, text, name="known.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


ACCEPT_NAN = """
- id: nan-on-the-fault
  case_id: the-*
  part: forward
  verdict: nonfinite
  reason: the stand-in returns NaN there on purpose
  link: tests/faults/adapters.py
- id: another-framework
  case_id: "*"
  framework: torch
  reason: concerns no row of these runs, so it is not checked here
"""


def test_known_findings_are_accepted_and_shown_apart(tmp_path):
    assert _run(tmp_path, "NanAdapter", "--strict", out="plain") == 1
    assert _run(tmp_path, "NanAdapter", "--strict", "--known", _known(tmp_path, ACCEPT_NAN)) == 0
    rows = {r.case_id: r for r in iter_results(tmp_path / "out")}
    assert rows["the-fault"].known_by == ("nan-on-the-fault",) and not rows["the-fault"].documented
    assert rows["ok-before"].known_by == ()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**known** (nan-on-the-fault)" in (tmp_path / "out" / "divergences.md").read_text()  # the row, tagged
    assert "1 results: 0 undocumented, 0 documented, 1 known" in report and "Example (known)" in report
    assert "## Known findings" in report
    assert "| `another-framework` | 0 | 0 | not in these results |" in report
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["known"] == 1 and summary["undocumented"] == 0
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert 'failures="0"' in junit and "known finding: nan-on-the-fault" in junit
    # the merge marks rows by the file given to `report`, not by the run's
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged"), "--strict",
                 "--known", _known(tmp_path, ACCEPT_NAN)]) == 0
    assert [r.known_by for r in iter_results(tmp_path / "merged") if r.case_id == "the-fault"] == \
        [("nan-on-the-fault",)]


def test_a_stale_known_entry_fails_and_is_named(tmp_path, capsys):
    """The finding changed (NaN became a wrong shape): the entry accepting NaN is stale, the shape is not accepted."""
    known = _known(tmp_path, ACCEPT_NAN)
    assert _run(tmp_path, "WrongShapeAdapter", "--known", known) == 1
    err = capsys.readouterr().err
    assert f"{known}: entry 1 (id 'nan-on-the-fault'): stale: matches none of the 1 results it concerns" in err
    assert "another-framework" not in err
    (row,) = [r for r in iter_results(tmp_path / "out") if r.case_id == "the-fault"]
    assert row.verdict.value == "shape" and row.known_by == ()
    assert "| `nan-on-the-fault` | 0 | 1 | **stale** |" in (tmp_path / "out" / "report.md").read_text()


def test_fail_on_new_fails_only_on_what_changed_since_the_baseline(tmp_path, capsys):
    assert _run(tmp_path, "NanAdapter", out="accepted") == 0
    baseline = str(tmp_path / "accepted")
    # the same divergence again: not new, although --strict would fail on it
    assert _run(tmp_path, "NanAdapter", "--baseline", baseline, "--fail-on-new", out="same") == 0
    assert _run(tmp_path, "NanAdapter", "--baseline", baseline, "--strict", out="same-strict") == 1
    # another verdict on the same case: changed, so it fails
    assert _run(tmp_path, "WrongShapeAdapter", "--baseline", baseline, "--fail-on-new", out="changed") == 1
    assert "1 divergences new or changed since the baseline" in capsys.readouterr().err
    diff = json.loads((tmp_path / "changed" / "baseline.json").read_text())
    assert [d["case_id"] for d in diff["failing"]] == ["the-fault"]
    # accepted by a known-findings entry: it no longer fails
    shape = _known(tmp_path, "- {id: shape, case_id: the-fault, verdict: shape, reason: tracked upstream}\n",
                   name="shape.yaml")
    assert _run(tmp_path, "WrongShapeAdapter", "--baseline", baseline, "--fail-on-new", "--known", shape,
                out="changed-known") == 0
    # the same gate on `report`
    assert main(["report", str(tmp_path / "changed"), "--out", str(tmp_path / "merged"), "--baseline", baseline,
                 "--fail-on-new"]) == 1
    assert main(["report", str(tmp_path / "same"), "--out", str(tmp_path / "merged"), "--force",
                 "--baseline", baseline, "--fail-on-new"]) == 0


@pytest.mark.parametrize("command", ["run", "report"])
def test_fail_on_new_needs_a_baseline(tmp_path, capsys, command):
    args = ["report", str(tmp_path), "--out", str(tmp_path / "m")] if command == "report" else \
        ["run", "--framework", ADAPTERS + "NumpyAdapter", "--out", str(tmp_path / "m")]
    assert main([*args, "--fail-on-new"]) == 2
    assert "--fail-on-new needs --baseline" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("adapter, code", [("NanAdapter", 0), ("WrongShapeAdapter", 1), ("NoRestartAdapter", 1)])
def test_a_runs_own_report_is_the_report_of_its_directory(tmp_path, monkeypatch, adapter, code):
    """A run makes its report's pass over the rows while it writes them (none is read back); `report` of the
    finished directory reads them back. Both must write the same files, the known findings' audit (matched,
    stale) and a run stopped short included, and the run leaves no temporary files behind."""
    monkeypatch.setenv("KL_TEST_LOAD_ONCE", str(tmp_path / "loaded-once"))
    known = _known(tmp_path, ACCEPT_NAN)
    assert _run(tmp_path, adapter, "--known", known, out="run") == code
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "again"), "--known", known]) == code
    for name in ("report.md", "report.html", "junit.xml", "summary.json"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]


def test_a_baseline_of_another_spec_is_refused_with_how_to_rebaseline(tmp_path, capsys):
    """After a spec change an accepted run answers another spec: comparing against it would call every
    changed verdict new (or hide one). `run --baseline` refuses it in one line, before anything is written."""
    assert _run(tmp_path, "NanAdapter", out="accepted") == 0
    results = tmp_path / "accepted" / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps({**row, "spec_hash": "fedcba9876543210"}) + "\n" for row in rows))
    capsys.readouterr()
    assert _run(tmp_path, "NanAdapter", "--baseline", str(tmp_path / "accepted"), "--fail-on-new", out="new") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another spec (hash fedcba9876543210)" in err and "re-baseline" in err
    assert not (tmp_path / "new").exists()


def test_junit_names_each_failed_gate_after_the_gate(tmp_path):
    """junit.xml named them "gate 1", "gate 2": a dashboard showed which failed only in the message."""
    import xml.etree.ElementTree as ET

    def gate_tests(out):
        suite = ET.parse(tmp_path / out / "junit.xml").getroot().find("testsuite[@name='kl-conformance.gate']")
        return [(t.get("name"), t.find("failure").get("message")) for t in suite.findall("testcase")]

    assert _run(tmp_path, "WrongShapeAdapter", "--strict", "--known", _known(tmp_path, ACCEPT_NAN)) == 1
    tests = gate_tests("out")
    assert [name for name, _ in tests] == ["--known: stale entry 'nan-on-the-fault'", "--strict"]
    assert "stale" in tests[0][1] and tests[1][1].startswith("--strict: 1 divergences")
    assert _run(tmp_path, "UnloadableAdapter", "--strict", out="not-run") == 3
    assert [name for name, _ in gate_tests("not-run")] == ["--strict: not everything was judged"]
