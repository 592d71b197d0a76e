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
from conformance.core.results import iter_results

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


def test_a_worker_that_dies_while_more_cases_are_sent_costs_one_case(tmp_path):
    """More cases than the window: after the answer before the fault the parent sends the next case to a
    worker that is already dead (a broken pipe), which must count as that worker's crash, not end the run."""
    lines = [f"- {{id: ok-{i:02d}, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}"
             for i in range(60)]
    lines.insert(20, "- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}")
    cases = tmp_path / "many.yaml"
    cases.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTERS + "ExitAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress"])
    rows = {r.case_id: r for r in iter_results(out)}
    assert code == 0 and len(rows) == 61 and rows["the-fault"].verdict.value == "crash"
    assert all(r.verdict.value == "pass" for i, r in rows.items() if i != "the-fault")


def test_a_crash_while_minimising_a_reproducer_costs_that_call_only(tmp_path, capsys):
    """Reproducers are minimised by the run's worker: a crash there restarts it, and the reproducer keeps
    its whole case; the results, the reports and the other reproducers are untouched."""
    code, rows = _run(tmp_path, "CrashWhileMinimisingAdapter")
    assert code == 0 and rows["the-fault"].verdict.value == "value" and rows["ok-after"].verdict.value == "pass"
    scripts = sorted(p for p in (tmp_path / "out" / "repro").glob("*.py") if not p.name.endswith(".snippet.py"))
    assert [p.name.split("__")[0] for p in scripts] == ["the-fault"]
    script = scripts[0].read_text()
    assert "x_values = values([" in script and ", (1, 2))" in script  # whole case
    # its observation is the run's divergence, not the crash of a worker left dead by the last candidate
    assert ": value: " in script and "crash" not in script
    assert "Traceback" not in capsys.readouterr().err
    assert (tmp_path / "out" / "report.md").is_file()


def test_the_runs_reproducers_are_those_repro_all_writes_from_its_directory(tmp_path):
    """The run hands its own rows to the reproducer phase instead of reading results.jsonl back; the
    scripts must be exactly those `repro --all --from` writes from the finished directory."""
    lines = [f"- {{id: {name}, input: [[-1.0, -2.0], [-0.5, -3.0]], target: [[0.25, 0.75], [0.5, 0.5]], "
             f"reduction: {reduction}, dtype: float64}}"
             for name, reduction in [("ok-1", "sum"), ("fault-sum", "sum"), ("fault-none", "none"), ("ok-2", "none"),
                                     ("fault-mean", "mean")]]
    cases = tmp_path / "cases.yaml"
    cases.write_text("\n".join(lines) + "\n")
    out, again = tmp_path / "out", tmp_path / "again"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress"]) == 0
    # a "module:Class" adapter is imported only when the command line names it, never on run.json's word
    assert main(["repro", "--all", str(again), "--from", str(out), "--framework", ADAPTERS + "OffByOneAdapter"]) == 0
    # the run writes its one defect's reproducer, of its simplest row (reduction none): the very script
    # `repro --all` writes for that row beside the others'
    written = {p.name: p.read_text() for p in (out / "repro").iterdir() if not p.name.endswith(".snippet.py")}
    assert sorted(name.split("__")[0] for name in written) == ["fault-none"]
    every = {p.name: p.read_text() for p in again.glob("*.py")}
    assert sorted(name.split("__")[0] for name in every) == ["fault-mean", "fault-none", "fault-sum"]
    assert written.items() <= every.items()
    assert ", (1, 1))" in written[next(n for n in written if n.startswith("fault-none"))]  # minimised


def test_an_adapter_that_writes_no_reproducers_is_one_warning(tmp_path, capsys):
    code, rows = _run(tmp_path, "NanAdapter")
    assert code == 0 and rows["the-fault"].verdict.value == "nonfinite"
    err = capsys.readouterr().err
    assert "writes no reproducers" in err and "Traceback" not in err


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


def test_a_crash_blames_only_the_calls_that_crash(tmp_path):
    """A case's calls go to the worker together; when one kills it, each call is made again on its own, so the
    call that works is judged (a pass) and only the one that crashes is a crash. Before, both were crashes."""
    code, rows = _run(tmp_path, "OneApiCrashesAdapter")
    fault = {r.api: r for r in iter_results(tmp_path / "out") if r.case_id == "the-fault"}
    assert code == 0 and fault["numpy.kl_div"].verdict.value == "pass"
    crashed = fault["numpy.kl_div_crashing"]
    assert crashed.verdict.value == "crash" and "SIGFPE" in crashed.message
    assert {r.verdict.value for r in iter_results(tmp_path / "out") if r.case_id != "the-fault"} == {"pass"}


def test_a_crash_is_a_crash_of_its_own_call_only_where_a_fresh_worker_crashes_on_it(tmp_path):
    """OneFlow 0.9.0's graph mode: a graph that fails to compile (an error row) leaves the process aborting on its
    next call, whatever that call is; 91 rows of its modes run were crashes of calls that work in a fresh process.
    A call that crashes a worker that made other calls first is made again on a fresh worker, and is a crash only
    if it crashes there too."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("".join(f"- {{id: {name}, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                             "dtype: float64}\n" for name in ("ok-first", "poison-1", "ok-after", "the-fault",
                                                             "ok-last")))
    out = tmp_path / "out"
    assert main(["run", "--framework", ADAPTERS + "PoisoningAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    verdicts = {r.case_id: r.verdict.value for r in iter_results(out)}
    assert verdicts == {"ok-first": "pass", "poison-1": "error", "ok-after": "pass", "the-fault": "crash",
                        "ok-last": "pass"}, verdicts


def test_memory_budget_refuses_before_running(tmp_path):
    code, rows = _run(tmp_path, "NumpyAdapter", "--memory-budget-mb", "0.0001")
    assert code == 0
    assert all(r.verdict.value == "unsupported" and r.message.startswith("refused: needs about") for r in rows.values())


def test_a_case_in_another_input_space_is_no_row_and_not_fatal(tmp_path, capsys):
    """A probability-input case (Keras' dialect) on a log-input API: no expectation exists there, and none is
    computed. It used to be an `unsupported` row on every log-space API (824 per API in the default suite);
    the API cannot speak the case's dialect, so there is no row at all (the report shows n/a), and the run
    goes on."""
    cases = tmp_path / "prob.yaml"
    cases.write_text("- {id: prob-input, input: [[0.25, 0.75]], target: [[0.5, 0.5]], input_space: probability,"
                     " reduction: sum, dtype: float64}\n" + CASES)
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress"])
    rows = {r.case_id: r for r in iter_results(out)}
    assert code == 0 and "prob-input" not in rows
    assert rows["ok-last"].verdict.value == "pass"
    last = capsys.readouterr().out.splitlines()[-1]
    assert "1 cases in an input space its APIs do not take (no rows)" in last and "already done" not in last


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
    # the killed parent cannot remove its worker's log: it goes to this test's own directory, not /tmp
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, *args, "--out", str(killed)], env={**env, "TMPDIR": str(tmp_path / "tmp")},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    assert [p.name for p in killed.iterdir() if p.name.startswith(".junit-")]  # the report's parts, cut short
    assert json.loads((killed / "run.json").read_text())["status"] == "running"

    subprocess.run([sys.executable, *args, "--out", str(killed), "--resume"], check=True, env=env, capture_output=True)
    strip = lambda rows: [(r.case_id, r.api, r.device, r.verdict, r.message) for r in rows]
    assert strip(iter_results(killed)) == strip(iter_results(clean))
    assert _report_body(killed / "report.md") == _report_body(clean / "report.md")
    assert not [p.name for p in killed.iterdir() if p.name.startswith(".")]  # the killed run's parts are gone


def test_resume_refuses_results_of_another_spec(tmp_path, capsys):
    import yaml

    from conformance.core.specload import default_spec_path

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
    err = capsys.readouterr().err
    assert "another spec" in err and "--force instead of --resume" in err
    assert (out / "results.jsonl").read_text() == before  # nothing half-written


def test_ctrl_c_is_one_line_and_resume_continues(tmp_path):
    """Ctrl-C used to end in a KeyboardInterrupt traceback. The run cannot finish before the signal (it hangs
    on its fault case until told otherwise), so the test does not depend on the machine's speed: it used to
    signal a run that, under load, had already finished and exited 0."""
    cases = _cases(tmp_path)
    args = ["-m", "conformance", "run", "--framework", ADAPTERS + "HangWhileToldAdapter", "--suite", "none",
            "--cases", str(cases), "--timeout-s", "3600", "--no-progress", "--no-repro", "--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, *args], env={**env, "KL_TEST_HANG": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    results = tmp_path / "out" / "results.jsonl"
    deadline = time.monotonic() + 120  # a bound on a hang, never a timing: the run waits on the fault case
    while not (results.exists() and results.read_bytes().count(b"\n") >= 1):
        assert time.monotonic() < deadline and proc.poll() is None, "the run wrote no row"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("kl-conformance: interrupted")
    rows = list(iter_results(tmp_path / "out", complete_lines_only=True))
    assert [r.case_id for r in rows] == ["ok-before"]  # Ctrl-C is not a crash of the case it was on
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["status"] == "interrupted" and "Ctrl-C" in manifest["reason"]
    subprocess.run([sys.executable, *args, "--resume"], env=env, check=True, capture_output=True)
    assert [r.case_id for r in iter_results(tmp_path / "out")] == ["ok-before", "the-fault", "ok-after", "ok-last"]


def test_sending_to_a_worker_that_just_died_is_a_crash_not_a_broken_pipe():
    """The worker can die while the parent sends it the next batch (the planted `crash` variant did):
    the send must not end the run; the case in flight is a crash, and every other case still runs."""
    from conformance.cases.userfile import load_case_file
    from conformance.core.model import Verdict
    from conformance.run.pool import WorkerPool
    from conformance.run.task import Task

    cases = load_case_file(_case_file())
    with WorkerPool(ADAPTERS + "NumpyAdapter", timeout_s=30) as pool:
        pool.start()
        pool._process.kill()  # dies before the first batch is sent: the send meets a closed pipe
        pool._process.join()
        calls = (("numpy.kl_div", "cpu", "eager", "forward"),)
        outcomes = list(pool.run(Task(i, case, calls) for i, case in enumerate(cases)))
    assert [o.task.index for o in outcomes] == list(range(len(cases)))
    assert outcomes[0].failure is Verdict.CRASH and all(o.failure is None for o in outcomes[1:])
    assert pool.restarts == 1


def _case_file() -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "cases.yaml"
    path.write_text(CASES)
    return path


def test_a_worker_that_dies_while_the_next_cases_are_sent_costs_one_case(tmp_path):
    """The worker answers a case and dies on the next one before the parent sends it more: the send
    finds a closed pipe, and that is a crash of the case that killed it, not of the run."""
    import numpy as np

    from conformance.core.case import Case, DtypePair, Params
    from conformance.run.pool import WorkerPool
    from conformance.run.task import Task

    def case(case_id):
        return Case(id=case_id, params=Params("sum", False, None, None), input=np.array([-1.0]),
                    target=np.array([0.5]), dtype=DtypePair("float64", "float64"), family="test")

    calls = (("numpy.kl_div", "cpu", "eager", "forward"),)

    def tasks():
        yield Task(0, case("ok-0"), calls)
        yield Task(1, case("the-fault"), calls)
        time.sleep(2)  # the parent is busy (judging) while the worker dies on the-fault
        yield Task(2, case("ok-2"), calls)

    with WorkerPool(ADAPTERS + "AbortAdapter", window=2) as pool:
        pool.start()
        outcomes = list(pool.run(tasks()))
    assert [o.task.index for o in outcomes] == [0, 1, 2]
    assert [o.failure.value if o.failure else "answered" for o in outcomes] == ["answered", "crash", "answered"]


def test_large_cases_past_the_window_do_not_deadlock_the_pipe():
    """More large cases than the window: each task (2.4 MB of arrays) and each answer (its 2.4 MB value) is
    larger than a socket's buffer. The worker reads its next batch only after sending its answers, so a
    parent that sent the next task from the thread that reads the answers blocked on that send while the
    worker blocked on its own: both hung for good, past every timeout (found with a user file of 24 cases
    of 300,000 elements on torch). Every case is answered, in order, well within the watchdog."""
    import threading

    import numpy as np

    from conformance.core.case import Case, DtypePair, Params
    from conformance.run.pool import WorkerPool
    from conformance.run.task import Task

    n, cases = 300_000, 24
    x, t = np.full(n, -1.0), np.full(n, 0.5)
    calls = (("numpy.kl_div", "cpu", "eager", "forward"),)
    tasks = [Task(i, Case(id=f"big-{i}", params=Params("none", False), input=x, target=t,
                          dtype=DtypePair("float64", "float64"), family="test"), calls) for i in range(cases)]
    answered: list[tuple[int, tuple]] = []
    with WorkerPool(ADAPTERS + "NumpyAdapter", timeout_s=30) as pool:
        pool.start()

        def consume():
            for outcome in pool.run(iter(tasks)):
                time.sleep(0.01)  # the parent judging a case: the worker's answers queue up meanwhile
                answered.append((outcome.task.index, outcome.observations[calls[0]].shape))
        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        consumer.join(60)
        hung = consumer.is_alive()
        if hung:  # what ends a deadlock: a send to a dead worker fails
            pool._process.kill()
    assert not hung, f"deadlocked after {len(answered)} of {cases} answers"
    assert answered == [(i, (n,)) for i in range(cases)]


MAIN_SCRIPT = """
import sys
from pathlib import Path

with open(sys.argv[1], "a") as marker:  # every run of this file as a script leaves one line
    marker.write(__name__ + "\\n")

from conformance.run.pool import WorkerPool

if __name__ == "__main__":
    main = sys.modules["__main__"]
    with WorkerPool("tests.faults.adapters:NumpyAdapter") as pool:
        info = pool.start()
    assert sys.modules["__main__"] is main, "the caller's main module must be put back"
    print(info.devices)
"""


def test_the_worker_does_not_run_the_callers_main_script_again(tmp_path):
    """A spawned child runs the parent's main file again before its target (as __mp_main__); for the
    `kl-conformance` script that is the whole CLI's import on the worker's start. The worker skips it."""
    script, marker = tmp_path / "caller.py", tmp_path / "marker.txt"
    script.write_text(MAIN_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), root]))}
    done = subprocess.run([sys.executable, str(script), str(marker)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cpu" in done.stdout  # the worker started and answered
    assert marker.read_text().splitlines() == ["__main__"]  # not also "__mp_main__" from the worker


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_worker_closes_its_adapter_before_it_is_stopped(tmp_path, monkeypatch, jobs):
    """R torch's adapter ends its R on close, and R then removes its temporary files; each of the run's workers
    must get to close it (once for the run and its reproducers) before the harness kills the worker."""
    mark = tmp_path / "closed"
    monkeypatch.setenv("KL_TEST_CLOSED_MARK", str(mark))
    code, rows = _run(tmp_path, "ClosingAdapter", "--jobs", str(jobs))
    assert code == 0 and rows["ok-last"].verdict.value == "pass"
    assert mark.read_text() == "closed\n" * jobs


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_killed_worker_leaves_nothing_of_its_helper_processes(tmp_path, monkeypatch, jobs):
    """R torch's R dies with a worker killed by SIGKILL (a hung case), and then nobody in that worker can
    remove R's TMPDIR: the pool made the worker's scratch directory, and removes it at the end of the run."""
    mark = tmp_path / "helpers"
    monkeypatch.setenv("KL_TEST_HELPER_MARK", str(mark))
    code, rows = _run(tmp_path, "KilledWithHelperAdapter", "--jobs", str(jobs))
    assert code == 0 and rows["the-fault"].verdict.value == "crash" and "SIGKILL" in rows["the-fault"].message
    assert rows["ok-last"].verdict.value == "pass"
    helper_dirs = mark.read_text().split()
    # each worker's helper, the one of the fresh worker the killed case was made again on (it crashed a worker
    # that had answered other cases), and the one of the worker that replaced that one
    assert len(helper_dirs) == jobs + 2
    assert all(Path(d).name.startswith("kl-rsession-") for d in helper_dirs)
    assert [d for d in helper_dirs if Path(d).exists()] == []
