"""What the second probe round of the run, gate, reader and API surfaces found, each fixed: a folder inside
--out linked elsewhere, a gate passing runs whose own record says nothing of their counts, a FIFO given as an
input file, a switch of the API given as text, and an unbounded --samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conformance.api as kl
from conformance.cli import main

ROOT = Path(__file__).resolve().parents[2]
OFF_BY_ONE = "tests.faults.adapters:OffByOneAdapter"
CASES = """
- {id: ok, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
"""


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "cases.yaml").write_text(CASES)
    out = tmp_path / "run"
    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(tmp_path / "cases.yaml"), "--suite", "none",
                 "--out", str(out), "--no-progress"]) == 1 or (out / "results.jsonl").is_file()
    return out


@pytest.mark.parametrize("how", ["--force", "--resume"])
@pytest.mark.parametrize("folder", ["repro", "issues"])
def test_a_folder_in_out_linked_elsewhere_is_refused_and_nothing_lands_there(run_dir, tmp_path, capsys, how, folder):
    assert (run_dir / folder).is_dir()
    victim = tmp_path / "victim"
    victim.mkdir()
    for entry in (run_dir / folder).iterdir():
        entry.unlink()
    (run_dir / folder).rmdir()
    (run_dir / folder).symlink_to(victim)
    capsys.readouterr()
    code = main(["run", "--framework", OFF_BY_ONE, "--cases", str(tmp_path / "cases.yaml"), "--suite", "none",
                 "--out", str(run_dir), "--no-progress", how])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "symbolic link" in err and folder in err, err
    assert list(victim.iterdir()) == []


def test_a_gate_fails_closed_on_a_run_json_without_counts(run_dir, tmp_path, capsys):
    rows = (run_dir / "results.jsonl").read_text().splitlines()
    (run_dir / "results.jsonl").write_text("\n".join(r for r in rows if "the-fault" not in r) + "\n")
    manifest = json.loads((run_dir / "run.json").read_text())
    del manifest["counts"], manifest["cases"]
    (run_dir / "run.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "merged"), "--strict"]) == 3
    assert "records no counts" in capsys.readouterr().err
    assert kl.gate(run_dir, strict=True).code == 3


def test_a_gate_fails_closed_on_results_without_their_run_json(run_dir, tmp_path, capsys):
    rows = (run_dir / "results.jsonl").read_text().splitlines()
    (run_dir / "results.jsonl").write_text("\n".join(r for r in rows if "the-fault" not in r) + "\n")
    (run_dir / "run.json").unlink()
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "merged"), "--strict"]) == 3
    assert "have no run.json" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--cases", "--known"])
def test_a_fifo_given_as_an_input_file_is_refused_at_once(tmp_path, option):
    fifo = tmp_path / "input.yaml"
    os.mkfifo(fifo)
    extra = ["--cases", str(fifo)] if option == "--cases" else ["--known", str(fifo)]
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--framework", OFF_BY_ONE, "--suite", "none",
                           *(["--only", "none"] if option == "--known" else []), *extra, "--out",
                           str(tmp_path / "out"), "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_switch_of_the_api_given_as_text_is_refused_and_the_run_kept(run_dir, tmp_path):
    before = sorted(p.name for p in run_dir.iterdir())
    selection = kl.Selection(case_files=(str(tmp_path / "cases.yaml"),), suite="none")
    with pytest.raises(kl.ConformanceError, match="force: expected True or False, got 'no'"):
        kl.run(OFF_BY_ONE, selection=selection, out=run_dir, force="no")
    assert sorted(p.name for p in run_dir.iterdir()) == before
    with pytest.raises(kl.ConformanceError, match="strict: expected True or False"):
        kl.gate(run_dir, strict="no")


def test_samples_are_bounded_on_every_surface(capsys):
    assert main(["cases", "--samples", "1000000000", "--count"]) == 2
    assert "expected a whole number <= 1000" in capsys.readouterr().err
    with pytest.raises(kl.ConformanceError, match="<= 1000"):
        kl.cases(kl.Selection(samples=10**9))
