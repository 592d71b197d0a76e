"""Issue-ready drafts (report/drafts.py): one Markdown file under issues/ per undocumented defect of each
framework, none for what a profile documents or --known accepts, safe to paste into GitHub whatever the case
text holds."""

from __future__ import annotations

import re

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: off-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: off-2, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
- {id: shape-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ieee-1, input: [[-.inf, -2.0]], target: [[0.0, 1.0]], reduction: none, dtype: float64}
"""
PROFILE = """
framework: numpy-test
deviations:
  - id: ieee-target-zero
    apis: [numpy.kl_div]
    set: {pointwise.conventions.target_zero: ieee}
    rationale: the planted IEEE convention, documented
    basis: docs
    reference: https://example.org/planted
"""
KNOWN = """
- {id: off-by-one, case_id: "off-*", reason: accepted while a fix is pending}
"""


def _run(tmp_path, adapter, cases, out, *extra):
    (tmp_path / "cases.yaml").write_text(cases)
    (tmp_path / "profiles").mkdir(exist_ok=True)
    (tmp_path / "profiles" / "numpy-test.yaml").write_text(PROFILE)
    assert main(["run", "--framework", ADAPTERS + adapter, "--cases", str(tmp_path / "cases.yaml"), "--suite",
                 "none", "--out", str(tmp_path / out), "--no-progress", "--profiles", str(tmp_path / "profiles"),
                 *extra]) == 0
    return tmp_path / out


def _drafts(out) -> dict[str, str]:
    """Each draft by the defect id it names (markup escapes removed), which is its file's name."""
    drafts = {}
    for path in sorted((out / "issues").iterdir()):
        text = path.read_text(encoding="utf-8")
        (defect,) = re.findall(r"^- defect id: (\S+)$", text.replace("\\", ""), re.MULTILINE)
        assert path.name == f"{defect}.md"
        drafts[defect] = text
    return drafts


def test_a_run_writes_one_draft_per_undocumented_defect(tmp_path):
    out = _run(tmp_path, "PlantedBugsAdapter", CASES, "out", "--no-repro")
    rows = list(iter_results(out))
    undocumented = {r.defect for r in rows if r.verdict.is_divergence and not r.documented}
    documented = {r.defect for r in rows if r.verdict.is_divergence and r.documented}
    assert len(undocumented) == 2 and documented and not documented & undocumented
    drafts = _drafts(out)
    assert set(drafts) == undocumented
    for defect, text in drafts.items():
        assert len(text) < 65_536  # what an issue body holds
        members = [r for r in rows if r.defect == defect]
        assert "## Environment" in text and members[0].framework_version.replace(".", "\\.") in text
        assert "kl-conformance repro" in text and "## Got against expected" in text
        assert any(r.message in text for r in members)  # the example's, inside its fence, unescaped
    (shapes,) = [text for defect, text in drafts.items() if any(r.defect == defect and r.cause == "shapes.output"
                                                               for r in rows)]
    assert "reduced: 0-d (a scalar tensor)" in shapes  # the spec's own text of the rule, quoted
    # a report of the same run with --known accepting the off-by-one rows: that defect has no draft any more
    (tmp_path / "known.yaml").write_text(KNOWN)
    assert main(["report", str(out), "--out", str(tmp_path / "rep"), "--known", str(tmp_path / "known.yaml")]) == 0
    off_defect = next(r.defect for r in rows if r.case_id == "off-1")
    assert set(_drafts(tmp_path / "rep")) == undocumented - {off_defect}


def test_a_merged_report_says_how_the_other_frameworks_behave_and_quotes_the_reproducer(tmp_path):
    cases = "- {id: fault-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}\n"
    buggy = _run(tmp_path, "OffByOneAdapter", cases, "buggy")
    honest = _run(tmp_path, "OtherHonestAdapter", cases, "honest", "--no-repro")
    assert main(["report", str(buggy), str(honest), "--out", str(tmp_path / "merged")]) == 0
    (draft,) = _drafts(tmp_path / "merged").values()
    others = draft.split("## Other frameworks on this case", 1)[1].split("## Environment", 1)[0]
    others = re.sub(r"\\(.)", r"\1", others)  # markup escapes removed
    assert "numpy-other" in others and ": pass" in others and "numpy-test" not in others
    # the run's own draft quotes its reproducer, written after its report
    (draft,) = _drafts(buggy).values()
    (script,) = [p for p in (buggy / "repro").iterdir() if not p.name.endswith(".snippet.py")]
    assert "```python\n" + script.read_text().rstrip("\n") + "\n```" in draft
    # the snippet holds the minimised case: the run's numbers below it are said to be the whole case's
    got = draft.split("## Got against expected", 1)[1]
    assert re.sub(r"\\(.)", r"\1", got).lstrip().startswith("As the run judged the whole case fault-1 (the snippet")


HOSTILE = ["raise-````-fence", "raise-@octocat-ping", "raise-[x](javascript:alert(1))",
           "raise-<img src=x onerror=alert(1)>", "raise-../../escaped", "raise-#123-ref $x^2$",
           "raise-![i](https://evil.example/i.png) www.evil.example https://evil.example"]


def _outside_fences(text: str) -> list[str]:
    """The lines of `text` outside its fenced code blocks; a fence left open, or closed by a line inside
    that the writer did not mean as its end, shows as markup outside."""
    outside, fence = [], None
    for line in text.split("\n"):
        if fence is None:
            opened = re.match(r"(`{3,})", line)
            if opened:
                fence = opened.group(1)
            else:
                outside.append(line)
        elif re.fullmatch(r"`{%d,}\s*" % len(fence), line):
            fence = None
    assert fence is None, "a fence is left open"
    return outside


def _hostile_cases(prefix: str = "") -> str:
    return "".join(f"- {{id: '{prefix}{i}', input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                   f"dtype: float64}}\n" for i in HOSTILE)


def test_hostile_case_text_makes_no_markup_mention_link_or_path(tmp_path):
    out = _run(tmp_path, "PlantedBugsAdapter", _hostile_cases(), "out", "--no-repro")
    _check_safe(tmp_path, out)
    # the example's message, whole, inside a longer fence: one defect, whichever hostile case is its example
    assert len(list((out / "issues").iterdir())) == 1
    assert re.search(r"planted: cannot compute raise-", _text(out))


def test_a_quoted_reproducer_with_hostile_case_text_stays_in_its_fence(tmp_path):
    """The off-by-one stand-in writes reproducers, whose docstring holds the case id: quoted whole."""
    out = _run(tmp_path, "OffByOneAdapter", _hostile_cases("fault-"), "out")
    _check_safe(tmp_path, out)
    assert "```python" in _text(out) and "fault-raise-" in _text(out)


def _text(out) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((out / "issues").iterdir()))


def _check_safe(tmp_path, out):
    drafts = list((out / "issues").iterdir())
    assert drafts and all(p.parent == out / "issues" and re.fullmatch(r"[\w.=-]+\.md", p.name) for p in drafts)
    assert [p for p in tmp_path.rglob("*escaped*") if p.parent != out / "repro"] == []  # reproducers' own names
    for line in _outside_fences(_text(out)):
        assert not re.search(r"(?<!\\)[<\[\]`!]", line.replace("\\\\", "")), line  # no tag, link, image or code
        assert not re.search(r"@(?!\u200d)", line) and not re.search(r"#\d", line), line  # no mention, no reference
        assert not re.search(r"(?<!\\)\$", line), line  # no math
        assert "://" not in line and "www." not in line, line  # no autolink
