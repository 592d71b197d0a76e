"""Releases side by side (issue 30): runs of one framework at two releases merge, every report names the release
of a framework it holds several of (and only then), "Changed between releases" says which calls are new, fixed,
changed and lost, one release given twice is still the same result twice, and text from the rows stays text.
Runs use tests/faults/adapters.py ReleasedAdapter, whose release ($KL_TEST_VERSION) decides what it gets wrong."""

from __future__ import annotations

import json
import re

import jsonschema

from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import load_schema
from conformance.report.findings import write_findings
from tests.faults.adapters import HOSTILE_MESSAGE

ADAPTERS = "tests.faults.adapters:"
# one of each kind the adapter plants (see ReleasedAdapter): all on one forward call each
CASES = "\n".join(f"- {{id: {name}, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}"
                  for name in ("steady-1", "worse-1", "fixed-1", "changes-1", "goes-1", "off-1")) + "\n"


def _run(tmp_path, monkeypatch, release, out, adapter="ReleasedAdapter"):
    (tmp_path / "cases.yaml").write_text(CASES)
    monkeypatch.setenv("KL_TEST_VERSION", release)
    assert main(["run", "--framework", ADAPTERS + adapter, "--cases", str(tmp_path / "cases.yaml"), "--suite",
                 "none", "--out", str(tmp_path / out), "--no-progress", "--no-repro"]) == 0
    return str(tmp_path / out)


def test_two_releases_merge_and_report_what_changed_between_them(tmp_path, monkeypatch):
    older, newer = _run(tmp_path, monkeypatch, "1.0", "old"), _run(tmp_path, monkeypatch, "2.0", "new")
    other = _run(tmp_path, monkeypatch, "1.0", "other", adapter="OtherHonestAdapter")  # one release (NumPy's)
    out = tmp_path / "merged"
    assert main(["report", older, newer, other, "--out", str(out)]) == 0
    assert {(r.framework, r.framework_version) for r in iter_results(out) if r.framework == "numpy-released"} == \
        {("numpy-released", "1.0"), ("numpy-released", "2.0")}
    report = (out / "report.md").read_text()
    # the release names the framework of two releases, never the one of one release
    assert "| numpy-released 1.0 / numpy.kl_div / cpu | 6 |" in report
    assert "| numpy-released 2.0 / numpy.kl_div / cpu | 6 |" in report
    assert "| numpy-other / numpy.kl_div / cpu | 6 |" in report and "numpy-other 2" not in report
    # 1.0 -> 2.0: worse-1 passes then diverges, fixed-1 the reverse, changes-1 goes from a value divergence to a
    # raise, goes-1 from a pass to unsupported; steady-1 and off-1 stay as they were. Five calls are judged in
    # both (goes-1 is unsupported in 2.0), and no call is judged in 2.0 alone.
    section = report.split("## Changed between releases")[1].split("\n## ")[0]
    assert "### numpy-released: 1.0 to 2.0" in section and "numpy-other" not in section
    assert "5 calls judged in both releases: 1 new, 1 fixed, 1 changed, 1 lost; 0 judged in 2.0 only." in section
    listed = {kind: re.findall(r"^\| `([^`]+)` \|", table, re.M)
              for kind, table in re.findall(r"^\| (new|fixed|changed|lost) \|.*?\n((?:\|.*\n)+)", section, re.M)}
    assert listed == {"new": ["worse-1"], "fixed": ["fixed-1"], "changed": ["changes-1"], "lost": ["goes-1"]}
    assert re.search(r"^\| `changes-1` \| numpy\.kl_div / cpu / forward \| value \(.+\) \| error \(.+\) \|$",
                     section, re.M)
    assert re.search(r"^\| `goes-1` \| numpy\.kl_div / cpu / forward \| pass \| unsupported \|$", section, re.M)
    for kind, case in (("new", "worse-1"), ("fixed", "fixed-1"), ("changed", "changes-1"), ("lost", "goes-1")):
        assert re.search(rf"^- {kind} \(.*\): 1\. Example: `{case}` on ", section, re.M), kind
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, load_schema("summary.schema.json"))
    (pair,) = summary["releases"]
    assert {k: pair[k] for k in ("framework", "older", "newer", "new", "fixed", "changed", "lost", "gained",
                                 "compared")} == \
        {"framework": "numpy-released", "older": "1.0", "newer": "2.0", "new": 1, "fixed": 1, "changed": 1,
         "lost": 1, "gained": 0, "compared": 5}
    assert {kind: e["case_id"] for kind, e in pair["examples"].items()} == \
        {"new": "worse-1", "fixed": "fixed-1", "changed": "changes-1", "lost": "goes-1"}
    assert summary["targets"]["numpy-released@2.0/numpy.kl_div/cpu/forward"]["release"] == "2.0"
    assert "release" not in summary["targets"]["numpy-other/numpy.kl_div/cpu/forward"]
    assert {k for k in summary["targets"] if k.startswith("numpy-released")} == \
        {"numpy-released@1.0/numpy.kl_div/cpu/forward", "numpy-released@2.0/numpy.kl_div/cpu/forward"}
    junit = (out / "junit.xml").read_text()
    assert 'classname="numpy-released-2_0.numpy.kl_div.cpu.forward" name="changes-1"' in junit
    assert 'classname="numpy-other.numpy.kl_div.cpu.forward"' in junit
    page = (out / "report.html").read_text()
    assert "<select data-key='release'><option value=''>all</option><option value='1.0'>1.0</option>" \
           "<option value='2.0'>2.0</option></select>" in page
    assert "<tr><td>numpy-released</td><td>1.0</td><td>2.0</td><td class='num'>1</td><td class='num'>1</td>" \
           "<td class='num'>1</td><td class='num'>1</td><td class='num'>0</td></tr>" in page
    divergences = (out / "divergences.md").read_text()
    assert re.search(r"^\| `changes-1` \| numpy\.kl_div / cpu, release 2\.0 \|", divergences, re.M)
    assert re.search(r"^\| `changes-1` \| numpy\.kl_div / cpu, release 1\.0 \|", divergences, re.M)
    pages = write_findings([older, newer], tmp_path / "findings")
    (page,) = [p.read_text() for p in pages if p.name != "index.md"]
    assert "numpy\\-released@1\\.0/numpy\\.kl\\_div/cpu/forward" in page
    assert "numpy\\-released@2\\.0/numpy\\.kl\\_div/cpu/forward" in page
    # a baseline across releases still compares one call with the same call: fixed-1 is fixed, worse-1 new
    assert main(["report", newer, "--baseline", older, "--out", str(tmp_path / "since")]) == 0
    since = json.loads((tmp_path / "since" / "baseline.json").read_text())
    flat = json.dumps(since)
    assert "fixed-1" in flat and "worse-1" in flat and "steady-1" not in flat


def test_a_report_of_one_release_per_framework_names_no_release(tmp_path, monkeypatch):
    one, other = _run(tmp_path, monkeypatch, "1.0", "one"), _run(tmp_path, monkeypatch, "1.0", "other",
                                                                 adapter="OtherHonestAdapter")
    out = tmp_path / "merged"
    assert main(["report", one, other, "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Changed between releases" not in report and "numpy-released 1.0" not in report
    assert "| numpy-released / numpy.kl_div / cpu | 6 |" in report
    summary = json.loads((out / "summary.json").read_text())
    assert "releases" not in summary and not any("@" in k or "release" in v for k, v in summary["targets"].items())
    assert "data-key='release'" not in (out / "report.html").read_text()
    assert "Changed between releases" not in (out / "report.html").read_text()
    assert 'classname="numpy-released.numpy.kl_div.cpu.forward"' in (out / "junit.xml").read_text()
    assert ", release " not in (out / "divergences.md").read_text()


def test_one_release_given_twice_is_the_same_result_twice(tmp_path, monkeypatch, capsys):
    first, again = _run(tmp_path, monkeypatch, "1.0", "first"), _run(tmp_path, monkeypatch, "1.0", "again")
    capsys.readouterr()
    assert main(["report", first, again, "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "the same result appears twice" in err and "release 1.0" in err and "Fix:" in err
    assert not (tmp_path / "merged").exists()


def test_releases_are_ordered_as_versions(tmp_path, monkeypatch):
    """1.10 is newer than 1.9 (as text it would sort first)."""
    ten, nine = _run(tmp_path, monkeypatch, "1.10", "ten"), _run(tmp_path, monkeypatch, "1.9", "nine")
    assert main(["report", ten, nine, "--out", str(tmp_path / "merged")]) == 0
    (pair,) = json.loads((tmp_path / "merged" / "summary.json").read_text())["releases"]
    assert (pair["older"], pair["newer"]) == ("1.9", "1.10")
    assert (pair["new"], pair["fixed"], pair["changed"], pair["lost"]) == (0, 0, 0, 0)  # both 1.x: one behaviour
    assert "### numpy-released: 1.9 to 1.10" in (tmp_path / "merged" / "report.md").read_text()


def test_text_from_the_rows_stays_text_in_what_changed(tmp_path, monkeypatch):
    """A release named with markup and the newer release's raised message (HOSTILE_MESSAGE) are text in report.md
    and report.html, never markup."""
    hostile = "2.0</td><script>window.pwned=4</script>|`x"
    older, newer = _run(tmp_path, monkeypatch, "1.0", "old"), _run(tmp_path, monkeypatch, hostile, "new")
    out = tmp_path / "merged"
    assert main(["report", older, newer, "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    section = report.split("## Changed between releases")[1].split("\n## ")[0]
    assert "changes-1" in section and "window.pwned=2" in section and "window.pwned=4" in section
    assert HOSTILE_MESSAGE not in report
    escaped = "2.0\\</td\\>\\<script\\>window.pwned=4\\</script\\>\\|\\`x"  # each markup character escaped
    assert report.count("window.pwned=4") == report.count(escaped) > 0
    assert not re.search(r"(?<!\\)<(?:script|img|/td)", report)  # each < of the rows' text escaped
    page = (out / "report.html").read_text()
    assert "<script>window.pwned" not in page and "&lt;script&gt;window.pwned=4" in page


def test_a_baseline_takes_one_release_per_framework_on_each_side(tmp_path, monkeypatch, capsys):
    """One key, two rows: a comparison with a baseline would count the second release's rows as added."""
    older, newer = _run(tmp_path, monkeypatch, "1.0", "old"), _run(tmp_path, monkeypatch, "2.0", "new")
    base = _run(tmp_path, monkeypatch, "1.0", "base")
    assert main(["report", older, newer, "--out", str(tmp_path / "both")]) == 0
    capsys.readouterr()
    for args in ([older, newer, "--baseline", base], [newer, "--baseline", str(tmp_path / "both")]):
        assert main(["report", *args, "--out", str(tmp_path / "refused")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert "two releases of numpy-released (1.0 and 2.0)" in err and "--baseline" in err and "Fix:" in err
        assert not (tmp_path / "refused").exists()


def test_a_run_refuses_a_baseline_of_two_releases(tmp_path, monkeypatch, capsys):
    older, newer = _run(tmp_path, monkeypatch, "1.0", "old"), _run(tmp_path, monkeypatch, "2.0", "new")
    assert main(["report", older, newer, "--out", str(tmp_path / "both")]) == 0
    capsys.readouterr()
    monkeypatch.setenv("KL_TEST_VERSION", "3.0")
    assert main(["run", "--framework", ADAPTERS + "ReleasedAdapter", "--cases", str(tmp_path / "cases.yaml"),
                 "--suite", "none", "--out", str(tmp_path / "third"), "--no-progress", "--no-repro",
                 "--baseline", str(tmp_path / "both")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "two releases of numpy-released (1.0 and 2.0)" in err and "--baseline" in err and "Fix:" in err
    assert not (tmp_path / "third").exists()


def test_one_behaviour_on_two_runtimes_of_a_release_is_one_defect_that_says_where_it_shows(tmp_path, monkeypatch):
    """Keras 3.15.1 on JAX and on TensorFlow is one release on two runtimes (its version's words after the
    release): a behaviour of the framework's own code is one defect on both, where it was one per backend (three
    drafts of one bug in losses.py); a behaviour of one runtime says which it shows on."""
    both = _run(tmp_path, monkeypatch, "2.0 (runtime a)", "a")
    (tmp_path / "some.yaml").write_text("\n".join(line for line in CASES.splitlines()
                                                  if "off-1" in line or "steady-1" in line) + "\n")
    monkeypatch.setenv("KL_TEST_VERSION", "2.0 (runtime b)")
    assert main(["run", "--framework", ADAPTERS + "ReleasedAdapter", "--cases", str(tmp_path / "some.yaml"),
                 "--suite", "none", "--out", str(tmp_path / "b"), "--no-progress", "--no-repro"]) == 0
    ids = {(r.case_id, r.framework_version): r.defect for run in (both, tmp_path / "b") for r in iter_results(run)}
    assert ids[("off-1", "2.0 (runtime a)")] == ids[("off-1", "2.0 (runtime b)")] != ""
    out = tmp_path / "merged"
    assert main(["report", both, str(tmp_path / "b"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, load_schema("summary.schema.json"))
    defects = {d["example"]["case_id"]: d for d in summary["defects"]}
    off, raises = defects["off-1"], defects["changes-1"]
    assert off["id"] == ids[("off-1", "2.0 (runtime a)")] and off["rows"] == 3  # worse-1 too, off by one alike
    assert (off["release"], off["versions"]) == ("2.0", ["2.0 (runtime a)", "2.0 (runtime b)"])
    assert (raises["release"], raises["versions"]) == ("2.0", ["2.0 (runtime a)"])  # its case ran on a alone
    assert " on runtime a " not in raises["title"]  # one runtime: its title needs none
    report = (out / "report.md").read_text()
    line = next(x for x in report.splitlines() if f"`{raises['id']}`" in x)
    assert "| on runtime a; numpy.kl_div; forward; float64 |" in line, line  # shown on one runtime of two: it says which
    assert "| on " not in next(x for x in report.splitlines() if f"`{off['id']}`" in x)
    draft = (out / off["draft"]).read_text().replace("\\", "")  # its Markdown escapes
    assert "numpy-released 2.0 on runtime a and runtime b: 3 results" in draft
    draft = (out / raises["draft"]).read_text().replace("\\", "")
    assert "- versions: 2.0 (runtime a) (of 2.0 (runtime a), 2.0 (runtime b))" in draft
    pages = tmp_path / "pages"
    assert write_findings([both, str(tmp_path / "b")], pages, commit="0123abc")
    line = next(x for x in (pages / "numpy-released.md").read_text().splitlines() if f"`{raises['id']}`" in x)
    assert "| on runtime a; numpy\\.kl\\_div;" in line, line
    # two releases of a framework are two defects each, neither said to show on one runtime of its release
    older = _run(tmp_path, monkeypatch, "1.0", "older")
    assert main(["report", older, both, "--out", str(tmp_path / "releases")]) == 0
    report = (tmp_path / "releases" / "report.md").read_text()
    assert not [x for x in report.splitlines() if x.startswith("| `numpy-released-") and "| on " in x]


def test_a_title_that_quotes_what_one_runtime_raised_names_that_runtime(tmp_path, monkeypatch):
    """Keras's 0-d sum is one defect on TensorFlow (InvalidArgumentError) and torch (a value): its title quoted
    TensorFlow's exception as if every backend raised it. Where a defect shows on several runtimes, a title that
    quotes what its example raised says on which."""
    both = _run(tmp_path, monkeypatch, "2.0 (runtime a)", "a")
    (tmp_path / "one.yaml").write_text("".join(x + "\n" for x in CASES.splitlines() if "changes-1" in x))
    monkeypatch.setenv("KL_TEST_VERSION", "2.0 (runtime b)")
    assert main(["run", "--framework", ADAPTERS + "ReleasedAdapter", "--cases", str(tmp_path / "one.yaml"),
                 "--suite", "none", "--out", str(tmp_path / "b"), "--no-progress", "--no-repro"]) == 0
    assert main(["report", both, str(tmp_path / "b"), "--out", str(tmp_path / "merged")]) == 0
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    raises = next(d for d in summary["defects"] if d["example"]["case_id"] == "changes-1")
    assert raises["versions"] == ["2.0 (runtime a)", "2.0 (runtime b)"]
    assert re.search(r"raises RuntimeError \(.*\) on runtime [ab] where the spec expects a value", raises["title"])
