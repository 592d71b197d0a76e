"""A resumed run ends as the uninterrupted run would, rows in the same order, wherever the interruption fell. A run
writes a case's rows and their detail lines, then flushes both files, before the next case's. A kill between the
two files' flushes left divergent rows without their detail lines; the resumed run removed those rows, kept the
case's other rows, and wrote the removed ones again after them, out of the case's order (the run under --jobs 2
killed outright showed it, now and then)."""

from __future__ import annotations

import json
import shutil

import pytest

from conformance.cli import main
from conformance.core.details import DETAILS_FILE
from conformance.core.manifest import MANIFEST_FILE
from conformance.core.results import RESULTS_FILE, iter_results

ADAPTERS = "tests.faults.adapters:"


def _run(out, *extra):
    return main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--only", "fwd/*/float64/*", "--no-progress",
                 "--no-repro", "--out", str(out), *extra])


def _call(line: str) -> tuple:
    return tuple(json.loads(line)[k] for k in ("case_id", "api", "device", "mode", "part"))


def _cut(clean, cut, rows_kept: int, status: str, last_details: bool) -> str:
    """`cut`: `clean` as a run killed after writing `rows_kept` rows would leave it, with the detail lines of those
    rows, or (not `last_details`) without those of the last case's rows; the case it cut short."""
    shutil.copytree(clean, cut)
    lines = (clean / RESULTS_FILE).read_text().splitlines(keepends=True)
    kept = lines[:rows_kept]
    (cut / RESULTS_FILE).write_text("".join(kept))
    last = json.loads(kept[-1])["case_id"]
    calls = {_call(line) for line in kept if last_details or json.loads(line)["case_id"] != last}
    details = [line for line in (clean / DETAILS_FILE).read_text().splitlines(keepends=True) if _call(line) in calls]
    (cut / DETAILS_FILE).write_text("".join(details))
    manifest = json.loads((cut / MANIFEST_FILE).read_text())
    manifest["status"] = status
    (cut / MANIFEST_FILE).write_text(json.dumps(manifest))
    return json.loads(kept[-1])["case_id"]


@pytest.mark.parametrize("status", ["running", "interrupted"])
@pytest.mark.parametrize("where", ["rows", "details"])
def test_a_case_cut_short_is_judged_again_whole_and_in_its_place(tmp_path, status, where):
    """`rows`: the last case has only its first rows; `details`: it has every row, but its divergent rows lack
    their detail lines, and a row that is no divergence (which has none) comes after one."""
    clean = tmp_path / "clean"
    assert _run(clean) == 0  # no gate asked for: its off-by-one divergences are findings, not a failure
    rows = list(iter_results(clean))
    if where == "rows":  # a row in the middle of a case: the case before it is whole, its own rows are not
        cut_at = next(i for i in range(len(rows) // 3, len(rows) - 1)
                      if rows[i].case_id == rows[i - 1].case_id == rows[i + 1].case_id)
    else:  # a case's last row, where a divergence is followed by a row that is none
        cut_at = next(i + 1 for i in range(len(rows) // 3, len(rows) - 1)
                      if rows[i].case_id != rows[i + 1].case_id and any(
                          r.verdict.is_divergence and any(not q.verdict.is_divergence for q in rows[j + 1:i + 1])
                          for j, r in enumerate(rows[:i + 1]) if r.case_id == rows[i].case_id))
    cut = tmp_path / "cut"
    _cut(clean, cut, cut_at, status, last_details=where == "rows")
    assert _run(cut, "--resume") == 0
    strip = lambda run: [(r.case_id, r.api, r.device, r.mode, r.part, r.verdict, r.message) for r in iter_results(run)]
    assert strip(cut) == strip(clean)
    details = lambda run: (run / DETAILS_FILE).read_text().splitlines()
    assert details(cut) == details(clean)


def test_a_line_cut_by_a_kill_names_resume_as_the_fix_and_resume_writes_it_again(tmp_path, capsys):
    """`report` on a run killed while writing a row said "remove the damaged line", which loses the row; --resume
    writes it again. A whole line that is damaged keeps the old fix."""
    clean, cut = tmp_path / "clean", tmp_path / "cut"
    assert _run(clean) == 0
    shutil.copytree(clean, cut)
    lines = (clean / RESULTS_FILE).read_bytes().splitlines(keepends=True)
    (cut / RESULTS_FILE).write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # the last row, cut mid-write
    capsys.readouterr()
    assert main(["report", str(cut), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"line {len(lines)}: unreadable row" in err and "--resume, which writes that line again" in err
    assert "remove the damaged line" not in err and len(err.splitlines()) == 1
    assert _run(cut, "--resume") == 0
    strip = lambda run: [(r.key, r.verdict, r.message) for r in iter_results(run)]
    assert strip(cut) == strip(clean)
    (cut / RESULTS_FILE).write_bytes(b"".join(lines[:-1]) + lines[-1][:40] + b"\n")  # whole, and damaged
    assert main(["report", str(cut), "--out", str(tmp_path / "merged")]) == 2
    assert "remove the damaged line" in capsys.readouterr().err
