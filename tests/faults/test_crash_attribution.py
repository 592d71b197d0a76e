"""Crashes attributed to whoever crashed (issue 38, item 5): a worker killed inside the framework's call is a
framework crash (cause framework.crash, the signal and the framework's last output in the message), one that
hangs there a framework timeout; harness.isolation is left for a failure of the harness itself."""

from __future__ import annotations

from conformance.cli import main
from conformance.core.model import Verdict
from conformance.core.results import iter_results
from tests.faults.test_isolation import ADAPTERS, CASES, _case_file


def _rows(tmp_path, adapter, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none", "--out",
                 str(out), "--no-progress", *extra])
    return code, {r.case_id: r for r in iter_results(out)}


def test_a_signal_inside_the_frameworks_call_is_a_framework_crash(tmp_path):
    code, rows = _rows(tmp_path, "SegvInCallAdapter")
    fault = rows["the-fault"]
    assert code == 0 and fault.verdict is Verdict.CRASH
    assert fault.cause == "framework.crash", fault.cause
    assert "signal SIGSEGV" in fault.message and "inside its call" in fault.message
    assert "kernel: kl_div_forward read past the end of target" in fault.message  # its last stderr line
    assert {rows[i].verdict for i in ("ok-before", "ok-after", "ok-last")} == {Verdict.PASS}


def test_a_crash_of_one_call_of_several_is_that_calls_framework_crash(tmp_path):
    """Made again one call at a time, the call that kills the worker keeps the framework's cause."""
    code, _ = _rows(tmp_path, "OneApiCrashesAdapter")
    fault = {r.api: r for r in iter_results(tmp_path / "out") if r.case_id == "the-fault"}
    assert code == 0 and fault["numpy.kl_div"].verdict is Verdict.PASS
    crashed = fault["numpy.kl_div_crashing"]
    assert (crashed.verdict, crashed.cause) == (Verdict.CRASH, "framework.crash") and "SIGFPE" in crashed.message


def test_a_hang_inside_the_frameworks_call_is_a_framework_timeout(tmp_path):
    code, rows = _rows(tmp_path, "HangAdapter", "--timeout-s", "3")
    fault = rows["the-fault"]
    assert code == 0 and (fault.verdict, fault.cause) == (Verdict.TIMEOUT, "framework.timeout")
    assert "inside the" in fault.message


def test_a_worker_that_dies_outside_any_framework_call_is_the_harnesss_failure():
    """Killed between calls (here before the first batch reaches it), the worker failed, not the framework."""
    from conformance.cases.userfile import load_case_file
    from conformance.run.pool import WorkerPool
    from conformance.run.task import Task

    cases = load_case_file(_case_file())
    with WorkerPool(ADAPTERS + "NumpyAdapter", timeout_s=30) as pool:
        pool.start()
        pool._process.kill()
        pool._process.join()
        calls = (("numpy.kl_div", "cpu", "eager", "forward"),)
        outcomes = list(pool.run(Task(i, case, calls) for i, case in enumerate(cases)))
    failure = outcomes[0].failed(calls[0])
    assert failure.verdict is Verdict.CRASH and failure.cause == "harness.isolation"
    assert "outside any framework call" in failure.message and "signal SIGKILL" in failure.message
