"""The public Python API (conformance.api): a run gives typed rows, one observation is judged as a run judges
it, and the gates decide as the CLI decides. Before it, all of this needed the private modules."""

from __future__ import annotations

import numpy as np
import pytest

import conformance.api as kl
from conformance.cli import main
from tests.faults.adapters import NumpyAdapter

CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
OFF_BY_ONE = "tests.faults.adapters:OffByOneAdapter"


@pytest.fixture
def case_file(tmp_path):
    path = tmp_path / "cases.yaml"
    path.write_text(CASES)
    return str(path)


def _selection(case_file, **more):
    return kl.Selection(suite="none", case_files=(case_file,), **more)


def test_run_gives_typed_rows_for_a_name_a_class_or_an_instance(case_file, tmp_path):
    for framework in (NumpyAdapter, NumpyAdapter(), "tests.faults.adapters:NumpyAdapter"):
        outcome = kl.run(framework, selection=_selection(case_file))
        assert outcome.out_dir is None and outcome.not_run is None and outcome.stopped is None
        assert all(isinstance(r, kl.Result) for r in outcome.rows)
        # the stand-in answers every case but the fault one honestly, and raises NotImplementedError there
        assert {(r.case_id, r.verdict) for r in outcome.rows} == {
            ("ok-before", kl.Verdict.PASS), ("the-fault", kl.Verdict.ERROR), ("ok-after", kl.Verdict.PASS)}
        assert outcome.manifest["framework"] == "tests.faults.adapters:NumpyAdapter"
    kept = kl.run(NumpyAdapter, selection=_selection(case_file, reduction=("none",)), out=tmp_path / "kept")
    assert [r.case_id for r in kept.rows] == ["ok-after"] and (tmp_path / "kept" / "results.jsonl").is_file()


def test_a_refused_case_names_the_api_keyword_that_raises_the_budget(case_file):
    outcome = kl.run(NumpyAdapter, selection=_selection(case_file, memory_budget_mb=1e-6))
    assert outcome.rows and all(r.refused and r.message.endswith("(raise memory_budget_mb)") for r in outcome.rows)


def test_a_class_the_worker_cannot_import_is_refused_in_one_line():
    class Local(NumpyAdapter):
        pass
    with pytest.raises(kl.ConformanceError, match="cannot be imported by the worker"):
        kl.run(Local)
    with pytest.raises(kl.ConformanceError, match="unknown framework 'no-such-framework'"):
        kl.run("no-such-framework")


@pytest.mark.parametrize("options", [[], ["--strict"], ["--known", "KNOWN"], ["--strict", "--known", "KNOWN"]])
def test_gate_decides_as_the_cli_does(case_file, tmp_path, options):
    known = tmp_path / "known.yaml"
    known.write_text("- {id: off, case_id: the-fault, verdict: value, reason: tracked upstream}\n"
                     "- {id: gone, case_id: ok-after, verdict: value, reason: fixed since}\n")
    options = [str(known) if o == "KNOWN" else o for o in options]
    code = main(["run", "--framework", OFF_BY_ONE, "--cases", case_file, "--suite", "none", "--out",
                 str(tmp_path / "cli"), "--no-progress", "--no-repro", *options])
    strict, known_given = "--strict" in options, "--known" in options
    outcome = kl.run(OFF_BY_ONE, selection=_selection(case_file), known=known if known_given else None)
    decision = kl.gate(outcome, strict=strict, known=known if known_given else None)
    assert decision.code == code
    assert kl.gate(tmp_path / "cli", strict=strict, known=known if known_given else None).code == code
    # what each gate decides, written out: the off-by-one is undocumented unless the known file accepts it,
    # and that file's second entry accepts nothing (stale)
    assert code == (kl.EXIT_GATE if (strict and not known_given) or known_given else kl.EXIT_OK)
    assert [r.case_id for r in outcome.undocumented] == ([] if known_given else ["the-fault"])
    if known_given:
        assert any("stale" in line and "'gone'" in line for line in decision.lines)


def test_gate_fails_closed_when_the_framework_did_not_run(case_file):
    outcome = kl.run("tests.faults.adapters:UnloadableAdapter", selection=_selection(case_file))
    assert outcome.not_run and "numpy_kl" in outcome.not_run and outcome.rows == []
    assert kl.gate(outcome).code == kl.EXIT_OK
    decision = kl.gate(outcome, strict=True)
    assert decision.code == kl.EXIT_INCOMPLETE and any("did not run" in line for line in decision.lines)
    with pytest.raises(kl.ConformanceError, match="fail_on_new needs baseline"):
        kl.gate(outcome, fail_on_new=True)


def test_judge_gives_the_verdict_and_cause_of_one_observation(spec):
    case = kl.case("fwd/sum/log_target=0/4x6/float64/softmax/s0")
    x, t = case.input, case.target
    right = np.sum(t * (np.log(t) - x))  # the KL divergence's sum, written out here
    assert kl.judge(case, right).verdict is kl.Verdict.PASS
    wrong = kl.judge(case, right / 4)
    assert wrong.verdict is kl.Verdict.VALUE and wrong.cause == "unexplained"
    assert repr(float(right))[:6] in wrong.message  # the expectation, against which the value was judged
    # IEEE arithmetic at a zero target: NaN beside an infinite input, where the spec's convention says 0
    zeros = kl.case("fwd/none/log_target=0/4x6/float64/zero_prob/s0")
    x, t = zeros.input, zeros.target
    with np.errstate(all="ignore"):
        ieee = np.where(t == 0, np.where(np.isinf(x), np.nan, 0.0), t * (np.log(t) - x))
    explained = kl.judge(zeros, ieee)
    assert explained.verdict is kl.Verdict.NONFINITE and explained.cause == "pointwise.conventions.target_zero"
    assert kl.judge(case, np.float32(right)).verdict is kl.Verdict.DTYPE
    raised = kl.judge(case, ValueError("no"))
    assert raised.verdict.is_divergence
    assert kl.judge(case, kl.Observation(value=np.asarray(right), dtype="float64", shape=())).verdict is kl.Verdict.PASS
    single = kl.case("fwd/sum/log_target=0/4x6/float32/softmax/s0")
    in_float64 = np.sum(single.target * (np.log(single.target) - single.input))
    assert kl.judge(single, in_float64).verdict is kl.Verdict.DTYPE  # a float64 array for a float32 call
    assert kl.judge(single, in_float64, dtype="float32").verdict is kl.Verdict.PASS  # converted by the caller
    assert kl.expected(case).value == pytest.approx(right, rel=1e-12)


def test_the_api_names_its_own_arguments_and_says_nothing_false(case_file, tmp_path):
    """`kl.run(out=...)` said "--out" and "pass --force ..., --resume to continue that run" (the API has no
    resume); `kl.gate(like_run=...)` of a gated run said "the recorded run is the output directory, which this
    command rewrites" (gate writes nothing)."""
    kept = kl.run(NumpyAdapter, selection=_selection(case_file), out=tmp_path / "kept")
    with pytest.raises(kl.ConformanceError) as refused:
        kl.run(NumpyAdapter, selection=_selection(case_file), out=tmp_path / "kept")
    said = str(refused.value)
    assert ": out: " in said and "pass force=True" in said and "--" not in said and "resume" not in said, said
    (tmp_path / "a-file").write_text("")
    with pytest.raises(kl.ConformanceError, match=r": out: exists and is not a directory\. Fix: .* for out$"):
        kl.run(NumpyAdapter, selection=_selection(case_file), out=tmp_path / "a-file")
    with pytest.raises(kl.ConformanceError) as refused:
        kl.gate([kept.out_dir], like="torch", like_run=kept.out_dir)
    assert "output directory" not in str(refused.value) and "not of 'torch'" in str(refused.value)


def test_gate_refuses_the_same_results_twice_and_takes_a_baseline_among_its_runs(case_file, tmp_path):
    """Given one RunOutcome twice, or beside its own directory, gate counted each row twice (its decision line
    doubled, and changed with the order), where `report` refuses them; and a baseline that was the first gated
    directory was refused as "the output directory, which this command rewrites": gate writes nothing."""
    kept = kl.run(OFF_BY_ONE, selection=_selection(case_file), out=tmp_path / "kept")
    alone = kl.run(OFF_BY_ONE, selection=_selection(case_file))
    for given in ([alone, alone], [kept, kept.out_dir]):
        with pytest.raises(kl.ConformanceError, match="the same result appears twice.*Fix: pass each run once"):
            kl.gate(given, strict=True)
    other = kl.run(NumpyAdapter, selection=_selection(case_file), out=tmp_path / "other")
    assert kl.gate([other.out_dir], baseline=other.out_dir, fail_on_new=True).code == 0


def test_gate_refuses_runs_of_one_release_judged_by_two_profile_sets(case_file, tmp_path):
    """As `report` refuses them: a behaviour documented in one run and not in the other, and the reproduce
    commands in the decision's lines carrying one run's profiles."""
    import shutil

    from conformance.core.profilefile import default_profiles_dir

    other = tmp_path / "profiles"
    shutil.copytree(default_profiles_dir(), other)
    (other / "extra.yaml").write_text("framework: extra\ndeviations: []\n")
    shipped = kl.run(OFF_BY_ONE, selection=_selection(case_file), parts=["forward"], out=tmp_path / "shipped")
    mine = kl.run(OFF_BY_ONE, selection=_selection(case_file), parts=["grad_input"], profiles=other,
                  out=tmp_path / "mine")
    for given in ([shipped, mine], [shipped.out_dir, mine.out_dir], [shipped, mine.out_dir]):
        with pytest.raises(kl.ConformanceError, match=r"judged here with profiles .*/profiles, in .* with profiles "
                                                      r"\(shipped\).*Fix: run both with the same profiles and like"):
            kl.gate(given, strict=True)
    # the same options, or two folders that hold the same profiles: gated
    again = kl.run(OFF_BY_ONE, selection=_selection(case_file), parts=["grad_input"], out=tmp_path / "again")
    assert kl.gate([shipped, again], strict=True).code in (kl.EXIT_OK, kl.EXIT_GATE)
    same = tmp_path / "same"
    shutil.copytree(default_profiles_dir(), same)
    copied = kl.run(OFF_BY_ONE, selection=_selection(case_file), parts=["grad_input"], profiles=same)
    assert kl.gate([shipped, copied], strict=True).code in (kl.EXIT_OK, kl.EXIT_GATE)
    # runs of two checkouts whose shipped profiles differ (their digests), given the same options: merged
    import json

    manifest = json.loads((tmp_path / "again" / "run.json").read_text())
    manifest["profiles_digest"] = "another checkout's shipped profiles"
    (tmp_path / "again" / "run.json").write_text(json.dumps(manifest))
    assert kl.gate([shipped.out_dir, tmp_path / "again"], strict=True).code in (kl.EXIT_OK, kl.EXIT_GATE)


def test_gate_refuses_a_run_outcome_made_by_hand_that_no_run_makes(case_file):
    """A RunOutcome's manifest that is no object, holds a field of another type than run.json's, or rows that are
    not Results crashed gate (AttributeError, TypeError) where a report refuses such a run.json in one line."""
    import dataclasses

    made = kl.run(OFF_BY_ONE, selection=_selection(case_file))
    for changed, said in (({"manifest": [1]}, "its manifest is a list"),
                          ({"manifest": {**made.manifest, "framework_version": [1]}}, "'framework_version' holds"),
                          ({"manifest": {**made.manifest, "profiles_digest": 5}}, "'profiles_digest' holds"),
                          ({"rows": [*made.rows, "a row"]}, "its rows hold a str"), ({"rows": None}, "its rows are a NoneType")):
        with pytest.raises(kl.ConformanceError, match=said) as refused:
            kl.gate([made, dataclasses.replace(made, **changed)], strict=True)
        assert "RunOutcome 2" in str(refused.value) and "\n" not in str(refused.value)


def test_judge_refuses_what_it_cannot_judge_in_one_line(case_file):
    """A case of the other input space than the dialect's, a hand-made Observation no adapter makes, or warnings
    of None raised a bare ValueError, TypeError or AttributeError from inside; a falsy selection of another type
    ({}, []) ran the whole default suite."""
    prob = kl.case("fwd/sum/log_target=0,input=prob/4x6/float32/softmax/s0")
    for call in (lambda: kl.judge(prob, np.float32(1.0)), lambda: kl.expected(prob)):
        with pytest.raises(kl.ConformanceError, match="gives probabilities as input, which dialect 'canonical'"):
            call()
    case = kl.case("fwd/sum/log_target=0/4x6/float32/softmax/s0")
    for observed in (kl.Observation(), kl.Observation(value=np.array(8.27), dtype="float32"),
                     kl.Observation(value=[8.27], dtype="float32", shape=()), kl.Observation(dtype=3, shape=()),
                     # a float32 result without its values: it passed where a 0-d NaN was expected
                     kl.Observation(dtype="float32", shape=()), kl.Observation(dtype="bfloat16", shape=())):
        with pytest.raises(kl.ConformanceError, match="^observed: an Observation that no adapter makes"):
            kl.judge(case, observed)
    with pytest.raises(kl.ConformanceError, match="^warnings: "):
        kl.judge(case, np.float32(8.27), warnings=None)
    assert kl.judge(case, kl.Observation(dtype="complex64", shape=())).verdict is kl.Verdict.DTYPE
    empty_mean = kl.case("fwd/mean/log_target=0/3x0/float32/softmax/s0")  # the spec expects a 0-d NaN
    with pytest.raises(kl.ConformanceError, match="a result of dtype float32 without its values"):
        kl.judge(empty_mean, kl.Observation(dtype="float32", shape=()))
    for selection in ({}, [], 0, ""):
        with pytest.raises(kl.ConformanceError, match="^selection: expected a Selection"):
            kl.cases(selection)
        with pytest.raises(kl.ConformanceError, match="^selection: expected a Selection"):
            kl.run(NumpyAdapter, selection=selection)
