"""A crash, hang, raise or garbage answer on one case is recorded, and the run goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.results import iter_results

CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
- {id: ok-last, input: [-0.5], target: [0.5], reduction: sum, dtype: float64}
"""
ADAPTERS = "tests.faults.adapters:"


def _run(tmp_path, adapter, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", *extra])
    return code, {r.case_id: r for r in iter_results(out)}


@pytest.mark.parametrize("adapter, verdict, words", [
    ("SegfaultAdapter", "crash", ["signal SIGSEGV", "about to dereference NULL"]),
    ("AbortAdapter", "crash", ["signal SIGABRT", "fatal: giving up"]),
    ("KillSelfAdapter", "crash", ["signal SIGKILL"]),
    ("ExitAdapter", "crash", ["exit code 3"]),
])
def test_a_dying_worker_costs_one_case(tmp_path, adapter, verdict, words):
    code, rows = _run(tmp_path, adapter)
    assert code == 0
    assert rows["the-fault"].verdict.value == verdict
    for word in words:
        assert word in rows["the-fault"].message, rows["the-fault"].message
    assert [rows[i].verdict.value for i in ("ok-before", "ok-after", "ok-last")] == ["pass", "pass", "pass"]


def test_a_hang_is_a_timeout_and_the_worker_is_replaced(tmp_path):
    start = time.monotonic()
    code, rows = _run(tmp_path, "HangAdapter", "--timeout-s", "3")
    assert code == 0 and time.monotonic() - start < 60
    assert rows["the-fault"].verdict.value == "timeout" and "3 s" in rows["the-fault"].message
    assert [rows[i].verdict.value for i in ("ok-before", "ok-after", "ok-last")] == ["pass", "pass", "pass"]


@pytest.mark.parametrize("adapter, verdict, words", [
    ("RaisingAdapter", "error", "AdapterError: adapter raised"),
    ("WrongTypeAdapter", "error", "not an Observation"),
    ("WrongShapeAdapter", "shape", "shape: got (7, 7), expected ()"),
    ("NanAdapter", "nonfinite", "got nan"),
])
def test_garbage_is_judged_not_fatal(tmp_path, adapter, verdict, words):
    code, rows = _run(tmp_path, adapter)
    assert code == 0
    assert rows["the-fault"].verdict.value == verdict and words in rows["the-fault"].message
    assert rows["ok-last"].verdict.value == "pass"


def test_memory_budget_refuses_before_running(tmp_path):
    code, rows = _run(tmp_path, "NumpyAdapter", "--memory-budget-mb", "0.0001")
    assert code == 0
    assert all(r.verdict.value == "unsupported" and r.message.startswith("refused: needs about") for r in rows.values())


def test_unknown_api_and_device_list_the_valid_ones(tmp_path, capsys):
    for flag, value, valid in (("--api", "numpy.kl", "['numpy.kl_div']"), ("--device", "tpu", "['cpu']")):
        code = main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases",
                     str(_cases(tmp_path)), "--out", str(tmp_path / "o"), flag, value])
        assert code == 2
        assert valid in capsys.readouterr().err
        assert not (tmp_path / "o").exists()  # nothing written


def test_unwritable_output_directory_is_refused(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases",
                 str(_cases(tmp_path)), "--out", str(blocker / "out")])
    assert code == 2 and "cannot write to the output directory" in capsys.readouterr().err


def _cases(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CASES)
    return path


def _report_body(path: Path) -> str:
    return path.read_text()


def test_sigkill_halfway_then_resume_gives_the_uninterrupted_report(tmp_path):
    """Kill the whole run (parent and worker) mid-way, resume, and compare with a clean run."""
    args = ["-m", "conformance", "run", "--framework", ADAPTERS + "SlowAdapter", "--only", "fwd/*/float64/*",
            "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    clean = tmp_path / "clean"
    subprocess.run([sys.executable, *args, "--out", str(clean)], check=True, env=env, capture_output=True)
    total = len((clean / "results.jsonl").read_text().splitlines())

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, *args, "--out", str(killed)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = killed / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if results.exists() and len(results.read_bytes().splitlines()) >= total // 3:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(results.read_bytes().splitlines())
    assert 0 < written < total, "the run was not interrupted halfway"
    assert json.loads((killed / "run.json").read_text())["status"] == "running"

    subprocess.run([sys.executable, *args, "--out", str(killed), "--resume"], check=True, env=env, capture_output=True)
    strip = lambda rows: [(r.case_id, r.api, r.device, r.verdict, r.message) for r in rows]
    assert strip(iter_results(killed)) == strip(iter_results(clean))
    assert _report_body(killed / "report.md") == _report_body(clean / "report.md")


def test_resume_refuses_results_of_another_spec(tmp_path, capsys):
    import yaml
    from conformance.specload import default_spec_path

    out = tmp_path / "out"
    cases = _cases(tmp_path)
    assert main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases", str(cases),
                 "--out", str(out), "--no-progress"]) == 0
    data = yaml.safe_load(default_spec_path().read_text())
    data["tolerance"]["pointwise"]["factor"] = 16
    other = tmp_path / "other-spec.yaml"
    other.write_text(yaml.safe_dump(data))
    before = (out / "results.jsonl").read_text()
    assert main(["--spec", str(other), "run", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none",
                 "--cases", str(cases), "--out", str(out), "--resume"]) == 2
    assert "results were made with spec" in capsys.readouterr().err
    assert (out / "results.jsonl").read_text() == before  # nothing half-written
