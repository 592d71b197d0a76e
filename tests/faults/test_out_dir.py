"""The output directory: nothing written on bad input, no stale file beside new results, --resume only
continues the same run. Runs use the honest NumPy stand-in of tests/faults/adapters.py."""

from __future__ import annotations

import json
import os
import stat

import pytest

from conformance.cli import main
from conformance.core.model import FORMAT_VERSION
from conformance.core.results import iter_results

CASES = """
- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: two, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
NUMPY = "tests.faults.adapters:NumpyAdapter"


def _cases(tmp_path, text=CASES, name="cases.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(tmp_path, *extra, out=None, cases=None):
    return main(["run", "--framework", NUMPY, "--suite", "none", "--cases", str(cases or _cases(tmp_path)),
                 "--out", str(out or tmp_path / "out"), "--no-progress", *extra])


def _listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_device_that_is_absent_writes_nothing(tmp_path, capsys):
    """It used to be found only after the output directory and cases/ were written."""
    out = tmp_path / "out"
    code = main(["run", "--framework", "tests.faults.adapters:CpuOnlyAdapter", "--device", "cuda", "--suite", "none",
                 "--cases", str(_cases(tmp_path)), "--out", str(out)])
    assert code == 2 and "device 'cuda' is not present" in capsys.readouterr().err
    assert not out.exists()


def test_resuming_a_directory_that_does_not_exist_is_refused_and_makes_none(tmp_path, capsys):
    out = tmp_path / "never-ran"
    assert _run(tmp_path, "--resume", out=out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume: no such directory to resume" in err[0], err
    assert not out.exists()


def test_a_non_empty_output_directory_needs_force_or_resume(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(tmp_path) == 0
    before = _listing(out)
    assert _run(tmp_path) == 2
    err = capsys.readouterr().err
    assert "the output directory is not empty" in err and "--force" in err and "--resume" in err
    assert _listing(out) == before


def test_force_clears_what_an_earlier_run_wrote(tmp_path):
    """Stale reproducers and baseline.json used to survive beside the new results; what the user put there
    stays, even in the harness's own folders."""
    out = tmp_path / "out"
    fault = "- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
    cases = _cases(tmp_path, CASES + fault, name="with-fault.yaml")
    assert main(["run", "--framework", "tests.faults.adapters:OffByOneAdapter", "--suite", "none", "--cases",
                 str(cases), "--out", str(out), "--no-progress", "--baseline", str(_baseline(tmp_path))]) == 0
    assert (out / "baseline.json").exists() and list((out / "repro").iterdir())
    (out / "cases" / "mine.yaml").write_text("mine")  # not the harness's: kept
    (out / "notes.txt").write_text("mine")
    assert _run(tmp_path, "--force") == 0
    assert not (out / "baseline.json").exists() and not (out / "repro").exists()
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["0-cases.yaml", "mine.yaml"]
    assert (out / "notes.txt").read_text() == "mine"
    assert len(list(iter_results(out))) == 2


def _baseline(tmp_path):
    base = tmp_path / "base"
    assert _run(tmp_path, out=base) == 0
    return base


def test_resume_and_force_together_are_refused(tmp_path, capsys):
    assert _run(tmp_path, "--resume", "--force") == 2
    assert "contradict" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, words", [
    (["--seed", "7"], "--seed"),
    (["--only", "one"], "--only"),
    (["--shard", "1/1"], "--shard"),
    (["--samples", "2"], "--samples"),
    ("edit the case file", "--cases"),
])
def test_resume_refuses_another_selection(tmp_path, capsys, change, words):
    """--resume --seed 7 over a default-seed run used to skip everything and record seed 7."""
    cases = _cases(tmp_path)
    assert _run(tmp_path, cases=cases) == 0
    out = tmp_path / "out"
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text().splitlines(True)[0])  # interrupted
    before = {p: (out / p).read_bytes() for p in ("results.jsonl", "run.json")}
    if change == "edit the case file":
        cases.write_text(CASES.replace("-0.5, -1.5", "-0.5, -1.25"))
        change = []
    assert _run(tmp_path, "--resume", *change, cases=cases) == 2
    err = capsys.readouterr().err
    assert f"--resume: this directory was run with {words}" in err and "Fix:" in err, err
    assert {p: (out / p).read_bytes() for p in before} == before  # nothing written


def test_resume_with_the_same_selection_finishes_the_run(tmp_path):
    assert _run(tmp_path, "--seed", "5") == 0
    out = tmp_path / "out"
    full = (out / "results.jsonl").read_text().splitlines(True)
    (out / "results.jsonl").write_text(full[0] + full[1][:20])  # one row, then a row cut short
    assert _run(tmp_path, "--seed", "5", "--resume") == 0
    rows = list(iter_results(out))
    assert [r.case_id for r in rows] == ["one", "two"] and {r.seed for r in rows} == {5}


def test_every_file_written_honours_the_umask(tmp_path):
    saved = os.umask(0o022)
    try:
        assert _run(tmp_path) == 0
        assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "merged")]) == 0
    finally:
        os.umask(saved)
    for directory in (tmp_path / "out", tmp_path / "merged"):
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.rglob("*") if p.is_file()}
        assert modes and set(modes.values()) == {0o644}, modes


def test_report_validates_before_creating_its_output_directory(tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["report", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no results.jsonl here" in capsys.readouterr().err
    assert not out.exists()


def test_report_into_one_of_its_runs_is_refused(tmp_path, capsys):
    assert _run(tmp_path) == 0
    before = _listing(tmp_path / "out")
    assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "out"), "--force"]) == 2
    assert "one of the runs to merge" in capsys.readouterr().err
    assert _listing(tmp_path / "out") == before


def test_rows_carry_seed_digest_and_format_version(tmp_path):
    assert _run(tmp_path, "--seed", "11") == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["format_version"] for r in rows} == {FORMAT_VERSION} and {r["seed"] for r in rows} == {11}
    assert len({r["case_digest"] for r in rows}) == 2
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert manifest["format_version"] == summary["format_version"] == FORMAT_VERSION


def test_an_api_named_twice_runs_once(tmp_path):
    """`--api A --api A` used to run every case twice and write each row twice."""
    assert _run(tmp_path, "--api", "numpy.kl_div", "--api", "numpy.kl_div", "--device", "cpu", "--device", "cpu") == 0
    assert len(list(iter_results(tmp_path / "out"))) == 2


def _as_format_version(run_dir, version):
    """Rewrite a run as an older harness would have written it."""
    path = run_dir / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**row, "format_version": version}) + "\n" for row in rows))
    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, "format_version": version}))


def test_a_run_of_an_older_format_is_refused_by_report_baseline_and_resume_in_one_line(tmp_path, capsys):
    old = tmp_path / "old"
    assert _run(tmp_path, out=old) == 0
    _as_format_version(old, FORMAT_VERSION - 1)
    capsys.readouterr()
    for command in (["report", str(old), "--out", str(tmp_path / "merged")],
                    ["run", "--framework", NUMPY, "--suite", "none", "--cases", str(_cases(tmp_path)),
                     "--out", str(tmp_path / "new"), "--baseline", str(old)],
                    ["run", "--framework", NUMPY, "--suite", "none", "--cases", str(_cases(tmp_path)),
                     "--out", str(old), "--resume"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"format version {FORMAT_VERSION - 1}" in err and "re-baseline" in err
    assert not (tmp_path / "merged").exists() and not (tmp_path / "new").exists()
