"""The findings pages of the documentation site, generated from run directories by
`python -m conformance.report.findings`: the same runs give the same bytes, the counts are the rows', the
provenance is run.json's, and text from a case never becomes markup on the page."""

from __future__ import annotations

import json
import shutil

import pytest

from conformance.cli import main
from conformance.report.findings import main as findings

ADAPTERS = "tests.faults.adapters:"
HOSTILE_ID = "fault <script>alert(1)</script> *em* [x](javascript:alert(1)) | bar \u202eevil\u202c \x1b[31mred"
CASES = f"""
- {{id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}
- {{id: {json.dumps(HOSTILE_ID)}, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A small run of the NumPy stand-in that is off by one on the case whose id says fault."""
    tmp = tmp_path_factory.mktemp("findings")
    cases = tmp / "cases.yaml"
    cases.write_text(CASES)
    out = tmp / "numpy-run"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    return out


def _pages(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_the_same_run_gives_the_same_pages_with_its_counts_and_provenance(run_dir, tmp_path):
    for out in ("a", "b"):
        assert findings([str(run_dir), "--out", str(tmp_path / out), "--commit", "0123abc"]) == 0
    first = _pages(tmp_path / "a")
    assert first == _pages(tmp_path / "b")
    assert set(first) == {"index.md", "numpy-test.md", ".kl-conformance-written"}  # the pages, and their record
    page = first["numpy-test.md"].decode()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    divergent = [r for r in rows if r["verdict"] not in ("pass", "unsupported")]
    assert divergent and len(divergent) < len(rows)
    assert f"{len(rows)} results; {len(divergent)} divergences: {len(divergent)} undocumented" in page
    # the page leads with its defects: each undocumented one once, before the provenance
    defects = {r["defect"] for r in divergent}
    assert page.index("undocumented defect") < page.index("## Provenance")
    assert f"## {len(defects)} undocumented defect{'' if len(defects) == 1 else 's'}" in page
    assert all(page.count(f"`{d}`") == 2 for d in defects)  # in the table, and beside its reproduce command
    undocumented = [d for d in json.loads((run_dir / "summary.json").read_text())["defects"]
                    if d["status"] == "undocumented"]
    assert {d["id"] for d in undocumented} == defects
    assert all(f"- `{d['id']}`: `{d['reproduce']}`" in page for d in undocumented)
    manifest = json.loads((run_dir / "run.json").read_text())
    # provenance from run.json: the version, when it ran, the commit it ran from (where it ran from a git
    # checkout); --commit only for runs whose run.json records none
    for key in ("started", "finished", "spec_hash", "framework_version"):
        assert str(manifest[key]).replace(".", "\\.").replace("-", "\\-").replace("+", "\\+") in page, key
    shown = manifest["commit"].replace("+", "\\+") if manifest.get("commit") else "0123abc"
    assert f"| harness commit | {shown} |" in page
    unrecorded = tmp_path / "unrecorded"
    shutil.copytree(run_dir, unrecorded)
    (unrecorded / "run.json").write_text(json.dumps({**manifest, "commit": None}))
    assert findings([str(unrecorded), "--out", str(tmp_path / "c"), "--commit", "0123abc"]) == 0
    assert "| harness commit | 0123abc |" in (tmp_path / "c" / "numpy-test.md").read_text()
    assert "python -m conformance.report.findings RUN_DIR... --out docs/findings --commit 0123abc" in page
    index = first["index.md"].decode()
    assert "| [numpy\\-test](numpy-test.md) |" in index and f"| {len(rows)} | {len(divergent)} |" in index


def test_text_from_a_case_never_becomes_markup_on_a_findings_page(run_dir, tmp_path):
    markdown = pytest.importorskip("markdown")  # MkDocs' Markdown, which the docs environment holds
    assert findings([str(run_dir), "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "numpy-test.md").read_text()
    html = markdown.markdown(page, extensions=["toc", "tables"])
    for tag in ("<script", "<em>", 'href="javascript'):
        assert tag not in html, tag
    assert "&lt;script&gt;alert(1)&lt;/script&gt; *em* [x](javascript:alert(1)) | bar" in html
    # a direction override and an escape sequence show as their escapes, as report.md shows them
    for raw, shown in (("\u202e", "\\u202e"), ("\x1b", "\\x1b")):
        assert raw not in page and raw not in html and shown in page, shown


def test_bad_input_is_one_line_and_writes_nothing(run_dir, tmp_path, capsys):
    assert findings([str(tmp_path / "absent"), "--out", str(tmp_path / "pages")]) == 2
    assert findings([str(run_dir), "--out", str(tmp_path / "pages"), "--commit", "$(rm -rf /)"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no results.jsonl here" in err[0] and "--commit" in err[1]
    assert all("Fix:" in line for line in err)
    assert not (tmp_path / "pages").exists()


def test_runs_a_report_refuses_are_refused_and_a_run_that_did_not_run_says_so(run_dir, tmp_path, capsys):
    """The same run given twice counted its rows twice, a run whose results.jsonl lost rows gave a page of what
    was left, both exit 0, where `report` refuses each; a framework that did not run led its page with "0
    undocumented defects" and a results table with an empty column."""
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut)
    rows = (cut / "results.jsonl").read_text().splitlines(keepends=True)
    (cut / "results.jsonl").write_text("".join(rows[:-1]))
    for given, problem in (([run_dir, run_dir], "given twice"), ([cut], "damaged")):
        assert findings([*map(str, given), "--out", str(tmp_path / "pages")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and problem in err[0] and "Fix:" in err[0], err
        assert not (tmp_path / "pages").exists()
    assert main(["report", str(run_dir), str(tmp_path / "absent-run"), "--allow-missing", "--out",
                 str(tmp_path / "merged")]) in (0, 1)
    assert findings([str(tmp_path / "merged"), "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "absent-run.md").read_text()
    assert "## Not run" in page and "undocumented defect" not in page and "|  |" not in page, page


def test_the_index_names_each_release_once_however_many_runs_made_it(run_dir, tmp_path):
    """The matrix runs each framework eagerly and in its modes, two runs of one release: the index's version
    column named the release twice ("2.10.0; 2.10.0")."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: other-case, input: [[-1.0]], target: [[0.5]], reduction: sum, dtype: float64}\n")
    second = tmp_path / "numpy-modes"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(second), "--no-progress", "--no-repro"]) == 0
    assert findings([str(run_dir), str(second), "--out", str(tmp_path / "pages"), "--commit", "0123abc"]) == 0
    index = (tmp_path / "pages" / "index.md").read_text()
    row = next(line for line in index.splitlines() if line.startswith("| [numpy\\-test]"))
    version = json.loads((run_dir / "run.json").read_text())["framework_version"]
    shown = version.replace(".", "\\.").replace("-", "\\-").replace("+", "\\+")
    assert row.split(" | ")[1] == shown, row
