"""The three surfaces check their options alike (conformance/options.py): the command line, the pytest plugin
and the Python API refuse the same bad values with the same problem text, each naming the option as it is
spelled there; the plugin with pytest's usage exit code (4) and the API with ConformanceError, before any case
runs. Before, the plugin and the API took values the CLI refuses (a NaN time limit, a negative seed, an unknown
suite or part) and failed later in tracebacks, or not at all."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import conformance.api as kl
from conformance.cli import main
from tests.faults.test_plugin import CASES, OFF_BY_ONE, ROOT, _pytest, project  # noqa: F401 (a fixture)

PARTS = "'forward', 'grad_input', 'grad_target', 'grad2_input'"
SUITES = "'default', 'exhaustive', 'modes', 'mode-slice', 'none'"
# (the CLI's option, the bad value, the API call that gives it, the problem every surface states), the problem
# as `kl-conformance` has always said it (argparse's own words for a choice)
BAD = [
    ("--timeout-s", "nan", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), timeout_s=math.nan),
     "expected a number > 0, got 'nan'"),
    ("--timeout-s", "0", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), timeout_s=0),
     "expected a number > 0, got '0'"),
    ("--timeout-s", "-1", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), timeout_s=-1),
     "expected a number > 0, got '-1'"),
    ("--seed", "-1", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c, seed=-1)),
     "expected a whole number >= 0, got '-1'"),
    ("--suite", "bogus", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c, suite="bogus")),
     f"invalid choice: 'bogus' (choose from {SUITES})"),
    ("--part", "nope", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), parts=["nope"]),
     f"invalid choice: 'nope' (choose from {PARTS})"),
    ("--memory-budget-mb", "nan", lambda c: kl.run(OFF_BY_ONE, selection=_cases(c, memory_budget_mb=math.nan)),
     "expected a number > 0, got 'nan'"),
]
API_WORDS = {"--timeout-s": "timeout_s", "--seed": "seed", "--suite": "suite", "--part": "parts",
             "--memory-budget-mb": "memory_budget_mb"}


def _cases(case_file, **more):
    return kl.Selection(case_files=(str(case_file),), **{"suite": "none", **more})


@pytest.mark.parametrize("flag, value, call, problem", BAD, ids=[f"{b[0]}={b[1]}" for b in BAD])
def test_the_cli_the_plugin_and_the_api_refuse_a_bad_value_alike(project, capsys, flag, value, call, problem):
    out = project / "out"
    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--out", str(out),
                 flag, value]) == 2
    err = capsys.readouterr().err.strip()
    said = re.fullmatch(rf"kl-conformance: command line: argument {flag}: (.*)\. Fix: .*", err)
    assert said and said.group(1) == problem, err
    assert not out.exists()

    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none", f"--kl-{flag[2:]}", value)
    plugin_flag = f"--kl-{flag[2:]}"
    lines = [line for line in output.splitlines() if "kl-conformance:" in line]
    assert code == 4 and "Traceback" not in output and outcomes == {}, output
    assert len(lines) == 1, output
    said = re.search(rf"kl-conformance: {plugin_flag}: (.*)\. Fix: .+", lines[0])
    assert said and said.group(1) == problem, output

    with pytest.raises(kl.ConformanceError) as raised:
        call(project / "cases.yaml")
    assert raised.value.where == API_WORDS[flag] and raised.value.problem == problem
    assert str(raised.value) == f"{API_WORDS[flag]}: {problem}. Fix: {raised.value.fix}" and raised.value.fix


def test_the_plugin_takes_the_mode_suite_its_guide_lists(project):
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-suite", "modes",
                                     "--kl-family", "pinned", "--collect-only")
    assert code == 0 and "Traceback" not in output, output
    assert re.search(r"\d+ tests? collected|collected \d+ items?", output), output


def test_collecting_only_runs_no_gate(project):
    """Editors discover tests with --collect-only: a known file's entries are then not stale, and the baseline's
    results not lost, since nothing was judged."""
    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--suite", "none",
                 "--out", str(project / "base"), "--no-progress", "--no-repro"]) == 0
    (project / "known.yaml").write_text("- {id: off, case_id: the-fault, verdict: value, reason: tracked}\n")
    for gate in (("--kl-known", "known.yaml"), ("--kl-baseline", "base")):
        code, output, _ = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                  "--kl-suite", "none", *gate, "--collect-only")
        assert code == 0, output
        assert "ok-before[numpy.kl_div-cpu-forward]" in output and "stale" not in output and "lost" not in output


def _baseline_then_other_values(project):
    """A baseline run in project/base; then the case `ok-before` gets another input value under the same id."""
    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--suite", "none",
                 "--out", str(project / "base"), "--no-progress", "--no-repro"]) == 0
    (project / "cases.yaml").write_text(CASES.replace("[[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                                                      "dtype: float64}\n- {id: the-fault",
                                                      "[[-1.5, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                                                      "dtype: float64}\n- {id: the-fault", 1))


def test_a_baseline_of_other_case_values_is_a_usage_error_before_any_item(project):
    _baseline_then_other_values(project)
    code, output, outcomes = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-cases", "cases.yaml",
                                     "--kl-suite", "none", "--kl-baseline", "base")
    assert code == 4 and "Traceback" not in output and outcomes == {}, output
    line = next(line for line in output.splitlines() if "kl-conformance:" in line)
    assert "case 'ok-before'" in line and "other values" in line and "Fix:" in line, output


def test_the_cli_refuses_a_baseline_of_other_case_values_before_anything_is_written(project, capsys):
    """The same check as the plugin's, on `run --baseline`: before, the run found the mismatch only mid-run."""
    _baseline_then_other_values(project)
    capsys.readouterr()
    out = project / "out"
    assert main(["run", "--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--suite", "none",
                 "--out", str(out), "--no-progress", "--baseline", str(project / "base"), "--fail-on-new"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "case 'ok-before'" in err and "other values" in err and "Fix:" in err, err
    assert not out.exists()


def test_under_xdist_the_gate_counts_each_result_once_and_names_no_file_it_never_wrote(project):
    """Items of one case on two workers were each judged, and the gate counted both rows; its line pointed to a
    baseline.json the plugin does not write."""
    many = "".join(f"- {{id: fault-{i}, input: [[-1.0, -{i}.5]], target: [[0.25, 0.75]], reduction: sum, "
                   f"dtype: float64, grad: [input, target]}}\n" for i in range(8))
    (project / "many.yaml").write_text(many)
    assert main(["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(project / "many.yaml"),
                 "--suite", "none", "--out", str(project / "base"), "--no-progress", "--no-repro"]) == 0
    args = ("--kl-framework", OFF_BY_ONE, "--kl-cases", "many.yaml", "--kl-suite", "none", "--kl-baseline", "base")
    for more in ((), ("-n", "2")):
        code, output, outcomes = _pytest(project, *args, *more)
        # the stand-in raised on every fault case in the baseline, and is off by one now: 8 forward values changed
        assert code == 1 and list(outcomes.values()).count("failure") == 8, output
        assert "--fail-on-new: 8 divergences new or changed since the baseline base" in output, output
        assert "baseline.json" not in output and "numpy.kl_div / cpu / forward: 8 failing" in output


def test_a_framework_that_cannot_load_leaves_no_temporary_directory(project):
    scratch = project / "tmp"
    scratch.mkdir()
    code, output, _ = _pytest(project, "--kl-framework", "tests.faults.adapters:UnloadableAdapter",
                              env={"TMPDIR": str(scratch)})
    assert code == 3 and "did not run" in output, output
    assert [p.name for p in scratch.iterdir() if p.name.startswith("kl-conformance")] == []


@pytest.mark.parametrize("call, where, words", [
    (lambda c: kl.cases(kl.Selection(suite="bogus")), "suite", "invalid choice: 'bogus'"),  # was accepted
    (lambda c: kl.cases(kl.Selection(samples=0)), "samples", ">= 1"),  # was an empty list
    (lambda c: kl.cases(kl.Selection(seed=1.5)), "seed", "whole number"),  # was numpy's TypeError
    (lambda c: kl.case("fwd/sum/log_target=0/4x6/float64/softmax/s0", seed=-1), "seed", ">= 0"),  # ValueError
    (lambda c: kl.cases(kl.Selection(only="fwd/sum/*")), "only", "list"),  # was read letter by letter
    (lambda c: kl.cases(kl.Selection(log_target=(1,))), "log_target", "text"),  # was an AttributeError
    (lambda c: kl.cases(kl.Selection(shard=3)), "shard", "K/N"),  # was an AttributeError
    (lambda c: kl.cases(kl.Selection(dtype=("float8",))), "dtype", "unknown value 'float8'"),
    (lambda c: kl.case(3), "case_id", "case id"),  # was a TypeError
    (lambda c: kl.run(OFF_BY_ONE, selection={"suite": "none"}), "selection", "Selection"),  # AttributeError
    (lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), known=3), "known", "path"),  # was an AttributeError
    (lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), apis="numpy.kl_div"), "apis", "list"),  # 'n' unknown
    (lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), devices=["tpu"]), "devices", "unknown device 'tpu'"),
    (lambda c: kl.expected(kl.case(_ID), "nope"), "part", "invalid choice: 'nope'"),  # was a KeyError
    (lambda c: kl.judge(kl.case(_ID), 1.0, dialect="nope"), "dialect", "unknown dialect 'nope'"),  # KeyError
    (lambda c: kl.judge(_ID, 1.0), "case", "expected a Case"),  # was an AttributeError
    (lambda c: kl.judge(kl.case(_ID), "abc"), "observed", "not an array of numbers"),  # numpy's ValueError
    (lambda c: kl.judge(kl.case(_ID), None), "observed", "not an array of numbers"),  # was a dtype verdict
    (lambda c: kl.judge(kl.case(_ID), 1.0, warnings="careful"), "warnings", "list"),
    (lambda c: kl.gate(3), "runs", "list of runs"),  # was a TypeError
    (lambda c: kl.run(OFF_BY_ONE, selection=_cases(c), spec="x.yaml"), "spec", "expected a Spec"),  # AttributeError
    (lambda c: kl.cases(spec="x.yaml"), "spec", "expected a Spec"),  # was an AttributeError
    (lambda c: kl.expected(kl.case(_ID), spec={}), "spec", "expected a Spec"),  # was an AttributeError
    (lambda c: kl.load_spec(5), "path", "expected a path"),  # was pathlib's TypeError
    (lambda c: kl.gate(c.parent, fail_on_new=True), "fail_on_new", "fail_on_new needs baseline"),  # --fail-on-new
])
def test_the_api_refuses_a_bad_argument_in_one_line(project, call, where, words):
    with pytest.raises(kl.ConformanceError) as raised:
        call(project / "cases.yaml")
    assert raised.value.where == where and words in raised.value.problem and raised.value.fix, raised.value
    assert len(str(raised.value).splitlines()) == 1
    said = re.sub(r"`[^`]*`", "", f"{raised.value.problem} {raised.value.fix}")  # a command quoted may name one
    assert not re.search(r"(^|\s)--[a-z]", said), raised.value  # the API's own words: no command-line option


def test_the_api_names_its_own_arguments_for_a_file_it_cannot_read(project):
    """A file the API cannot read is named with the argument that gave it, never a command-line option (the API
    has no --allow-missing)."""
    for call, words in [(lambda: kl.load_spec(project / "no.yaml"), "give load_spec the path"),
                        (lambda: kl.gate([], known=project / "no.yaml"), "give known the path"),
                        (lambda: kl.cases(kl.Selection(case_files=(str(project / "no.yaml"),))),
                         "give case_files the path"),
                        (lambda: kl.gate(project / "nodir"), "the directory of a finished run")]:
        with pytest.raises(kl.ConformanceError) as raised:
            call()
        assert words in raised.value.fix and "--allow-missing" not in str(raised.value), raised.value


_ID = "fwd/sum/log_target=0/4x6/float64/softmax/s0"


def test_judge_refuses_complex_values_instead_of_judging_their_real_part():
    case = kl.case(_ID)
    right = np.sum(case.target * (np.log(case.target) - case.input))  # the KL divergence's sum, written out
    assert kl.judge(case, right).verdict is kl.Verdict.PASS
    for complex_value in (right + 0j, np.complex64(right), np.array([right + 1e-3j])):
        with pytest.raises(kl.ConformanceError, match="complex") as raised:
            kl.judge(case, complex_value, dtype="float64")  # was a pass: the imaginary part dropped
        assert raised.value.where == "observed"


def test_the_plugin_guide_lists_every_option_the_plugin_registers(project):
    code, output, _ = _pytest(project, "--help")
    assert code == 0, output
    registered = set(re.findall(r"^\s+(--kl-[a-z-]+)", output, flags=re.MULTILINE))
    guide = (ROOT / "docs" / "guide" / "plugin.md").read_text(encoding="utf-8")
    table = guide.split("## Options", 1)[1].split("\n\n", 2)[1]
    assert set(re.findall(r"`(--kl-[a-z-]+)", table)) == registered and "--kl-timeout-s" in registered


def test_a_path_the_file_system_cannot_follow_is_one_line_on_every_surface(project, capsys):
    """A name too long for the file system (ENAMETOOLONG) or a loop of symbolic links, given to --out, --like-run,
    --profiles, --baseline or `repro --all`, was a traceback on the CLI (exit 1), an INTERNALERROR in the plugin and
    a bare OSError or RuntimeError from the API; `run --profiles` with one recorded "the run failed", exit 3."""
    long = str(project / ("a" * 300))
    (project / "loop").symlink_to(project / "loop")
    loop = str(project / "loop")
    cases = ["--framework", OFF_BY_ONE, "--cases", str(project / "cases.yaml"), "--suite", "none", "--no-repro"]
    assert main(["run", *cases, "--out", str(project / "good")]) in (0, 1)
    before = sorted(p.name for p in project.iterdir())
    for words, option in ((["run", *cases, "--out", long], "--out"),
                          (["run", *cases, "--out", str(project / "o"), "--profiles", long], "--profiles"),
                          (["run", *cases, "--out", str(project / "o"), "--like", "torch", "--like-run", long],
                           "--like-run"),
                          (["report", str(project / "good"), "--out", str(project / "o"), "--baseline", loop],
                           "--baseline"),
                          (["repro", "--all", long, "--from", str(project / "good")], "--all")):
        capsys.readouterr()
        assert main(words) == 2, words
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f": {option}: " in err[0] and "Fix: give a path" in err[0], err
        assert sorted(p.name for p in project.iterdir()) == before
    code, output, _ = _pytest(project, "--kl-framework", OFF_BY_ONE, "--kl-like", "torch", "--kl-like-run", long)
    assert code == 4 and "--kl-like-run: file name too long" in output and "INTERNALERROR" not in output, output
    for call in (lambda: kl.run(OFF_BY_ONE, selection=_cases(project / "cases.yaml"), out=long),
                 lambda: kl.run(OFF_BY_ONE, selection=_cases(project / "cases.yaml"), profiles=long),
                 lambda: kl.gate([str(project / "good")], baseline=loop, fail_on_new=True)):
        with pytest.raises(kl.ConformanceError, match="Fix: give a path the file system can open"):
            call()
    assert sorted(p.name for p in project.iterdir()) == before
