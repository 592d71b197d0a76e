"""Every writer records what it writes and refuses what it did not: the findings pages and `repro --all` write
only into a folder of their own (never over a page written by hand, never into a run), a file as the folder or a
full disk is one line, no half file is left and the worker ends; `report` writes into none of its runs; and the
text report.md takes from a row reads as written (an id's line break stays in its reproduce command) and
notifies nobody (@mentions). Processes are real; a full disk is a file size limit (RLIMIT_FSIZE) on one."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.generated import RECORD_FILE
from conformance.report.findings import main as findings

ADAPTERS = "tests.faults.adapters:"
OFF_BY_ONE = ADAPTERS + "OffByOneAdapter"
PLANTED = ADAPTERS + "PlantedBugsAdapter"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONDONTWRITEBYTECODE": "1"}
BOUND_S = 120  # what a command may take at most before it counts as hung: a bound on a hang, never a timing
CASES = """
- {id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.5, 0.25]], reduction: sum, dtype: float64}
- {id: fault-two, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
# PlantedBugsAdapter raises on an id holding "raise", with the id in its message
HOSTILE = """
- {id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: "raise @octocat #12", input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: "off\\nsplit", input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: mean, dtype: float64}
"""


def _run(tmp, name, adapter=OFF_BY_ONE, cases=CASES, *extra):
    (tmp / f"{name}.yaml").write_text(cases)
    out = tmp / name
    assert main(["run", "--framework", adapter, "--cases", str(tmp / f"{name}.yaml"), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run of the off-by-one adapter: a pass and two value divergences, each with a reproducer."""
    return _run(tmp_path_factory.mktemp("writers"), "run")


def _tree(path: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _command(args: list[str], file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    """`python ARGS` in a session of its own, with writes past `file_size_limit` bytes failing as on a full
    disk (EFBIG; SIGXFSZ ignored); every process of it is killed if it has not ended within BOUND_S."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
    process = subprocess.Popen([sys.executable, *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               preexec_fn=limit if file_size_limit is not None else None)
    try:
        out, err = process.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"`{' '.join(args)}` did not exit within {BOUND_S} s: {err[-2000:]}")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what it left running (a worker) is ended too
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(args, process.returncode, out, err)


# the findings pages


def test_findings_into_the_sites_own_folder_are_refused_and_its_pages_kept(run_dir, tmp_path, capsys):
    """`--out docs` (for docs/findings) silently replaced the site's hand-written docs/index.md."""
    docs = tmp_path / "docs"
    (docs / "findings").mkdir(parents=True)
    (docs / "index.md").write_text("# The site's home page, written by hand\n")
    before = _tree(docs)
    assert findings([str(run_dir), "--out", str(docs)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(docs) in line and "'findings'" in line and "did not write" in line and "docs/findings" in line
    assert _tree(docs) == before


@pytest.mark.parametrize("inside", [".", "findings"])
def test_findings_never_go_into_a_run(run_dir, capsys, inside):
    before = _tree(run_dir)
    out = run_dir / inside
    assert findings([str(run_dir), "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "run directory" in line and "run.json" in line and "Fix:" in line
    assert _tree(run_dir) == before


def test_findings_given_a_file_as_their_folder_are_one_line(run_dir, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("mine\n")
    assert findings([str(run_dir), "--out", str(page)]) == 2
    assert "exists and is not a directory" in _one_line(capsys.readouterr().err)
    assert findings([str(run_dir), "--out", str(page / "findings")]) == 2
    assert "is not a directory" in _one_line(capsys.readouterr().err)
    assert page.read_text() == "mine\n"


def test_findings_replace_their_own_pages_and_remove_only_theirs(run_dir, tmp_path, capsys):
    """A second generation replaces the first; a page the record names and this run has no framework for is
    removed; a file the record does not name stops the generation and stays."""
    out = tmp_path / "findings"
    assert findings([str(run_dir), "--out", str(out)]) == 0
    first = _tree(out)
    assert set(first) == {"index.md", "numpy-test.md", RECORD_FILE}
    record = json.loads((out / RECORD_FILE).read_text())
    assert sorted(record["written"]) == ["index.md", "numpy-test.md"]
    (out / "gone.md").write_text("a framework an earlier run had\n")
    (out / RECORD_FILE).write_text(json.dumps({**record, "written": [*record["written"], "gone.md"]}))
    assert findings([str(run_dir), "--out", str(out)]) == 0
    assert _tree(out) == first
    (out / "notes.md").write_text("mine\n")
    assert findings([str(run_dir), "--out", str(out)]) == 2
    assert "'notes.md'" in _one_line(capsys.readouterr().err)
    assert _tree(out) == {**first, "notes.md": b"mine\n"}


def test_findings_on_a_full_disk_are_one_line_and_leave_no_half_page(run_dir, tmp_path):
    """A full disk was a traceback with a page cut short left behind."""
    whole = tmp_path / "whole"
    assert findings([str(run_dir), "--out", str(whole)]) == 0
    pages = {p.name: p.read_bytes() for p in whole.glob("*.md")}
    limit = max(map(len, pages.values())) // 2  # the largest page does not fit
    out = tmp_path / "full"
    done = _command(["-m", "conformance.report.findings", str(run_dir), "--out", str(out)], file_size_limit=limit)
    assert done.returncode == 3, done.stderr
    line = _one_line(done.stderr)
    assert str(out) in line and "File too large" in line and "Fix:" in line
    left = {p.name: p.read_bytes() for p in out.iterdir() if p.name != RECORD_FILE}
    assert all(pages.get(name) == text for name, text in left.items()), sorted(left)  # each page whole, or absent
    assert max(pages, key=lambda name: len(pages[name])) not in left


# repro --all


@pytest.mark.parametrize("where", ["file", "run", "inside-run", "foreign"])
def test_repro_all_refuses_a_folder_not_its_own_and_exits(run_dir, tmp_path, where):
    """An existing file as OUT was a traceback, and then the process never exited: its worker was left."""
    out = {"file": tmp_path / "scripts", "run": run_dir, "inside-run": run_dir / "scripts",
           "foreign": tmp_path / "mine"}[where]
    if where == "file":
        out.write_text("mine\n")
    if where == "foreign":
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    before, run_before = _tree(tmp_path), _tree(run_dir)
    done = _command(["-m", "conformance", "repro", "--all", str(out), "--from", str(run_dir), "--framework",
                     OFF_BY_ONE])
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert str(out) in line and "--all" in line and "Fix:" in line
    assert _tree(tmp_path) == before and _tree(run_dir) == run_before


def test_repro_all_replaces_its_own_scripts(run_dir, tmp_path):
    out = tmp_path / "scripts"
    args = ["repro", "--all", str(out), "--from", str(run_dir), "--framework", OFF_BY_ONE]
    assert main(args) == 0
    scripts = sorted(p.name for p in out.glob("*.py"))
    assert len(scripts) == 2 and sorted(json.loads((out / RECORD_FILE).read_text())["written"]) == scripts
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*scripts, RECORD_FILE])


def test_repro_all_on_a_full_disk_is_one_line_ends_its_worker_and_leaves_no_half_script(run_dir, tmp_path):
    whole = tmp_path / "whole"
    assert main(["repro", "--all", str(whole), "--from", str(run_dir), "--framework", OFF_BY_ONE]) == 0
    scripts = {p.name: p.read_bytes() for p in whole.glob("*.py")}
    limit = min(map(len, scripts.values())) // 2  # no script fits
    out = tmp_path / "full"
    done = _command(["-m", "conformance", "repro", "--all", str(out), "--from", str(run_dir), "--framework",
                     OFF_BY_ONE], file_size_limit=limit)
    assert done.returncode == 3, done.stderr
    line = _one_line(done.stderr)
    assert str(out) in line and "File too large" in line and "Fix:" in line
    assert not list(out.glob("*.py")) and not list(out.glob(".*.py.*"))  # no script, whole or half


# report


def test_report_into_a_folder_inside_one_of_its_runs_is_refused(run_dir, capsys):
    before = _tree(run_dir)
    assert main(["report", str(run_dir), "--out", str(run_dir / "merged")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "inside" in line and "one of the runs to merge" in line and "--out" in line
    assert _tree(run_dir) == before


def test_report_refuses_a_row_with_an_empty_case_id(run_dir, tmp_path, capsys):
    edited = tmp_path / "edited"
    edited.mkdir()
    for name in ("run.json", "details.jsonl"):
        (edited / name).write_bytes((run_dir / name).read_bytes())
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    rows[1]["case_id"] = ""
    (edited / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(edited), "--out", str(tmp_path / "report")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "results.jsonl: line 2:" in line and "case_id" in line
    assert not (tmp_path / "report").exists()


# text from a row in report.md


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A run whose divergent cases' ids hold a mention, an issue reference and a line break, each echoed in
    the framework's message."""
    return _run(tmp_path_factory.mktemp("hostile"), "run", PLANTED, HOSTILE)


def test_a_reproduce_command_keeps_a_line_break_of_its_case_id(hostile_run):
    """report.md's reproduce line joined the id's line break into a space: it named another case."""
    lines = [line for line in (hostile_run / "report.md").read_text().splitlines()
             if line.startswith("- reproduce:") and "split" in line]
    assert len(lines) == 1
    command = re.fullmatch(r"- reproduce: `(.*) > repro\.py && python repro\.py`", lines[0]).group(1)
    # what bash passes to the command as its last argument
    words = subprocess.run(["bash", "-c", "printf '%s\\0' " + command.removeprefix("kl-conformance ")],
                           capture_output=True, check=True).stdout.split(b"\0")
    assert words[-2].decode() == "off\nsplit"


def _outside_code(markdown: str) -> str:
    """The Markdown's text outside fenced blocks and code spans (where GitHub links no mention)."""
    text = re.sub(r"^(`{3,}).*?^\1[ \t]*$", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.S)


def test_no_mention_or_issue_reference_from_a_row_is_live(hostile_run):
    """An @name in a framework's message reached report.md as is, where GitHub notifies that user."""
    pages = {p.name: p.read_text() for p in [hostile_run / "report.md", hostile_run / "divergences.md",
                                             *(hostile_run / "issues").glob("*.md")]}
    pages = {name: text for name, text in pages.items() if "octocat" in text}
    assert {"report.md", "divergences.md"} < set(pages)  # and an issue draft
    for name, text in pages.items():
        plain = _outside_code(text)
        assert "octocat" in plain, name  # the message is shown as text, not only as code
        assert not re.search(r"@octocat|#12", plain), name


def test_control_characters_of_a_case_id_show_as_escapes_in_every_page(tmp_path):
    """A case file's id with an escape sequence, NUL, a C1 control and a direction override reached report.md,
    divergences.md, report.html and the drafts raw: `cat report.md` ran the sequence, and the override reordered
    the line. Each shows as its escape; the reproduce command quotes it so the shell reads the id back."""
    case_id = "raise-\x1b[31mX\x9b31m\u202eY\x00Z"
    cases = ('- {id: "raise-\\e[31mX\\x9b31m\\u202eY\\0Z", input: [[-1.0, -2.0]], target: [[0.25, 0.75]], '
             'reduction: sum, dtype: float64}\n')
    out = _run(tmp_path, "run", PLANTED, cases)
    pages = {p.name: p.read_text() for p in [out / "report.md", out / "divergences.md", out / "report.html",
                                             *(out / "issues").glob("*.md")]}
    assert len(pages) >= 4 and all("raise-" in text for text in pages.values()), sorted(pages)
    for name, text in pages.items():
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e]", text), name
        assert "x1b" in text and "u202e" in text, name  # the id as its escapes show it
    command = [line for line in pages["report.md"].splitlines() if line.startswith("- reproduce:")][0]
    quoted = re.search(r" -- (\$'.*?') > repro", command).group(1)
    words = subprocess.run(["bash", "-c", "printf '%s\\0' " + quoted], capture_output=True, check=True).stdout
    assert words.split(b"\0")[0].decode() == case_id.split("\x00")[0] and quoted.endswith("\\u0000Z'")  # no
    # shell word holds a NUL: bash reads the id up to it, and the command shows it escaped
