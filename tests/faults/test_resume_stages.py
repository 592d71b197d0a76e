"""A resumed run redoes what its killed command did not finish (issue 40): run.json records each output stage
once it is done, and --resume redoes every stage it does not record (a run.json older than the record: every
stage); a resumed command that selects otherwise than the run it continues is refused in one line naming the
option (and a changed file by its path), exit 2, with nothing written. Runs use the NumPy stand-ins of
tests/faults/adapters.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.results import iter_results
from tests.faults.adapters import OffByOneAdapter

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64, grad: [input]}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: other-fault, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
STALL_AFTER, STALLED = "KL_TEST_STALL_AFTER", "KL_TEST_STALLED"


class StallAfterReportAdapter(OffByOneAdapter):
    """Off by one on the fault cases; once the file $KL_TEST_STALL_AFTER exists (the run's report.md, written
    after every row), any call writes its process id into $KL_TEST_STALLED and never returns: the run is held
    in its reproducer stage, where the test kills it."""

    def run(self, case, api, device, part):
        after = os.environ.get(STALL_AFTER)
        if after and os.path.exists(after):
            Path(os.environ[STALLED]).write_text(str(os.getpid()))
            time.sleep(600)
        return super().run(case, api, device, part)


def _args(tmp_path, adapter="OffByOneAdapter", out="out") -> list[str]:
    cases = tmp_path / "cases.yaml"
    if not cases.exists():
        cases.write_text(CASES)
    return ["run", "--framework", adapter if ":" in adapter else ADAPTERS + adapter, "--cases", str(cases),
            "--suite", "none", "--out", str(tmp_path / out), "--no-progress"]


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _verdicts(run_dir: Path) -> dict[str, int]:
    return dict(Counter(r.verdict.value for r in iter_results(run_dir)))


def test_a_kill_between_the_reports_and_the_reproducers_is_redone_by_resume(tmp_path):
    """SIGKILL once the reports were written and before the reproducers were: --resume exited 0 with status
    `complete` and every reproducer missing. run.json now records the stages done, and --resume writes the
    reproducers (and drafts) the killed command did not."""
    assert main(_args(tmp_path, out="clean")) == 0
    expected = sorted(p.name for p in (tmp_path / "clean" / "repro").iterdir())
    assert len(expected) == 2  # one per fault case: the uninterrupted run's reproducers

    killed = tmp_path / "out"
    stalled = tmp_path / "stalled"
    (tmp_path / "tmp").mkdir()  # the killed parent cannot remove its worker's log: kept in this test's directory
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path / "tmp"),
           STALL_AFTER: str(killed / "report.md"), STALLED: str(stalled)}
    stall = "tests.faults.test_resume_stages:StallAfterReportAdapter"
    log = tmp_path / "killed.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "conformance", *_args(tmp_path, stall)], env=env,
                                start_new_session=True, stdout=sink, stderr=sink)
    deadline = time.monotonic() + 120
    while not stalled.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    held = stalled.exists()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if held:
        try:  # the worker, should it have left the process group
            os.kill(int(stalled.read_text() or 0), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    assert held, f"the run never reached its reproducer stage: {log.read_text()}"
    before = _manifest(killed)
    assert before["status"] == "complete" and (killed / "report.md").is_file()
    assert before["stages"] == ["rows", "reports"]
    assert not (killed / "repro").exists()

    assert main([*_args(tmp_path, stall), "--resume"]) == 0  # $KL_TEST_STALL_AFTER is unset here: no stall
    assert sorted(p.name for p in (killed / "repro").iterdir()) == expected
    assert _manifest(killed)["stages"] == ["rows", "reports", "reproducers", "drafts"]
    assert sorted(p.name for p in (killed / "issues").iterdir()) == \
        sorted(p.name for p in (tmp_path / "clean" / "issues").iterdir())
    assert _manifest(killed)["counts"] == _verdicts(killed) == _verdicts(tmp_path / "clean")


def test_an_older_run_json_without_the_stage_record_resumes_by_redoing_every_stage(tmp_path):
    """A run.json written before the stage record says nothing of what was done: --resume redoes every output
    stage (it does not refuse)."""
    assert main(_args(tmp_path)) == 0
    out = tmp_path / "out"
    expected = sorted(p.name for p in (out / "repro").iterdir())
    manifest = _manifest(out)
    del manifest["stages"]
    (out / "run.json").write_text(json.dumps(manifest))
    for path in (out / "repro").iterdir():
        path.unlink()
    assert main([*_args(tmp_path), "--resume"]) == 0
    assert sorted(p.name for p in (out / "repro").iterdir()) == expected
    assert _manifest(out)["stages"] == ["rows", "reports", "reproducers", "drafts"]


@pytest.mark.parametrize("changed", [["--part", "forward"], ["--api", "numpy.kl_div"], ["--device", "cpu"],
                                     ["--mode", "shifted"], ["--reduction", "sum"], ["--only", "ok-*"],
                                     ["--seed", "3"], ["--samples", "2"], ["--memory-budget-mb", "0.001"],
                                     ["--timeout-s", "5"], ["--timeout-s", "inf"]])
def test_resume_refuses_a_changed_selection_in_one_line(tmp_path, capsys, changed):
    """`--resume --api X` or `--part X` marked `complete` a run whose rows mixed two selections; so did another
    memory budget (its refused rows beside the judged ones) or time limit (timeouts beside passes)."""
    args = _args(tmp_path, "ModalAdapter")
    assert main(args) == 0
    before = _files(tmp_path / "out")
    capsys.readouterr()
    assert main([*args, "--resume", *changed]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and changed[0] in err[0] and "Traceback" not in err[0]
    assert _files(tmp_path / "out") == before


def test_a_run_of_0_14_3_that_recorded_no_budget_or_time_limit_resumes(tmp_path):
    args = _args(tmp_path)
    assert main(args) == 0
    manifest = _manifest(tmp_path / "out")
    assert manifest["selection"]["memory_budget_mb"] == 8192 and manifest["selection"]["timeout_s"] == 60.0
    for name in ("memory_budget_mb", "timeout_s"):
        del manifest["selection"][name]
    (tmp_path / "out" / "run.json").write_text(json.dumps(manifest))
    assert main([*args, "--resume"]) == 0


def test_a_run_stopped_before_its_first_row_resumes_as_it_said(tmp_path, capsys, monkeypatch):
    """Stopped after its run.json and before results.jsonl, a run said "Continue a run with the same command and
    --resume", which then refused: "no results.jsonl here"."""
    import conformance.run.runner as runner

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    args = _args(tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(runner.ResultsWriter, "__init__", stopped)
        assert main(args) == 130
    assert "--resume" in capsys.readouterr().err and not (tmp_path / "out" / "results.jsonl").exists()
    assert main([*args, "--resume"]) == 0
    assert main([*_args(tmp_path, out="whole")]) == 0
    assert _verdicts(tmp_path / "out") == _verdicts(tmp_path / "whole")
    # and a directory of another framework is refused though it holds no row yet
    (tmp_path / "out" / "results.jsonl").unlink()
    capsys.readouterr()
    assert main([*_args(tmp_path, "NumpyAdapter"), "--resume"]) == 2
    assert "this directory holds a run of" in capsys.readouterr().err


def test_resume_names_a_changed_case_file_not_its_digest(tmp_path, capsys):
    args = _args(tmp_path)
    assert main(args) == 0
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES + "- {id: added, input: [[-1.0]], target: [[1.0]], reduction: sum, dtype: float64}\n")
    manifest = _manifest(tmp_path / "out")
    before = _files(tmp_path / "out")
    capsys.readouterr()
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--cases {cases}" in err[0]
    assert not any(digest in err[0] for digest in manifest["selection"]["case_files"])
    assert _files(tmp_path / "out") == before


def test_a_stop_among_the_reproducers_moves_leaves_none_resume_takes_for_the_users(tmp_path, capsys, monkeypatch):
    """A Ctrl-C after the first reproducer moved into repro/, before run.json recorded it: --resume warned "not
    written: ... a file kl-conformance did not write there" and kept the stale script, and so did --force."""
    real = os.replace

    def stopped_after_one(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if f"{os.sep}repro{os.sep}" in str(dst):
            raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", stopped_after_one)
        assert main(_args(tmp_path)) == 130
    capsys.readouterr()
    assert main([*_args(tmp_path), "--resume"]) == 0
    assert "not written" not in capsys.readouterr().err
    assert main(_args(tmp_path, out="whole")) == 0
    out, whole = tmp_path / "out", tmp_path / "whole"
    assert sorted(p.name for p in (out / "repro").iterdir()) == sorted(p.name for p in (whole / "repro").iterdir())
    assert {w for w in _manifest(out)["written"] if w.startswith("repro/")} == \
        {w for w in _manifest(whole)["written"] if w.startswith("repro/")}


def test_a_ctrl_c_inside_an_atomic_write_is_an_interruption_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A Ctrl-C landing as os.fdopen returned (its file object dropped, the descriptor closed) became "the run
    failed: ... OSError: [Errno 9] Bad file descriptor", exit 3, and left issues/.NAME.md.XXXXXXXX, which neither
    --resume nor --force removed (they looked at the top of --out only)."""
    real = os.fdopen
    armed = [True]

    def dropped(fd, *args, **kwargs):
        if armed[0] and f"{os.sep}issues{os.sep}" in os.readlink(f"/proc/self/fd/{fd}"):
            armed[0] = False
            real(fd, *args, **kwargs)  # made and dropped at once: the descriptor is closed
            raise KeyboardInterrupt
        return real(fd, *args, **kwargs)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file a descriptor is")
    with monkeypatch.context() as patched:
        patched.setattr(os, "fdopen", dropped)
        assert main(_args(tmp_path)) == 130
    out = tmp_path / "out"
    assert not [p.name for p in (out / "issues").iterdir() if p.name.startswith(".")]
    # what a SIGKILL before the rename leaves, in both of the harness's folders: gone on --resume and on --force
    for folder in ("issues", "repro"):
        (out / folder).mkdir(exist_ok=True)
        (out / folder / ".numpy-test-0123456789.md.k2x_9abc").write_text("half")
    (out / "issues" / ".mine").write_text("a file of the user's")
    assert main([*_args(tmp_path), "--resume"]) == 0
    assert main(_args(tmp_path, out="whole")) == 0
    leftover = sorted(p.name for folder in ("issues", "repro") for p in (out / folder).iterdir())
    assert leftover == sorted([".mine", *(p.name for folder in ("issues", "repro")
                                          for p in (tmp_path / "whole" / folder).iterdir())])
    (out / "repro" / ".x.py.abcdefgh").write_text("half")
    assert main([*_args(tmp_path), "--force"]) == 0
    assert not (out / "repro" / ".x.py.abcdefgh").exists() and (out / "issues" / ".mine").exists()
