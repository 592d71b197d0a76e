"""`run --jobs N` spreads the cases over N workers and writes what one worker writes: the same rows in the same
order, details, reports, drafts and reproducers, byte for byte but for the timings. A crash or a hang still costs
one case, and a run interrupted under --jobs resumes to the uninterrupted run's files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.adapters:"
# what differs between two runs of the same cases, whatever --jobs: the time each call took (results.jsonl's
# elapsed_s, junit.xml's time=) and when the run started and finished (run.json); run.json's `command` differs
# too where the command lines differ (--jobs given or not), and its `reference_cache` counts where one run found
# the cache the other filled (these runs use --no-cache)
TIMINGS = {"results.jsonl": (re.compile(r'"elapsed_s": [0-9.e+-]+'), '"elapsed_s": T'),
           "junit.xml": (re.compile(r'time="[0-9.]+"'), 'time="T"')}
RUN_TIMES = ("started", "finished")


def _cases(tmp_path: Path, ids: list[str]) -> Path:
    shapes = ["input: [[-1.0, -2.0], [-0.5, -3.0]], target: [[0.25, 0.75], [0.5, 0.5]]",
              "input: [-0.5, -1.5, -0.25], target: [0.5, 0.25, 0.25]"]
    lines = [f"- {{id: {name}, {shapes[i % 2]}, reduction: {('none', 'sum', 'mean')[i % 3]}, dtype: float64}}"
             for i, name in enumerate(ids)]
    path = tmp_path / "cases.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(adapter: str, cases: Path, out: Path, jobs: int, *extra: str) -> int:
    return main(["run", "--framework", ADAPTERS + adapter, "--suite", "none", "--cases", str(cases), "--out", str(out),
                 "--no-progress", "--no-cache", "--jobs", str(jobs), *extra])


def _files(out: Path) -> dict[str, bytes]:
    """Every file of a run directory, its timings blanked out (TIMINGS, RUN_TIMES)."""
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = path.relative_to(out).as_posix()
        data = path.read_bytes()
        if name in TIMINGS:
            pattern, blank = TIMINGS[name]
            data = pattern.sub(blank, data.decode()).encode()
        elif name == "run.json":
            manifest = json.loads(data)
            data = json.dumps({k: v for k, v in manifest.items() if k not in RUN_TIMES}, sort_keys=True).encode()
        files[name] = data
    return files


MIXED = [f"ok-{i:02d}" for i in range(24)]
for place, fault in ((3, "fault-off"), (9, "fault-nan"), (14, "fault-shape"), (20, "fault-raise"), (23, "fault-off-2")):
    MIXED.insert(place, fault)


@pytest.mark.parametrize("adapter, ids", [
    ("MixedFaultAdapter", MIXED),  # divergences of each kind: details, drafts, reproducers
    ("CrashWhileMinimisingAdapter", ["ok-a", "the-fault", "ok-b", "ok-c"]),  # a crash in a reproducer's minimising
])
def test_two_jobs_write_the_files_one_job_writes(tmp_path, adapter, ids):
    cases = _cases(tmp_path, ids)
    one, two = tmp_path / "one", tmp_path / "two"
    assert _run(adapter, cases, one, 1) == _run(adapter, cases, two, 2)
    assert any(r.verdict.is_divergence for r in iter_results(two)) and list((two / "repro").glob("*.py"))
    assert _files(two) == _files(one)


@pytest.mark.parametrize("adapter, verdict, extra, restarts", [
    # a crash of a worker that had answered other cases is made again on a fresh one (crashed again: replaced)
    ("SegfaultAdapter", "crash", (), 2),
    ("HangAdapter", "timeout", ("--timeout-s", "2"), 1),
])
def test_a_crash_or_a_hang_under_two_jobs_costs_its_case_only(tmp_path, adapter, verdict, extra, restarts):
    ids = [f"ok-{i:02d}" for i in range(40)]
    ids.insert(17, "the-fault")
    cases = _cases(tmp_path, ids)
    one, two = tmp_path / "one", tmp_path / "two"
    assert _run(adapter, cases, two, 2, "--no-repro", *extra) == 0
    rows = list(iter_results(two))
    assert [r.case_id for r in rows if r.verdict.value != "pass"] == ["the-fault"]
    assert {r.verdict.value for r in rows if r.case_id == "the-fault"} == {verdict}
    assert json.loads((two / "run.json").read_text())["worker_restarts"] == restarts
    assert _run(adapter, cases, one, 1, "--no-repro", *extra) == 0
    assert _files(two) == _files(one)


def _subprocess_run(tmp_path: Path, out: Path, jobs: int, *extra: str, wait: bool = True):
    args = [sys.executable, "-m", "conformance", "run", "--framework", ADAPTERS + "SlowAdapter", "--only",
            "fwd/*/float64/*", "--no-progress", "--no-cache", "--jobs", str(jobs), "--out", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    if wait:
        return subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _interrupt_at_a_third(proc, results: Path, total: int, signum: int, group: bool) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_bytes().splitlines()) >= total // 3:
            break
        time.sleep(0.01)
    (os.killpg if group else os.kill)(proc.pid, signum)
    proc.wait(60)


@pytest.mark.parametrize("signum, group, again", [(signal.SIGKILL, True, 2), (signal.SIGINT, False, 1)],
                         ids=["sigkill", "ctrl-c"])
def test_a_run_interrupted_under_two_jobs_resumes_to_the_files_of_one_job(tmp_path, signum, group, again):
    """Killed outright (parent and workers), or Ctrl-C to the parent, which stops its workers' threads while cases
    are in flight on both workers; the resumed run (under --jobs 2 again, or 1) ends with what an uninterrupted
    run of one worker writes."""
    clean = tmp_path / "clean"
    _subprocess_run(tmp_path, clean, 1)
    total = len((clean / "results.jsonl").read_text().splitlines())
    cut = tmp_path / "cut"
    proc = _subprocess_run(tmp_path, cut, 2, wait=False)
    _interrupt_at_a_third(proc, cut / "results.jsonl", total, signum, group)
    written = len((cut / "results.jsonl").read_bytes().splitlines())
    assert 0 < written < total, "the run was not interrupted halfway"
    status = json.loads((cut / "run.json").read_text())["status"]
    assert status == ("running" if signum == signal.SIGKILL else "interrupted")
    if signum == signal.SIGINT:
        assert proc.returncode != 0 and "Traceback" not in proc.stderr.read()
    _subprocess_run(tmp_path, cut, again, "--resume")
    strip = lambda rows: [(r.case_id, r.api, r.device, r.mode, r.part, r.verdict, r.message) for r in rows]
    assert strip(iter_results(cut)) == strip(iter_results(clean))  # in the same order
    assert (cut / "report.md").read_bytes() == (clean / "report.md").read_bytes()
    assert (cut / "summary.json").read_bytes() == (clean / "summary.json").read_bytes()


def test_jobs_is_checked_on_every_surface(tmp_path, capsys):
    cases = _cases(tmp_path, ["ok-a"])
    assert _run("NumpyAdapter", cases, tmp_path / "out", 0) == 2
    assert "--jobs: expected a whole number >= 1, got '0'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    from conformance import api
    from conformance.core.errors import UsageError
    from conformance.run.selection import CaseSelection

    with pytest.raises(UsageError, match=r"jobs: expected a whole number >= 1, got '0'"):
        api.run(ADAPTERS + "NumpyAdapter", selection=CaseSelection(suite="none", case_files=(str(cases),)), jobs=0)
    outcome = api.run(ADAPTERS + "NumpyAdapter", selection=CaseSelection(suite="none", case_files=(str(cases),)),
                      jobs=2, cache=False)
    assert [r.verdict.value for r in outcome.rows] == ["pass"]


@pytest.mark.parametrize("devices, workers", [(("cpu",), 2), (("gpu",), 1), ((), 1)])
def test_a_device_one_process_claims_whole_has_one_worker(tmp_path, monkeypatch, devices, workers):
    """JAX, TensorFlow and Paddle take most of an accelerator's memory when they load: a second worker on it would
    fail where one does not, so a run on such a device keeps one worker (Adapter.shared_device_kinds)."""
    loads = tmp_path / "loads"
    monkeypatch.setenv("KL_TEST_LOADS", str(loads))
    cases = _cases(tmp_path, [f"ok-{i:02d}" for i in range(4)])
    chosen = [arg for device in devices for arg in ("--device", device)]
    assert _run("AcceleratorAdapter", cases, tmp_path / "out", 2, *chosen) == 0
    assert loads.read_text().count("loaded") == workers


@pytest.mark.parametrize("mode_args, workers", [((), 1), (("--mode", "traced"), "per core"), (("--mode", "eager"), 1)])
def test_the_default_is_a_worker_per_core_where_a_run_compiles_and_one_where_every_call_is_eager(
        tmp_path, monkeypatch, mode_args, workers):
    """An eager run's cost is the parent's judging (a second worker only imports the framework again); a compiled
    mode's is the workers' compiling, which the cores share."""
    from conformance.run.jobs import available_cores

    if workers != 1 and available_cores() < 2:
        pytest.skip("one core here: every default is one worker")
    loads = tmp_path / "loads"
    monkeypatch.setenv("KL_TEST_LOADS", str(loads))
    cases = _cases(tmp_path, [f"ok-{i:02d}" for i in range(4)])
    assert main(["run", "--framework", "tests.faults.mode_adapters:CountedLoadsModedAdapter", "--suite", "none",
                 "--cases", str(cases), "--out", str(tmp_path / "out"), "--no-progress", "--no-cache",
                 *mode_args]) == 0
    assert loads.read_text().count("loaded") == (1 if workers == 1 else min(available_cores(), 4))  # 4 cases
