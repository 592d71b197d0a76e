"""The pytest plugin (conformance/pytest_plugin.py), run as a maintainer runs it: a pytest session in a project
of their own, with the NumPy stand-in adapters as the framework. Each session is a subprocess, so that the
plugin loads through its entry point as it does in someone else's project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
"""
OFF_BY_ONE = "tests.faults.adapters:OffByOneAdapter"
FRAMEWORKS = ("torch", "jax", "jaxlib", "tensorflow", "keras", "paddle", "mindspore", "oneflow", "mlx", "optax",
              "flax")


@pytest.fixture
def project(tmp_path):
    """A maintainer's project: one test of their own; the stand-in adapters importable (the repository's root
    goes last on sys.path, so the installed kl-conformance is the one used)."""
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.append({str(ROOT)!r})\n")
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert 1 + 1 == 2\n")
    (tmp_path / "cases.yaml").write_text(CASES)
    return tmp_path


def _pytest(project: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """Exit code, output, and each test's outcome by its node id (from junit.xml); `env`: more variables."""
    junit = project / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                           f"--junitxml={junit}", *args], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}, timeout=600)
    outcomes = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            if kind == "skipped" and "xfail" in (case.find("skipped").get("type") or ""):
                kind = "xfailed"
            outcomes[case.get("name")] = kind
        junit.unlink()
    return done.returncode, done.stdout + done.stderr, outcomes


def test_without_kl_framework_the_plugin_adds_nothing_and_imports_no_framework(project):
    (project / "test_modules.py").write_text(
        "import sys\n"
        f"def test_nothing_loaded():\n"
        f"    assert 'conformance.pytest_plugin' in sys.modules  # loaded by its entry point\n"
        f"    assert not {{'conformance.api', 'conformance.run.runner'}} & set(sys.modules)\n"
        f"    assert not set({FRAMEWORKS!r}) & set(sys.modules)\n")
    code, output, outcomes = _pytest(project)
    assert code == 0, output
    assert outcomes == {"test_own": "passed", "test_nothing_loaded": "passed"}


def test_loading_the_plugin_imports_no_framework():
    script = ("import sys, conformance.pytest_plugin\n"
              f"print(sorted(set({FRAMEWORKS!r}) & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT / "tests",
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_one_item_per_call_pass_fail_with_verdict_cause_and_repro(project):
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none")
    assert code == 1
    assert outcomes == {"test_own": "passed", "ok-before[numpy.kl_div-cpu-forward]": "passed",
                        "the-fault[numpy.kl_div-cpu-forward]": "failure"}
    assert "verdict: value" in output and "cause:   unexplained" in output
    assert re.search(r"got against expected: .*got 2\.18766\d*, expected 1\.18766", output)  # off by one
    # the case id after `--` (an id starting with a dash is no option), the framework word as the user gave it
    assert ("reproduce: kl-conformance repro --framework=tests.faults.adapters:OffByOneAdapter "
            "--api=numpy.kl_div --device=cpu --part=forward --cases=cases.yaml -- the-fault > repro.py && "
            "python repro.py") in output
    # a port judged like a framework: its reproducer is judged beside that framework's profile too
    code, output, _ = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none",
                              "--kl-like", "torch")
    assert code == 1 and "--cases=cases.yaml --like=torch -- the-fault > repro.py" in output, output
    # -k selects by case id
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none", "-k", "ok-before")
    assert code == 0 and outcomes == {"ok-before[numpy.kl_div-cpu-forward]": "passed"}, output


def test_the_suite_deselected_whole_leaves_the_session_to_the_projects_own_tests(project):
    """A port keeps `--kl-framework ... --kl-baseline B` in its addopts and runs `pytest -k own` for its own tests:
    the session exited 3 ("not everything was judged") with every selected test passed. Every item of the suite
    left out, the gates judge nothing, say so in one line, and the exit status is the session's own; a
    selection that keeps some item still gates it."""
    from conformance.cli import main

    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--suite", "none",
                 "--out", str(project / "base"), "--no-progress", "--no-repro"]) == 0
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none", "--kl-baseline", "base")
    for xdist in ((), ("-n", "2")):
        code, output, outcomes = _pytest(project, *args, "-k", "own", *xdist)
        assert code == 0 and outcomes == {"test_own": "passed"}, output
        assert "kl-conformance: no item of the conformance suite selected (-k, -m, --deselect, --lf): the gates " \
               "judged nothing" in output and "gate failed" not in output
    (project / "test_own.py").write_text("def test_own():\n    assert 1 + 1 == 3\n")
    code, output, _ = _pytest(project, *args, "-k", "own")
    assert code == 1, output  # the project's own failure is still the session's
    code, output, outcomes = _pytest(project, *args, "-k", "own or ok-before")
    assert "gate passed (--fail-on-new)" in output and outcomes["ok-before[numpy.kl_div-cpu-forward]"] == "passed"


def test_a_call_the_memory_budget_refused_is_skipped_and_fails_a_gate_closed(project):
    """As `run`: a refused call is not checked, so a gated session fails saying so, where it passed."""
    (project / "cases.yaml").write_text(
        f"- {{id: too-big, input: [{[-1.0] * 600}], target: [{[1 / 600] * 600}], reduction: sum, dtype: float64}}\n"
        "- {id: ok, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n")
    (project / "known.yaml").write_text("[]\n")
    args = ("--kl-framework", "tests.faults.adapters:NumpyAdapter", "--kl-cases", "cases.yaml", "--kl-suite", "none",
            "--kl-part", "forward", "--kl-memory-budget-mb", "0.1")
    code, output, outcomes = _pytest(project, *args, "--kl-known", "known.yaml", "-rs")
    assert code == 3, output  # not everything was judged: `run`'s exit code, not a regression's
    # its own line (it followed the progress dots), naming the plugin's option, as the skip's reason does
    assert any(line.startswith("kl-conformance: --known: numpy-test: 1 results not checked, their calls refused by "
                               "the harness (needs about 1.5 MB") and line.endswith("(raise --kl-memory-budget-mb))")
               for line in output.splitlines()), output
    assert "refused: needs about 1.5 MB, over the memory budget of 0.1 MB (raise --kl-memory-budget-mb)" in output
    assert "unsupported: refused" not in output and "raise --memory-budget-mb" not in output
    assert outcomes == {"test_own": "passed", "too-big[numpy.kl_div-cpu-forward]": "skipped",
                        "ok[numpy.kl_div-cpu-forward]": "passed"}
    code, output, _ = _pytest(project, *args)  # no gate: the refused item is skipped, and the session passes
    assert code == 0, output


def test_a_framework_judged_like_itself_is_a_usage_error(project):
    """As `run`: its rows would never be marked, and --kl-fail-on-own would fail nothing."""
    code, output, outcomes = _pytest(project, "--kl-framework", "tests.faults.adapters:NumpyAdapter", "--kl-like",
                                     "numpy-test", "--kl-like-run", str(project), "--kl-fail-on-own")
    assert code == 4 and outcomes == {}, output
    assert "--kl-like: 'numpy-test' is the framework this run judges" in output and "(--kl-baseline)" in output
    # beside a port, judged like it, the framework's own items are what --kl-like is for
    from conformance.cli import main

    pytest.importorskip("torch")
    assert main(["run", "--framework", "torch", "--cases", str(project / "cases.yaml"), "--suite", "none", "--out",
                 str(project / "recorded"), "--no-progress", "--no-repro", "--part", "forward"]) == 0
    code, output, outcomes = _pytest(project, "--kl-framework", "torch", "--kl-framework",
                                     "tests.faults.test_ports:NumpyPort", "--kl-like", "torch", "--kl-like-run",
                                     str(project / "recorded"), "--kl-cases", "cases.yaml", "--kl-suite", "none",
                                     "--kl-part", "forward")
    assert code in (0, 1), output
    assert any("torch.nn.functional.kl_div" in name for name in outcomes) and \
        any("port.kl_div" in name for name in outcomes), outcomes


def test_a_known_divergence_xfails_and_a_stale_entry_fails_the_session(project):
    known = project / "known.yaml"
    known.write_text("- {id: off, case_id: the-fault, verdict: value, reason: tracked upstream}\n")
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none", "--kl-known", "known.yaml")
    code, output, outcomes = _pytest(project, *args)
    assert code == 0, output
    assert outcomes["the-fault[numpy.kl_div-cpu-forward]"] == "xfailed"
    assert "known (known.yaml: off)" in output
    assert ("kl-conformance: known: 1 accepted; known entries: 1 matched, 0 not exercised, 0 stale; gate passed "
            "(--known)") in output  # the session's decision, in one line, pass or fail
    known.write_text(known.read_text() + "- {id: gone, case_id: ok-before, verdict: value, reason: fixed since}\n")
    code, output, outcomes = _pytest(project, *args)
    assert code == 1 and "stale" in output and "'gone'" in output, output
    assert "failure" not in outcomes.values()  # no item fails: the session does, as the CLI's gate
    # the stale entry's case left out by -k: not exercised, so not stale
    code, output, _ = _pytest(project, *args, "-k", "the-fault")
    assert code == 0, output
    # -x or --maxfail in a session that ran every item (no item failed) leaves nothing out: still stale
    for stop in (["-x"], ["--maxfail", "2"], ["-x", "-n", "2"]):
        code, output, _ = _pytest(project, *args, *stop)
        assert code == 1 and "0 not exercised, 1 stale" in output, (stop, output)


def test_a_session_stopped_early_does_not_call_the_entries_of_items_it_never_ran_stale(project):
    """-x stops at the first failure: a known entry about an item after it was not exercised, as under -k."""
    (project / "cases.yaml").write_text(CASES + "- {id: ok-after, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], "
                                                "reduction: sum, dtype: float64}\n")
    (project / "known.yaml").write_text("- {id: gone, case_id: ok-after, verdict: value, reason: fixed since}\n")
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none", "--kl-known", "known.yaml")
    code, output, outcomes = _pytest(project, *args, "-x")
    assert outcomes.get("the-fault[numpy.kl_div-cpu-forward]") == "failure" and code == 1, output
    assert "ok-after[numpy.kl_div-cpu-forward]" not in outcomes
    assert "1 not exercised, 0 stale" in output, output
    code, output, _ = _pytest(project, *args)
    assert code == 1 and "0 not exercised, 1 stale" in output, output


def test_last_failed_reruns_the_suites_failed_items(project):
    """--lf and --ff find the suite's items in pytest's cache: a rerun with --lf runs the failed item alone."""
    args = ["--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none"]

    def session(*more: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", *args, *more], cwd=project,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        return done.stdout + done.stderr
    first = session()
    assert "FAILED kl-conformance[numpy-test]::the-fault[numpy.kl_div-cpu-forward]" in first, first
    again = session("--lf")
    assert "1 failed, 2 deselected" in again, again
    assert "PASSED" not in again, again
    ordered = session("--ff")
    assert ordered.index("the-fault[numpy.kl_div-cpu-forward]") < ordered.index("ok-before["), ordered


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_a_framework_that_cannot_load_fails_the_session_in_one_line(project, xdist):
    """Under xdist the controller decides it before any item is scheduled, as one process does before any runs."""
    code, output, outcomes = _pytest(project, "--kl-framework", "tests.faults.adapters:UnloadableAdapter", *xdist)
    assert code == 3, output
    assert "did not run" in output and "No module named 'numpy_kl'" in output and "Traceback" not in output
    assert outcomes == {}


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_a_device_this_machine_lacks_is_a_usage_error_before_any_item(project, xdist):
    code, output, outcomes = _pytest(project, "--kl-framework", "tests.faults.adapters:CpuOnlyAdapter",
                                     "--kl-device", "cuda", "--kl-cases", "cases.yaml", "--kl-suite", "none", *xdist)
    assert code == 4, output
    assert "device 'cuda' is not present" in output and "Traceback" not in output, output
    assert not any(name.endswith("-forward]") for name in outcomes)


def test_bad_options_are_one_line_naming_the_plugin_option(project):
    code, output, _ = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-dtype", "float8")
    assert code == 4 and "--kl-dtype: unknown value 'float8'" in output and "Traceback" not in output
    code, output, _ = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-fail-on-own")
    assert code == 4 and "--kl-fail-on-own needs --kl-like FRAMEWORK --kl-like-run DIR" in output, output
    code, output, _ = _pytest(project, "--kl-framework", "no-such-framework")
    assert code == 4 and "--kl-framework" in output and "no-such-framework" in output


def test_the_worker_launched_before_the_options_are_read_keeps_their_time_limit(project):
    """The plugin starts each framework's worker as it is configured, before --kl-timeout-s is checked: the case
    that hangs is still stopped at that limit (the default is a minute), and only that case."""
    code, output, outcomes = _pytest(project, "--kl-framework", "tests.faults.adapters:HangAdapter", "--kl-cases",
                                     "cases.yaml", "--kl-suite", "none", "--kl-timeout-s", "2", "--kl-part", "forward")
    assert code == 1, output
    assert outcomes["the-fault[numpy.kl_div-cpu-forward]"] == "failure"
    assert outcomes["ok-before[numpy.kl_div-cpu-forward]"] == "passed", outcomes
    assert re.search(r"timeout\b.*\b2(\.0)? ?s\b", output), output


def test_the_users_objects_are_finalized_as_without_the_plugin(project):
    """The plugin once froze the session's objects at exit (gc.freeze) to spare Python's teardown collections:
    a buffered file a test module kept in a reference cycle was never flushed, and a __del__ never ran."""
    (project / "test_exit.py").write_text(
        "import atexit\nimport os\n\n\nclass Flushes:\n"
        "    def __del__(self, open=open, path=os.path.abspath('finalized.txt')):\n"
        "        open(path, 'w').write('yes')\n\n\n"
        "KEPT = Flushes()\nKEPT.itself = KEPT\nKEPT.log = open('module.log', 'w')\n\n\n"
        "def test_keeps_a_cycle_with_an_open_file():\n    KEPT.log.write('recorded by a test')\n"
        "    atexit.register(lambda: open('exited.txt', 'w').write('yes'))\n")
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none", "--kl-part", "forward")
    assert outcomes["test_keeps_a_cycle_with_an_open_file"] == "passed", output
    assert (project / "module.log").read_text() == "recorded by a test"
    assert (project / "finalized.txt").read_text() == "yes" and (project / "exited.txt").read_text() == "yes"


def test_two_frameworks_of_one_adapter_name_are_refused_in_one_line(project):
    """Their items had the same node ids: each judged twice, then a traceback from the gate ("the same result
    appears twice"), or under xdist one framework's items silently dropped."""
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-framework",
                                     "tests.faults.adapters:SegfaultAdapter", "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none")
    assert code == 4 and "Traceback" not in output and outcomes == {}, output
    assert "--kl-framework: tests.faults.adapters:OffByOneAdapter and tests.faults.adapters:SegfaultAdapter are " \
           "both adapter 'numpy-test'" in output, output


def test_help_sets_up_no_suite(project):
    """pytest --help with --kl-framework loaded the framework (a framework that cannot load: a traceback and no
    help; a bad --kl-* value: exit 4)."""
    for extra in ((), ("--kl-seed", "-1")):
        code, output, _ = _pytest(project, "--kl-framework", "tests.faults.adapters:UnloadableAdapter", "--help",
                                  *extra)
        assert code == 0 and "--kl-framework" in output and "Traceback (most recent" not in output, output
    code, output, _ = _pytest(project, "--kl-framework", "tests.faults.adapters:UnloadableAdapter", "--markers")
    assert code == 0 and "Traceback (most recent" not in output, output


def test_under_xdist_the_items_and_outcomes_are_those_of_one_process(project):
    many = "".join(f"- {{id: {'fault' if i % 3 == 0 else 'fine'}-{i}, input: [[-1.0, -{i}.5]], target: [[0.25, 0.75]], "
                   f"reduction: {('sum', 'none', 'mean')[i % 3]}, dtype: float64}}\n" for i in range(12))
    (project / "many.yaml").write_text(many + "- {id: ok-before, input: [-1.0], target: [0.5], dtype: float64}\n")
    (project / "known.yaml").write_text("- {id: gone, case_id: ok-before, verdict: value, reason: fixed since}\n")
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "many.yaml", "--kl-suite", "none", "--kl-known", "known.yaml")
    code, output, serial = _pytest(project, *args)
    assert code == 1 and "stale" in output, output
    code, output, parallel = _pytest(project, *args, "-n", "2")
    assert code == 1 and "stale" in output, output
    assert parallel == serial and len(serial) == 14  # 13 cases' forward calls, and the project's own test
    assert [name for name, kind in serial.items() if kind == "failure"] == [
        f"fault-{i}[numpy.kl_div-cpu-forward]" for i in (0, 3, 6, 9)]


def test_a_baseline_xfails_what_is_unchanged_and_fails_what_changed(project):
    from conformance.cli import main

    for adapter, out in (("OffByOneAdapter", "same"), ("NumpyAdapter", "other")):
        assert main(["run", "--framework", f"tests.faults.adapters:{adapter}", "--cases", str(project / "cases.yaml"),
                     "--suite", "none", "--out", str(project / out), "--no-progress", "--no-repro"]) == 0
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none", "--kl-baseline")
    code, output, outcomes = _pytest(project, *args, "same")
    assert code == 0, output
    assert outcomes["the-fault[numpy.kl_div-cpu-forward]"] == "xfailed" and "unchanged since the baseline" in output
    # the stand-in raised on the fault case in the other baseline: a value divergence now is a change
    code, output, outcomes = _pytest(project, *args, "other")
    assert code == 1 and outcomes["the-fault[numpy.kl_div-cpu-forward]"] == "failure", output
    assert "kl-conformance: baseline: 0 new, 1 changed, 0 fixed, 0 lost; gate failed (--fail-on-new)" in output
    # the same decisions with the baseline's compact file (--write-baseline)
    assert main(["report", str(project / "other"), "--out", str(project / "merged"), "--write-baseline",
                 str(project / "other.jsonl.gz")]) == 0
    code, output, by_file = _pytest(project, *args, "other.jsonl.gz")
    assert code == 1 and by_file == outcomes, output
    assert "kl-conformance: baseline: 0 new, 1 changed, 0 fixed, 0 lost; gate failed (--fail-on-new)" in output
    (project / "bad.jsonl.gz").write_bytes(b"not a baseline")
    code, output, _ = _pytest(project, *args, "bad.jsonl.gz")
    assert code == 4 and "bad.jsonl.gz: --kl-baseline: not a baseline file" in output, output


COUNTED = "tests.faults.adapters:CountedTwoApiAdapter"


def test_under_xdist_every_row_is_judged_once_and_the_decision_is_the_clis(project, monkeypatch, capsys):
    """Items of one case on two workers each judged the case: the second copies counted as new against the
    baseline, and the work was done twice. The session's gates must decide as `run` decides on the same rows."""
    from conformance.cli import main

    many = "".join(f"- {{id: {'fault' if i % 4 == 0 else 'fine'}-{i}, input: [[-1.0, -{i}.5]], target: [[0.25, 0.75]], "
                   f"reduction: {('sum', 'none', 'mean')[i % 3]}, dtype: float64}}\n" for i in range(16))
    (project / "many.yaml").write_text(many)
    (project / "known.yaml").write_text("- {id: first, case_id: fault-0, verdict: value, reason: tracked}\n"
                                        "- {id: gone, case_id: fine-1, verdict: value, reason: fixed since}\n")
    log = project / "calls.log"
    selection = ["--cases", "many.yaml", "--suite", "none"]
    # the baseline: the honest adapter, so that the off-by-one faults are new there, and fine-1 judged
    assert main(["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(project / "many.yaml"),
                 "--suite", "none", "--only", "fine-*", "--out", str(project / "base"), "--no-progress",
                 "--no-repro"]) == 0
    monkeypatch.setenv("KL_TEST_CALL_LOG", str(log))
    monkeypatch.chdir(project)
    capsys.readouterr()
    code = main(["run", "--framework", COUNTED, *selection, "--known", "known.yaml", "--baseline", "base",
                 "--fail-on-new", "--out", "cli", "--no-progress", "--no-repro"])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    decision = [line.removeprefix("kl-conformance: ") for line in shown.splitlines()
                if line.startswith("kl-conformance: baseline: ")]
    assert code == 1 and len(decision) == 1, shown
    assert decision[0].endswith("gate failed (--fail-on-new, --known)") and "1 stale" in decision[0]
    once = sorted(log.read_text().splitlines())
    assert len(once) == 32 == len(set(once))  # 16 cases, two APIs: the CLI judges each row once
    args = [f"--kl-{arg[2:]}" if arg.startswith("--") else arg for arg in selection]
    for extra in ((), ("-n", "2")):
        log.unlink()
        code, output, outcomes = _pytest(project, "--kl-framework", COUNTED, *args, "--kl-known", "known.yaml",
                                         "--kl-baseline", "base", *extra, env={"KL_TEST_CALL_LOG": str(log)})
        assert code == 1, output
        assert sorted(log.read_text().splitlines()) == once, extra  # every row judged once, whoever judged it
        assert f"kl-conformance: {decision[0]}" in output, (extra, decision, output)
        assert len([o for o in outcomes.values() if o == "failure"]) == 6  # fault-4, -8, -12 on two APIs


def test_the_gates_judge_the_rows_of_the_selected_items_only(project, monkeypatch, capsys):
    """`-k` left out one API's items, but each case was judged on both APIs and the gate counted the rows of the
    items left out: "--fail-on-new: N divergences new or changed" with no item failed, where `run --api` with the
    same baseline passes. Those rows are not the session's, and a baseline's rows of them are not checked."""
    from conformance.cli import main

    (project / "known.yaml").write_text("- {id: noted, case_id: ok-before, api: numpy.kl_div, verdict: value, "
                                        "reason: fixed since}\n")
    monkeypatch.setenv("KL_TEST_CALL_LOG", str(project / "calls.log"))
    base = ["run", "--framework", COUNTED, "--cases", str(project / "cases.yaml"), "--suite", "none",
            "--no-progress", "--no-repro", "--api", "numpy.kl_div"]
    assert main([*base, "--out", str(project / "base")]) == 0
    capsys.readouterr()
    assert main([*base, "--out", str(project / "cli"), "--baseline", str(project / "base"), "--fail-on-new"]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("kl-conformance: baseline: "))
    args = ("--kl-framework", COUNTED, "--kl-cases", "cases.yaml", "--kl-suite", "none", "--kl-baseline", "base",
            "-k", "kl_div", "--kl-known", "known.yaml")
    for extra in ((), ("-n", "2")):
        code, output, outcomes = _pytest(project, *args, *extra, env={"KL_TEST_CALL_LOG": str(project / "calls.log")})
        assert code == 0 and "failure" not in outcomes.values(), (extra, output)
        counted = line.removeprefix("kl-conformance: ").split(";")[0]
        assert counted == "baseline: 0 new, 0 changed, 0 fixed, 0 lost", line
        assert f"kl-conformance: {counted}; known: " in output and "gate passed (--fail-on-new, --known)" in output
        # the notes `run` prints print here too: the entry left unexercised says so
        assert "entry 1 (id 'noted'): not exercised here" in output, output


# a maintainer's conftest: wraps each item's call (as Hypothesis's plugin does), and under KL_TEST_MARK marks the
# suite's items, with a marker of their own or with pytest's skip or xfail
WRAPPING_CONFTEST = """
import os, pytest
def pytest_configure(config):
    config.addinivalue_line("markers", "own: a maintainer's own marker")
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    print(f"wrapped call of {item.name}")
    yield
def pytest_collection_modifyitems(items):
    mark = os.environ.get("KL_TEST_MARK")
    for item in items:
        if mark and "numpy" in item.name:
            item.add_marker({"own": pytest.mark.own, "skip": pytest.mark.skip(reason="the user skips it"),
                             "xfail": pytest.mark.xfail(reason="the user expects it to fail")}[mark])
"""


def test_the_suites_items_report_as_pytests_own_protocol_would(project):
    """The suite's items skip pytest's per-phase hooks (pytest_items.lean_protocol); an item a user marked runs
    through pytest's own protocol. Both give each item the same outcome, failure text and summary line, in the
    terminal and in junit.xml, and a user's skip or xfail mark is kept."""
    (project / "conftest.py").write_text((project / "conftest.py").read_text() + WRAPPING_CONFTEST)
    (project / "known.yaml").write_text("- {id: off, case_id: known-fault, verdict: value, reason: tracked}\n")
    (project / "cases.yaml").write_text(CASES + "- {id: known-fault, input: [[-1.0]], target: [[0.5]], "
                                                "reduction: sum, dtype: float64}\n")
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml", "--kl-suite", "none", "-s")

    def session(mark=None, known=("--kl-known", "known.yaml")):
        code, output, outcomes = _pytest(project, *args, *known, env={"KL_TEST_MARK": mark} if mark else None)
        summary = sorted(line for line in output.splitlines() if re.match(r"(PASSED|FAILED|SKIPPED|XFAIL) ", line))
        failures = output[output.find("= FAILURES ="):output.find("short test summary")]
        return code, output, outcomes, summary, failures

    code, output, outcomes, summary, failures = session()
    assert code == 1, output
    assert outcomes == {"test_own": "passed", "ok-before[numpy.kl_div-cpu-forward]": "passed",
                        "the-fault[numpy.kl_div-cpu-forward]": "failure",
                        "known-fault[numpy.kl_div-cpu-forward]": "xfailed"}
    assert "wrapped call of test_own" in output and "wrapped call of the-fault" not in output  # the lean protocol
    full = session("own")
    assert "wrapped call of the-fault" in full[1]  # pytest's own protocol
    assert (full[0], full[2], full[3], full[4]) == (code, outcomes, summary, failures)
    assert "verdict: value" in failures and "reproduce: kl-conformance repro" in failures
    code, output, outcomes = _pytest(project, *args, "-x")  # pytest's -x sees the lean protocol's failure
    assert code == 1 and "known-fault[numpy.kl_div-cpu-forward]" not in outcomes, output
    code, output, outcomes, *_ = session("skip", known=())
    assert code == 0 and set(outcomes.values()) == {"passed", "skipped"}, output  # test_own, and the suite skipped
    assert "the user skips it" in output
    code, output, outcomes, *_ = session("xfail", known=())
    assert outcomes["the-fault[numpy.kl_div-cpu-forward]"] == "xfailed"
    assert re.search(r"XPASS .*ok-before\[numpy.kl_div-cpu-forward\]", output), output  # marked, and it passed
