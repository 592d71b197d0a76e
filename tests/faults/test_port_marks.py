"""Shared or own, per row: a port judged `--like` the NumPy stand-in with `--like-run` marks each divergent row,
junit.xml's testcase, report.md, report.html, the drafts, summary.json and the gate (`--fail-on-own`) by it.

The port below copies the stand-in (so the stand-in's findings are shared: float32 results come back as float64)
and has one behaviour of its own (a float64 case's loss is doubled), so which rows are own follows from the case
ids alone.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import load_schema
from tests.faults.test_ports import FRAMEWORK, NumpyPort

HERE = "tests.faults.test_port_marks:"
ONLY = ["--only", "fwd/*/*/*/float64/*", "--only", "fwd/sum/*/*/float32/*", "--samples", "2"]
PROFILE = "framework: numpy-test\ndeviations: []\n"


class OwnFloat64Port(NumpyPort):
    """The stand-in's copy with a bug of its own: the loss of a float64 case is twice the spec's."""

    def compute(self, case):
        value = super().compute(case)
        return value * 2 if case.id.split("/")[4] == "float64" else value


def _run(tmp_path, framework, out, *extra):
    return main(["run", "--framework", framework, *ONLY, "--out", str(tmp_path / out), "--no-progress",
                 "--no-repro", "--no-cache", "--profiles", str(tmp_path / "profiles"), *extra])


def _port(tmp_path, out, *extra, framework=HERE + "OwnFloat64Port"):
    return _run(tmp_path, framework, out, "--like", "numpy-test", "--like-run", str(tmp_path / "framework"), *extra)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The stand-in's recorded run and the port's run judged like it, made once for the module."""
    tmp_path = tmp_path_factory.mktemp("marks")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "numpy-test.yaml").write_text(PROFILE)
    assert _run(tmp_path, FRAMEWORK, "framework") == 0
    assert _port(tmp_path, "port") == 0
    return tmp_path


def _divergent(run_dir):
    return [r for r in iter_results(run_dir) if r.verdict.is_divergence]


def test_each_divergent_row_says_shared_or_own(runs):
    port = _divergent(runs / "port")
    own = [r for r in port if r.like == "own"]
    shared = [r for r in port if r.like == "shared"]
    assert len(own) + len(shared) == len(port) and len(own) > 50 and shared
    assert all(r.case_id.split("/")[4] == "float64" for r in own)  # only the port's bug is its own
    assert all(r.like == "shared" for r in port if r.case_id.split("/")[4] == "float32")
    assert all(r.like is None for r in iter_results(runs / "port") if not r.verdict.is_divergence)
    assert all(r.like is None for r in iter_results(runs / "framework"))
    schema = load_schema("results.schema.json")
    for line in (runs / "port" / "results.jsonl").read_text().splitlines()[:200]:
        jsonschema.validate(json.loads(line), schema)


def test_junit_carries_each_mark_as_a_property(runs):
    marks = {(r.case_id, r.part): r.like for r in iter_results(runs / "port")}
    seen = 0
    for case in ET.parse(runs / "port" / "junit.xml").iter("testcase"):
        if case.get("classname", "").startswith("kl-conformance.gate"):
            continue
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        part = case.get("classname").rsplit(".", 1)[1]
        assert props.get("like") == marks[(case.get("name"), part)]
        seen += "like" in props
    assert seen == len(_divergent(runs / "port"))


def test_report_lists_every_own_row_and_html_filters_by_mark(runs):
    own = [r for r in _divergent(runs / "port") if r.like == "own"]
    report = (runs / "port" / "report.md").read_text()
    section = report[report.index("## Judged like numpy-test"):]
    listed = [line for line in section.splitlines() if line.startswith("| fwd")]
    assert len(listed) == len(own) > 50
    assert {line.split(" | ")[0][2:].replace("\\_", "_") for line in listed} == {r.case_id for r in own}
    page = (runs / "port" / "report.html").read_text()
    assert "<select data-key='like'><option value=''>all</option><option value='own'>own</option>" \
           "<option value='shared'>shared</option></select>" in page
    assert "data-like='own'" in page and "data-like='shared'" in page
    assert page.count("<tr><td>fwd/") >= len(own)


def test_summary_marks_each_defect_and_drafts_are_written_for_own_ones(runs, tmp_path):
    summary = json.loads((runs / "port" / "summary.json").read_text())
    jsonschema.validate(summary, load_schema("summary.schema.json"))
    defects = [d for d in summary["defects"] if d["status"] == "undocumented"]
    shared = [d for d in defects if d["like"] == "shared"]
    own = [d for d in defects if d["like"] == "own"]
    assert shared and own and len(shared) + len(own) == len(defects)
    marks: dict = {}
    for r in _divergent(runs / "port"):
        marks.setdefault(r.defect, set()).add(r.like)
    assert all(marks[d["id"]] == {"shared"} for d in shared) and all("own" in marks[d["id"]] for d in own)
    drafts = sorted(p.name for p in (runs / "port" / "issues").iterdir())
    assert drafts == sorted(d["draft"].split("/")[1] for d in own) and all(d["draft"] is None for d in shared)
    # --draft-shared: the shared ones too
    assert _port(runs, "all-drafts", "--draft-shared") == 0
    summary = json.loads((runs / "all-drafts" / "summary.json").read_text())
    named = sorted(d["draft"].split("/")[1] for d in summary["defects"] if d["status"] == "undocumented")
    assert sorted(p.name for p in (runs / "all-drafts" / "issues").iterdir()) == named
    assert len(named) == len(defects)


def test_fail_on_own_fails_on_the_ports_own_findings_only(runs, capsys):
    capsys.readouterr()
    assert _port(runs, "own-gate", "--fail-on-own") == 1
    err = capsys.readouterr().err
    own = sum(r.like == "own" and not r.is_accepted for r in _divergent(runs / "port"))
    shared = sum(r.like == "shared" and not r.is_accepted for r in _divergent(runs / "port"))
    assert f"own: {own} undocumented; shared: {shared} undocumented; gate failed (--fail-on-own)" in err
    decision = json.loads((runs / "own-gate" / "summary.json").read_text())["decision"]
    assert decision["gates"] == ["--fail-on-own"] and decision["exit_code"] == 1
    assert decision["counts"]["own"] == {"undocumented": own}
    # a copy of the framework has undocumented findings (--strict fails) but none of its own
    assert _port(runs, "copy-strict", "--strict", framework=HERE + "NumpyPort") == 1
    assert _port(runs, "copy-own", "--fail-on-own", framework=HERE + "NumpyPort") == 0
    assert _port(runs, "copy-both", "--fail-on-own", "--strict", framework=HERE + "NumpyPort") == 0
    assert "own: 0 undocumented" in capsys.readouterr().err
    junit = ET.parse(runs / "copy-own" / "junit.xml").getroot()
    assert junit.get("failures") == "0" and junit.get("errors") == "0"


def test_report_marks_the_rows_it_merges_and_gates_on_them(runs):
    assert _run(runs, HERE + "OwnFloat64Port", "unmarked", "--like", "numpy-test") == 0
    assert all(r.like is None for r in iter_results(runs / "unmarked"))
    assert main(["report", str(runs / "unmarked"), "--out", str(runs / "merged"), "--like", "numpy-test",
                 "--like-run", str(runs / "framework"), "--fail-on-own"]) == 1
    merged = {r.key: r.like for r in _divergent(runs / "merged")}
    assert merged == {r.key: r.like for r in _divergent(runs / "port")}
    own = {r.defect for r in _divergent(runs / "merged") if r.like == "own" and not r.is_accepted}
    every = {r.defect for r in _divergent(runs / "merged") if not r.is_accepted}
    assert own < every and len(list((runs / "merged" / "issues").iterdir())) == len(own)
    assert main(["report", str(runs / "unmarked"), "--out", str(runs / "merged-all"), "--like", "numpy-test",
                 "--like-run", str(runs / "framework"), "--draft-shared"]) == 0
    assert len(list((runs / "merged-all" / "issues").iterdir())) == len(every)


def test_a_resumed_run_marks_its_earlier_rows(runs):
    """Rows written before --like-run was given are marked when the run is resumed with it."""
    assert _run(runs, HERE + "OwnFloat64Port", "resumed", "--like", "numpy-test") == 0
    assert _port(runs, "resumed", "--resume") == 0
    assert {r.key: r.like for r in _divergent(runs / "resumed")} == {r.key: r.like for r in _divergent(runs / "port")}


@pytest.mark.parametrize("flag", ["--fail-on-own", "--draft-shared"])
def test_own_options_need_a_recorded_run(runs, capsys, flag):
    capsys.readouterr()
    assert _run(runs, HERE + "OwnFloat64Port", "refused", "--like", "numpy-test", flag) == 2
    err = capsys.readouterr().err
    assert f"{flag}: {flag} needs --like FRAMEWORK --like-run DIR" in err and err.count("\n") == 1
    assert not (runs / "refused").exists()


def test_a_framework_judged_like_itself_is_refused_on_every_surface(runs, capsys, tmp_path):
    """`run --framework torch --like torch --like-run OLD --fail-on-own --strict` passed 576 undocumented
    divergences: the rows of the framework judged like are never marked, and --fail-on-own counts own ones only.
    A build compared with a recorded run of itself is a baseline's work."""
    import conformance.api as kl

    capsys.readouterr()
    assert _run(runs, FRAMEWORK, "itself", "--like", "numpy-test", "--like-run", str(runs / "framework"),
                "--fail-on-own", "--strict") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--like: 'numpy-test' is the framework this run judges" in err
    assert "as a baseline (--baseline)" in err and not (runs / "itself").exists()
    assert main(["report", str(runs / "framework"), "--out", str(tmp_path / "merged"), "--like", "numpy-test",
                 "--like-run", str(runs / "framework"), "--fail-on-own"]) == 2
    assert "every run here is of 'numpy-test' itself" in capsys.readouterr().err
    assert not (tmp_path / "merged").exists()
    with pytest.raises(kl.UsageError, match="'numpy-test' is the framework this run judges"):
        kl.run(FRAMEWORK, like="numpy-test", like_run=runs / "framework")
    shutil.copytree(runs / "framework", tmp_path / "recorded")
    with pytest.raises(kl.UsageError, match="every run here is of 'numpy-test' itself"):
        kl.gate(runs / "framework", like="numpy-test", like_run=tmp_path / "recorded", fail_on_own=True)
    # a port merged with the recorded run of the framework it is judged like is what --like is for
    assert main(["report", str(runs / "framework"), str(runs / "port"), "--out", str(tmp_path / "both"), "--like",
                 "numpy-test", "--like-run", str(runs / "framework")]) == 0


def test_the_api_marks_rows_and_gates_on_own_findings(runs):
    import conformance.api as kl

    selection = kl.Selection(only=("fwd/sum/*/*/float64/*", "fwd/sum/*/*/float32/*"))
    outcome = kl.run(HERE + "OwnFloat64Port", selection=selection, profiles=runs / "profiles", like="numpy-test",
                     like_run=runs / "framework", cache=False)
    marks = {r.key: r.like for r in outcome.divergences}
    assert set(marks.values()) == {"shared", "own"}
    assert marks == {k: v for k, v in ((r.key, r.like) for r in _divergent(runs / "port")) if k in marks}
    decision = kl.gate(outcome, like="numpy-test", like_run=runs / "framework", fail_on_own=True)
    assert decision.code == kl.EXIT_GATE and decision.gates == ("--fail-on-own",)
    assert kl.gate(runs / "port", strict=True, like="numpy-test", like_run=runs / "framework",
                   fail_on_own=True).code == kl.EXIT_GATE
    with pytest.raises(kl.ConformanceError, match="fail_on_own: fail_on_own needs"):
        kl.gate(outcome, fail_on_own=True)


class OwnValuesPort(NumpyPort):
    """The stand-in's copy whose float32 findings (float64 results, which the stand-in shares) carry values of
    their own: twice the stand-in's. Each such row has the stand-in's verdict and cause, so only the observations,
    which details.jsonl keeps, tell it is the port's own."""

    def compute(self, case):
        value = super().compute(case)
        return value * 2 if case.id.split("/")[4] == "float32" else value


def test_the_api_gate_keeps_the_marks_a_run_gave_its_rows(runs, tmp_path):
    """A RunOutcome's rows are gated as the run marked them: its details are gone with its temporary directory,
    and a divergence with the recorded run's verdict and cause is not shared for that alone (the CLI, which
    reads the details, says own)."""
    import conformance.api as kl

    selection = kl.Selection(only=("fwd/sum/*/*/float32/*",))
    outcome = kl.run(HERE + "OwnValuesPort", selection=selection, profiles=runs / "profiles", like="numpy-test",
                     like_run=runs / "framework", cache=False)
    assert outcome.out_dir is None
    own = [r for r in outcome.divergences if r.like == "own" and not r.is_accepted]
    assert own
    decision = kl.gate(outcome, like="numpy-test", like_run=runs / "framework", fail_on_own=True)
    assert decision.code == kl.EXIT_GATE and decision.counts["own"] == {"undocumented": len(own)}
    kept = kl.run(HERE + "OwnValuesPort", selection=selection, profiles=runs / "profiles", like="numpy-test",
                  like_run=runs / "framework", cache=False, out=tmp_path / "kept")
    assert kl.gate(tmp_path / "kept", like="numpy-test", like_run=runs / "framework",
                   fail_on_own=True).counts == decision.counts
    assert kl.gate(kept, like="numpy-test", like_run=runs / "framework", fail_on_own=True).counts == decision.counts
    # marks made against one recorded run say nothing of another: a copy's rows, shared with the first, are own
    # beside a recorded run that never ran their cases
    copy = kl.run(HERE + "NumpyPort", selection=selection, profiles=runs / "profiles", like="numpy-test",
                  like_run=runs / "framework", cache=False)
    assert copy.divergences and all(r.like == "shared" for r in copy.divergences)
    assert kl.gate(copy, like="numpy-test", like_run=runs / "framework", fail_on_own=True).code == kl.EXIT_OK
    assert main(["run", "--framework", FRAMEWORK, "--only", "fwd/sum/*/*/float64/*", "--samples", "2", "--out",
                 str(tmp_path / "float64-only"), "--no-progress", "--no-repro", "--no-cache", "--profiles",
                 str(runs / "profiles")]) == 0
    elsewhere = kl.gate(copy, like="numpy-test", like_run=tmp_path / "float64-only", fail_on_own=True)
    assert elsewhere.code == kl.EXIT_GATE and elsewhere.counts["own"]["undocumented"] == len(copy.divergences)
