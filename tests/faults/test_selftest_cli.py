"""`selftest`'s command line fails closed: a framework that does not load is exit 3, never a pass, and names it
does not know are refused before anything is written. Runs use the honest NumPy stand-in of
tests/faults/adapters.py; the planted faults themselves are proven on the real frameworks (tests/e2e)."""

from __future__ import annotations

import json

import os

from conformance.cli import main
from conformance.core.results import iter_results
from tests.faults.adapters import NumpyAdapter

CASES = "- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
ADAPTERS = "tests.faults.adapters:"
HERE = "tests.faults.test_selftest_cli:"


def _selftest(tmp_path, adapter, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    framework = adapter if ":" in adapter else ADAPTERS + adapter
    return main(["selftest", "--framework", framework, "--suite", "none", "--cases", str(cases),
                 "--out", str(tmp_path / "out"), "--variant", "value_outside_rounding", *extra])


def test_a_framework_that_does_not_load_is_incomplete_not_a_pass(tmp_path, capsys):
    assert _selftest(tmp_path, "UnloadableAdapter") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did not run, so nothing was planted" in err and "numpy_kl" in err
    assert not (tmp_path / "out" / "selftest.json").exists()


def test_unknown_or_absent_names_are_refused_before_anything_is_written(tmp_path, capsys):
    assert _selftest(tmp_path, "NumpyAdapter", "--api", "numpy.nope") == 2
    assert "unknown api 'numpy.nope'" in capsys.readouterr().err
    assert _selftest(tmp_path, "CpuOnlyAdapter", "--device", "cuda") == 2
    assert "device 'cuda' is not present" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_device_narrows_every_run_of_the_selftest(tmp_path):
    assert _selftest(tmp_path, "CpuOnlyAdapter", "--device", "cpu") == 0
    out = tmp_path / "out"
    report = json.loads((out / "selftest.json").read_text())
    assert [(v["name"], v["planted"], v["flagged"]) for v in report["variants"]] == [("value_outside_rounding", 1, 1)]
    for run in ("control", "value_outside_rounding"):
        assert {row.device for row in iter_results(out / run)} == {"cpu"}


# `crash-31` is one of the few cases the crash variant plants into (selftest.variants._chosen picks them by id alone);
# `beside` runs after it, in flight when the worker dies
CRASH_CASES = ("- {id: crash-31, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
               "- {id: beside, input: [[-0.5, -1.0]], target: [[0.5, 0.5]], reduction: sum, dtype: float64}\n")


def _losing_the_case_after_a_crash(monkeypatch):
    """A harness whose worker, once restarted after a crash, reports every later case as crashed too."""
    from conformance.core.model import Verdict
    from conformance.run.pool import WorkerPool
    from conformance.run.task import Outcome

    run = WorkerPool.run

    def losing(self, tasks):
        crashed = False
        for outcome in run(self, tasks):
            if crashed:
                outcome = Outcome(outcome.task, failure=Verdict.CRASH, failure_message="lost with the crash before it")
            crashed = crashed or outcome.failure is Verdict.CRASH or bool(outcome.failed_calls)
            yield outcome
    monkeypatch.setattr(WorkerPool, "run", losing)


def test_a_crash_that_costs_another_case_fails_the_selftest(tmp_path, monkeypatch):
    """The crash variant's rows it did not plant into (the case after the crash) must be the control's: a harness
    that loses them to the crash fails the self-test, though every planted crash is flagged."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CRASH_CASES)
    args = ["selftest", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases", str(cases),
            "--variant", "crash"]
    assert main([*args, "--out", str(tmp_path / "sound")]) == 0
    (sound,) = json.loads((tmp_path / "sound" / "selftest.json").read_text())["variants"]
    assert (sound["planted"], sound["flagged"], sound["disturbed"]) == (1, 1, 0)
    assert {r.case_id: r.verdict.value for r in iter_results(tmp_path / "sound" / "crash")} == \
        {"crash-31": "crash", "beside": "pass"}
    _losing_the_case_after_a_crash(monkeypatch)
    assert main([*args, "--out", str(tmp_path / "lossy")]) == 1
    (lossy,) = json.loads((tmp_path / "lossy" / "selftest.json").read_text())["variants"]
    assert (lossy["planted"], lossy["flagged"], lossy["disturbed"]) == (1, 1, 1) and not lossy["ok"]
    assert lossy["disturbances"] == ["beside numpy.kl_div cpu forward: crash (harness.isolation); the control: pass "
                                     "(no cause)"]


class CountingAdapter(NumpyAdapter):
    """The honest stand-in, writing a line per call to the file $KL_TEST_CALLS names."""

    def run(self, case, api, device, part):
        with open(os.environ["KL_TEST_CALLS"], "a", encoding="utf-8") as f:
            f.write(f"{case.id} {part}\n")
        return super().run(case, api, device, part)


def test_the_variants_plant_into_the_control_runs_answers_without_calling_the_framework(tmp_path, monkeypatch):
    """The framework answers each call once, in the control run; the variants that plant a wrong answer, and the
    build that lost a dtype, replay those answers through the whole run."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("KL_TEST_CALLS", str(calls))
    assert _selftest(tmp_path, HERE + "CountingAdapter", "--variant", "sign_error", "--variant", "gate_lost_dtype") == 0
    assert calls.read_text().splitlines() == ["one forward"]
    report = json.loads((tmp_path / "out" / "selftest.json").read_text())
    assert [(v["name"], v["planted"], v["flagged"]) for v in report["variants"]] == \
        [("value_outside_rounding", 1, 1), ("sign_error", 1, 1), ("gate_lost_dtype", 1, 1)]
    assert [r.verdict.value for r in iter_results(tmp_path / "out" / "sign_error")] == ["value"]


def test_a_variant_runs_over_the_cases_it_plants_into(tmp_path):
    """An expected infinity is in one case only: infinity_lost plants there, and its run holds that case alone (in
    the other, every answer and so every row would be the control's)."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES + "- {id: infinite, input: [[-.inf, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                             "dtype: float64}\n")
    assert main(["selftest", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases", str(cases),
                 "--out", str(tmp_path / "out"), "--variant", "infinity_lost"]) == 0
    (report,) = json.loads((tmp_path / "out" / "selftest.json").read_text())["variants"]
    assert (report["planted"], report["flagged"], report["attributed"]) == (1, 1, 1)
    assert sorted(r.case_id for r in iter_results(tmp_path / "out" / "control")) == ["infinite", "one"]
    assert [(r.case_id, r.verdict.value) for r in iter_results(tmp_path / "out" / "infinity_lost")] == \
        [("infinite", "nonfinite")]


def test_a_planted_fault_is_one_defect_per_implementation_and_a_split_fails_the_selftest(tmp_path, monkeypatch):
    """wrong_shape breaks one rule (shapes.output): over a function and the module class that calls it, one
    defect; over a second function of its own, another. A harness that named defects by API would split the
    first: the self-test then fails, naming the defects."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)

    def selftest(out):
        return main(["selftest", "--framework", ADAPTERS + "TwoFormsAdapter", "--suite", "none", "--cases",
                     str(cases), "--out", str(tmp_path / out), "--variant", "wrong_shape"])
    assert selftest("sound") == 0
    (report,) = json.loads((tmp_path / "sound" / "selftest.json").read_text())["variants"]
    assert report["ok"] and report["planted"] == report["attributed"] == 3
    assert {key: len(ids) for key, ids in report["defects"].items()} == \
        {"shapes.output on numpy.kl_div": 1, "shapes.output on numpy.kl_div_other": 1}
    import conformance.run.context as context
    monkeypatch.setattr(context, "defect_of", lambda row, implementation, named=context.defect_of: named(row, row.api))
    assert selftest("split") == 1
    (report,) = json.loads((tmp_path / "split" / "selftest.json").read_text())["variants"]
    assert not report["ok"] and len(report["defects"]["shapes.output on numpy.kl_div"]) == 2
    assert "one fault came out as several defects" in (tmp_path / "split" / "selftest.md").read_text()


def test_a_documented_deviation_no_call_reaches_leaves_its_variant_not_applicable(tmp_path):
    """garbage_where_documented plants where the profile predicts other than the spec. A profile whose one
    deviation no case of the run reaches (no broadcasting case here) offers it no place: not applicable, with why,
    never "planted nothing"; a case that reaches it is planted into."""
    def selftest(cases_text, out):
        cases = tmp_path / f"{out}.yaml"
        cases.write_text(cases_text)
        assert main(["selftest", "--framework", ADAPTERS + "SameShapeProfileAdapter", "--suite", "none", "--cases",
                     str(cases), "--out", str(tmp_path / out), "--variant", "garbage_where_documented"]) == 0
        (report,) = json.loads((tmp_path / out / "selftest.json").read_text())["variants"]
        return report
    unreached = selftest(CASES, "unreached")
    assert unreached["ok"] and unreached["planted"] == 0 and "reaches a documented deviation" in \
        unreached["not_applicable"]
    reached = selftest(CASES + "- {id: wide, input: [-1.0, -2.0], target: [[0.25, 0.75], [0.5, 0.5]], reduction: "
                               "sum, dtype: float64}\n", "reached")
    assert reached["ok"] and reached["planted"] == reached["flagged"] == 1 and reached["not_applicable"] is None
