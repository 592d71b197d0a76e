"""The gates fail closed (issue 26): whenever a gate is asked for, a framework that did not run, a run that judged
nothing, lost coverage against a baseline, fail; what a narrower run did not select is "not checked", never
gone, fixed or stale; junit.xml is green exactly when the exit code is 0; the self-test proves the gates on
broken builds. Runs use the NumPy stand-ins of tests/faults/adapters.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conformance.adapters.base import Api
from conformance.cli import main
from conformance.core.results import iter_results
from tests.faults.adapters import NumpyAdapter

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64, grad: [input]}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-after, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
GATES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "gates.md"


def _run(tmp_path, adapter, *extra, out="out", framework=None):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", framework or ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


def _junit_counts(run_dir) -> dict[str, int]:
    head = re.search(r"<testsuites [^>]*>", (run_dir / "junit.xml").read_text()).group(0)
    return {k: int(v) for k, v in re.findall(r'(\w+)="(\d+)"', head)}


def test_the_gate_on_change_recipe_fails_on_a_build_that_cannot_import(tmp_path, capsys):
    """README's `run --out new --baseline accepted --fail-on-new` exited 0 when the framework could not be
    imported; so did `--known FILE` alone. Every gate now exits 3, on `run` and on `report`, saying which."""
    assert _run(tmp_path, "NumpyAdapter", out="accepted") == 0
    accepted = str(tmp_path / "accepted")
    known = tmp_path / "known.yaml"
    known.write_text("[]\n")
    for gate, out in ((["--baseline", accepted, "--fail-on-new"], "new"), (["--known", str(known)], "known")):
        capsys.readouterr()
        assert _run(tmp_path, "UnloadableAdapter", *gate, out=out) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and f"{gate[0] if gate[0] == '--known' else gate[2]}: " in err[0]
        assert "did not run" in err[0]
        counted = ("baseline: 0 new, 0 changed, 0 fixed, 0 lost" if gate[0] == "--baseline"
                   else "known: 0 accepted; known entries: 0 matched, 0 not exercised, 0 stale")
        assert err[1] == (f"kl-conformance: {counted}; gate failed: not everything was judged "
                          f"({gate[0] if gate[0] == '--known' else gate[2]})")  # the decision, in one line
        assert "numpy_kl" in err[0]
        assert _junit_counts(tmp_path / out)["failures"] == 1  # the dashboard is red too
    assert main(["report", str(tmp_path / "new"), "--out", str(tmp_path / "merged"), "--baseline", accepted,
                 "--fail-on-new"]) == 3
    assert main(["report", str(tmp_path / "new"), "--out", str(tmp_path / "merged-known"), "--known",
                 str(known)]) == 3
    # without a gate it stays a line and exit 0, so a matrix still gets its merged report
    assert main(["report", str(tmp_path / "new"), "--out", str(tmp_path / "plain")]) == 0


def test_every_gate_fails_when_every_result_is_unsupported(tmp_path, capsys):
    """A memory budget that refuses every case: every row is unsupported, nothing was judged."""
    known = tmp_path / "known.yaml"
    known.write_text("[]\n")
    assert _run(tmp_path, "NumpyAdapter", "--memory-budget-mb", "1e-9", out="plain") == 0
    assert {r.verdict.value for r in iter_results(tmp_path / "plain")} == {"unsupported"}
    capsys.readouterr()
    assert _run(tmp_path, "NumpyAdapter", "--memory-budget-mb", "1e-9", "--strict", out="strict") == 3
    assert "judged nothing: all its 4 results are unsupported" in capsys.readouterr().err
    assert _run(tmp_path, "NumpyAdapter", "--memory-budget-mb", "1e-9", "--known", str(known), out="known") == 3
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged"), "--strict"]) == 3


def test_every_gate_fails_when_the_memory_budget_refuses_some_calls(tmp_path, capsys):
    """A budget that refused most calls passed --strict: only a run that refused every call failed, and the
    summary counted the refused ones as "API parts not offered". A refused call is the harness's, not the
    framework's: not checked, so every gate fails closed, and every report says so."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: small, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}\n"
                     f"- {{id: too-big, input: [{[-1.0] * 600}], target: [{[1 / 600] * 600}], reduction: sum, "
                     "dtype: float64}\n")

    def run(*extra, out, budget=("--memory-budget-mb", "0.1")):
        return main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--cases", str(cases), "--suite", "none",
                     "--part", "forward", "--out", str(tmp_path / out), "--no-progress", "--no-repro", *budget,
                     *extra])

    assert run(out="plain") == 0
    line = "numpy-test: 1 results not checked, their calls refused by the harness (needs about 1.5 MB, over the " \
           "memory budget of 0.1 MB (raise --memory-budget-mb))"
    assert f"kl-conformance: {line}" in capsys.readouterr().err.splitlines()  # said without a gate, exit 0
    rows = {r.case_id: r for r in iter_results(tmp_path / "plain")}
    assert rows["small"].verdict.value == "pass" and not rows["small"].refused
    assert rows["too-big"].refused and rows["too-big"].defect == ""  # no behaviour of the framework's
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["refused"] == 1 and summary["defects"] == []
    assert f"{line}." in (tmp_path / "plain" / "report.md").read_text()
    assert line in (tmp_path / "plain" / "report.html").read_text()
    known = tmp_path / "known.yaml"
    known.write_text("[]\n")
    for gate, out in ((["--strict"], "strict"), (["--known", str(known)], "known"),
                      (["--baseline", str(tmp_path / "plain"), "--fail-on-new"], "new")):
        capsys.readouterr()
        assert run(*gate, out=out) == 3, gate
        assert f"kl-conformance: {gate[-1] if gate[0] != '--known' else '--known'}: {line}" \
            in capsys.readouterr().err.splitlines()
        assert _junit_counts(tmp_path / out)["failures"] == 1
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged"), "--strict"]) == 3
    import conformance.api as kl  # the same through the API

    assert kl.gate(tmp_path / "plain", strict=True).code == 3
    assert run("--strict", out="roomy", budget=()) == 0  # a budget that refuses nothing gates as before
    # a run of 0.14.2 gave a refused call a defect id: it is read as it is, and shows no defect of the framework's
    lines = (tmp_path / "plain" / "results.jsonl").read_text().splitlines()
    (tmp_path / "plain" / "results.jsonl").write_text("".join(
        (line.replace('"defect": ""', '"defect": "numpy-test-0123456789"') if '"too-big"' in line else line) + "\n"
        for line in lines))
    assert "numpy-test-0123456789" in (tmp_path / "plain" / "results.jsonl").read_text()
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "old")]) == 0
    assert json.loads((tmp_path / "old" / "summary.json").read_text())["defects"] == []


def test_an_adapter_whose_reason_reads_like_the_harness_refusal_is_not_one(tmp_path, capsys):
    """A refusal is the harness's only: an adapter (or a profile) whose unsupported reason opens with the
    harness's words made its call "refused by the harness", failing every gate and hiding its defect."""
    assert _run(tmp_path, "RefusingWordsAdapter", "--part", "forward", "--strict", out="spoof") == 0
    rows = list(iter_results(tmp_path / "spoof"))
    unsupported = [r for r in rows if r.verdict.value == "unsupported"]
    assert unsupported and not any(r.refused for r in unsupported) and all(r.defect for r in unsupported)
    assert all(r.message.startswith("unsupported: refused: ") for r in unsupported)
    assert "refused by the harness" not in capsys.readouterr().err


def test_a_device_gone_since_the_baseline_is_lost_not_unselected(tmp_path, capsys, monkeypatch):
    """A GPU runner whose device went missing passed --fail-on-new: the baseline's gpu rows counted as "not
    checked (outside this run's selection)" although no --device was given. A run asks for every device present;
    one gone is lost coverage, and --device cpu is how a run leaves the others out."""
    import conformance.api as kl

    monkeypatch.setenv("KL_TEST_LOADS", str(tmp_path / "loads.txt"))
    assert _run(tmp_path, "AcceleratorAdapter", "--part", "forward", out="both") == 0  # cpu and gpu
    capsys.readouterr()
    assert _run(tmp_path, "CpuOnlyAdapter", "--part", "forward", "--baseline", str(tmp_path / "both"),
                "--fail-on-new", out="cpu") == 1
    err = capsys.readouterr().err
    assert "3 results lost" in err and "numpy-test / numpy.kl_div / gpu / forward: 3 failing" in err
    assert "this run found no device gpu (give --device to gate only the devices present)" in err
    assert sorted(d["case_id"] for d in _diff(tmp_path / "cpu")["lost"]) == ["ok-after", "ok-before", "the-fault"]
    assert kl.gate(tmp_path / "cpu", baseline=tmp_path / "both", fail_on_new=True).code == 1
    assert _run(tmp_path, "CpuOnlyAdapter", "--part", "forward", "--device", "cpu", "--baseline",
                str(tmp_path / "both"), "--fail-on-new", out="narrowed") == 0
    assert _diff(tmp_path / "narrowed")["not_checked"] == 3


def _diff(run_dir) -> dict:
    return json.loads((run_dir / "baseline.json").read_text())


def test_lost_coverage_fails_fail_on_new_and_is_not_called_fixed(tmp_path, capsys):
    """A release that answers "no kernel" where the baseline passed or diverged passed --fail-on-new, and the
    lost divergence was called "fixed"."""
    assert _run(tmp_path, "NanAdapter", out="diverging") == 0
    capsys.readouterr()
    assert _run(tmp_path, "NoKernelAdapter", "--baseline", str(tmp_path / "diverging"), "--fail-on-new",
                out="lost") == 1
    assert "2 results lost" in capsys.readouterr().err
    diff = _diff(tmp_path / "lost")
    assert diff["fixed"] == [] and sorted((d["case_id"], d["before"][0], d["after"][0]) for d in diff["lost"]) == \
        [("ok-after", "pass", "unsupported"), ("the-fault", "nonfinite", "unsupported")]
    assert sorted(d["case_id"] for d in diff["failing"]) == ["ok-after", "the-fault"]
    report = (tmp_path / "lost" / "report.md").read_text()
    assert "### Lost (2)" in report and "### Fixed" not in report
    assert _junit_counts(tmp_path / "lost")["failures"] == 3  # the two rows, and the gate
    assert _run(tmp_path, "NumpyAdapter", out="passing") == 0
    # a crash where the baseline answered is lost coverage too
    assert _run(tmp_path, "SegfaultAdapter", "--baseline", str(tmp_path / "passing"), "--fail-on-new",
                out="crashed") == 1
    assert [(d["case_id"], d["after"][0]) for d in _diff(tmp_path / "crashed")["lost"]] == [("the-fault", "crash")]


@pytest.mark.parametrize("narrowing", [["--part", "forward"], ["--only", "ok-*"], ["--shard", "1/2"]])
def test_a_baseline_row_outside_the_selection_is_not_checked(tmp_path, narrowing):
    """`--part forward` against a full baseline passed and called the rows it did not select "gone"."""
    assert _run(tmp_path, "NanAdapter", out="accepted") == 0
    accepted = tmp_path / "accepted"
    total = sum(1 for _ in iter_results(accepted))
    assert _run(tmp_path, "NanAdapter", *narrowing, "--baseline", str(accepted), "--fail-on-new") == 0
    run = sum(1 for _ in iter_results(tmp_path / "out"))
    diff = _diff(tmp_path / "out")
    assert diff["removed"] == 0 and diff["lost"] == [] and diff["fixed"] == []
    assert diff["not_checked"] == total - run > 0 and diff["unchanged"] == run
    assert f"{total - run} not checked" in (tmp_path / "out" / "report.md").read_text()
    # `report` decides the same from what run.json recorded
    assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "merged"), "--baseline", str(accepted),
                 "--fail-on-new"]) == 0
    assert _diff(tmp_path / "merged")["not_checked"] == total - run


def test_a_selected_row_that_is_missing_is_lost(tmp_path, capsys):
    """A row the run selected (its case, target and part ran) but did not write fails --fail-on-new."""
    assert _run(tmp_path, "NumpyAdapter", out="accepted") == 0
    assert _run(tmp_path, "NumpyAdapter", out="new") == 0
    results = tmp_path / "new" / "results.jsonl"
    rows = results.read_text().splitlines()
    kept = [line for line in rows if not ('"ok-before"' in line and '"forward"' in line)]
    assert len(kept) == len(rows) - 1
    results.write_text("\n".join(kept) + "\n")
    # run.json counts the rows kept (else the run is damaged: tests/faults/test_gates_record.py)
    manifest = json.loads((tmp_path / "new" / "run.json").read_text())
    manifest["counts"]["pass"] -= 1
    (tmp_path / "new" / "run.json").write_text(json.dumps(manifest))
    assert main(["report", str(tmp_path / "new"), "--out", str(tmp_path / "merged"), "--baseline",
                 str(tmp_path / "accepted"), "--fail-on-new"]) == 1
    diff = _diff(tmp_path / "merged")
    assert [(d["case_id"], d["part"], d["after"]) for d in diff["lost"]] == [("ok-before", "forward", None)]
    assert diff["removed"] == 1 and diff["not_checked"] == 0


def _docs_known_file(tmp_path) -> str:
    """The known-findings example of docs/guide/gates.md (once the README's), its framework selector set to the
    NumPy stand-in's name."""
    text = GATES_PAGE.read_text()
    block = text[text.index("For example, `ci/known.yaml`:"):]
    block = block[block.index("```yaml\n") + len("```yaml\n"):]
    block = block[:block.index("```")]
    assert block.count("framework: torch") == 2
    path = tmp_path / "known.yaml"
    path.write_text(block.replace("framework: torch", "framework: numpy-test"))
    return str(path)


def test_a_known_entry_is_not_stale_on_a_subset(tmp_path, capsys):
    """The docs' example (docs/guide/gates.md) with `--only 'fwd/batchmean/*/float32/*'` exited 1 ("matches none
    of the 98 results it concerns"): a subset, a shard or another seed is "not exercised here", said and never a
    failure."""
    known = _docs_known_file(tmp_path)
    only = ["--only", "fwd/batchmean/*/float32/*"]
    base = ["run", "--framework", ADAPTERS + "NumpyAdapter", "--no-progress", "--no-repro", "--known", known]
    assert main([*base, *only, "--out", str(tmp_path / "subset")]) == 0
    err = capsys.readouterr().err
    assert "not exercised here" in err and "(--only)" in err and "stale:" not in err
    assert err.splitlines()[-1] == ("kl-conformance: known: 0 accepted; known entries: 0 matched, "
                                    "2 not exercised, 0 stale; gate passed (--known)")
    assert "| not exercised here |" in (tmp_path / "subset" / "report.md").read_text()
    assert main(["report", str(tmp_path / "subset"), "--out", str(tmp_path / "merged"), "--known", known]) == 0
    # the two halves of a shard: each alone is a subset; merged, they are the whole selection and stale shows
    for k in (1, 2):
        assert main([*base, *only, "--seed", "7", "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "halves"),
                 "--known", known]) == 0  # still --only and another --seed
    assert "(--only, --seed)" in capsys.readouterr().err


def test_a_known_entry_is_stale_after_the_whole_suite_of_its_runs(tmp_path, capsys):
    """The merge of every shard of a case file is the whole selection: an entry that matched nothing is stale."""
    known = tmp_path / "known.yaml"
    known.write_text("- {id: gone, case_id: 'ok-*', verdict: nonfinite, reason: fixed since}\n")
    for k in (1, 2):
        assert _run(tmp_path, "NumpyAdapter", "--shard", f"{k}/2", "--known", str(known), out=f"s{k}") == 0
    assert main(["report", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "all"),
                 "--known", str(known)]) == 1
    assert "stale: matches none of the 3 results it concerns" in capsys.readouterr().err
    assert _junit_counts(tmp_path / "all")["failures"] == 1


def test_a_known_entry_is_stale_after_runs_that_split_the_parts(tmp_path, capsys):
    """A CI that runs the forward and the gradients in two jobs and merges them ran the whole suite: an entry that
    matched nothing was "not exercised here" there, and the merge passed its gate. Parts and shards that together
    cover every cell of one draw are whole; one job's parts alone, or parts of two different draws, are not."""
    known = tmp_path / "known.yaml"
    known.write_text("- {id: gone, case_id: 'ok-*', verdict: nonfinite, reason: fixed since}\n")
    gate = ["--known", str(known)]
    assert _run(tmp_path, "NumpyAdapter", "--part", "forward", *gate, out="fwd") == 0
    grads = ["--part", "grad_input", "--part", "grad_target", "--part", "grad2_input"]
    assert _run(tmp_path, "NumpyAdapter", *grads, *gate, out="grads") == 3  # the stand-in has no gradients
    capsys.readouterr()
    assert main(["report", str(tmp_path / "fwd"), str(tmp_path / "grads"), "--out", str(tmp_path / "all"),
                 *gate]) == 1
    assert "stale: matches none of the 3 results it concerns" in capsys.readouterr().err
    # the forward of shard 1 and of shard 2, the gradients whole: every cell
    for k in (1, 2):
        assert _run(tmp_path, "NumpyAdapter", "--part", "forward", "--shard", f"{k}/2", *gate, out=f"f{k}") == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "f1"), str(tmp_path / "f2"), str(tmp_path / "grads"), "--out",
                 str(tmp_path / "cells"), *gate]) == 1
    assert "stale: matches none" in capsys.readouterr().err
    # a cell missing (the forward of shard 2), or the gradients of another draw: not everything was run
    for dirs, out in ((["f1", "grads"], "half"), (["fwd", "grads7"], "seeds")):
        if out == "seeds":
            assert _run(tmp_path, "NumpyAdapter", *grads, "--seed", "7", *gate, out="grads7") == 3
        capsys.readouterr()
        assert main(["report", *(str(tmp_path / d) for d in dirs), "--out", str(tmp_path / out), *gate]) == 0
        err = capsys.readouterr().err
        assert "not exercised here" in err and "stale:" not in err, err


class TwoApisTwoDevices(NumpyAdapter):
    """The honest stand-in through two APIs, on two devices present."""

    apis = (Api("numpy.kl_div"), Api("numpy.KLDivLoss"))
    known_devices = ("cpu", "gpu")

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "gpu")


def test_a_known_entry_is_stale_after_runs_that_split_the_apis_or_the_devices(tmp_path, capsys):
    """A CI that runs each API (or each device) in a job of its own and merges them ran the whole suite, but an
    entry that matched nothing was "not exercised here" in the merge, and the gate passed on a list that had
    rotted. Runs that together made every target a whole run makes (run.json's `whole_targets`) are whole; one
    job alone, or jobs that leave a target out, are not."""
    known = tmp_path / "known.yaml"
    known.write_text("- {id: gone, case_id: 'ok-*', verdict: nonfinite, reason: fixed since}\n"
                     "- {id: gone-loss, case_id: 'ok-*', api: numpy.KLDivLoss, verdict: nonfinite, reason: r}\n")
    gate, framework = ["--known", str(known)], "tests.faults.test_gates_fail_closed:TwoApisTwoDevices"
    runs = {"f": ["--api", "numpy.kl_div"], "m": ["--api", "numpy.KLDivLoss"], "cpu": ["--device", "cpu"],
            "gpu": ["--device", "gpu"], **{f"f-{d}": ["--api", "numpy.kl_div", "--device", d] for d in ("cpu", "gpu")}}
    for out, cut in runs.items():
        # each alone a subset, but where an entry's own API ran on every device (its entry is stale there)
        assert _run(tmp_path, "", *cut, *gate, out=out, framework=framework) == (out == "m")
        assert "entry 1 (id 'gone'): not exercised here" in capsys.readouterr().err
    assert json.loads((tmp_path / "f" / "run.json").read_text())["whole_targets"] == [
        f"{framework}/{api}/{device}" for api in ("numpy.kl_div", "numpy.KLDivLoss") for device in ("cpu", "gpu")]
    for dirs in (["f", "m"], ["cpu", "gpu"], ["m", "f-gpu", "f-cpu"]):
        merged = str(tmp_path / "-".join(dirs))
        assert main(["report", *(str(tmp_path / d) for d in dirs), "--out", merged, *gate]) == 1
        err = capsys.readouterr().err
        assert err.count("stale: matches none") == 2, (dirs, err)
    # numpy.KLDivLoss on the cpu (then on every device) left out: not everything was run
    for dirs, unexercised in ((["f-cpu", "gpu"], 2), (["f-cpu", "f-gpu"], 1)):
        assert main(["report", *(str(tmp_path / d) for d in dirs), "--out", str(tmp_path / "-".join(dirs)), *gate]) == 0
        err = capsys.readouterr().err
        assert err.count("not exercised here: matches none") == unexercised and "stale:" not in err, err
    # shards and APIs split together: shard 1 of one API and shard 2 of the other hold half of the cells (as did
    # shard 1's forward and shard 2's gradients before); shard by shard of each API, every cell
    for k, api in ((1, "numpy.kl_div"), (2, "numpy.KLDivLoss"), (2, "numpy.kl_div"), (1, "numpy.KLDivLoss")):
        assert _run(tmp_path, "", "--api", api, "--shard", f"{k}/2", *gate, out=f"s{k}-{api}", framework=framework) \
            in (0, 1)
    capsys.readouterr()
    for dirs, stale in ((["s1-numpy.kl_div", "s2-numpy.KLDivLoss"], False),
                        ([f"s{k}-{api}" for k in (1, 2) for api in ("numpy.kl_div", "numpy.KLDivLoss")], True)):
        code = main(["report", *(str(tmp_path / d) for d in dirs), "--out", str(tmp_path / f"shards-{stale}"), *gate])
        err = capsys.readouterr().err
        assert (code, "entry 1 (id 'gone'): stale" in err) == (int(stale), stale), err
    assert _run(tmp_path, "NumpyAdapter", "--part", "forward", "--shard", "1/2", *gate, out="p1") == 0
    grads = ["--part", "grad_input", "--part", "grad_target", "--part", "grad2_input"]
    assert _run(tmp_path, "NumpyAdapter", *grads, "--shard", "2/2", *gate, out="p2") == 3  # no gradients
    capsys.readouterr()
    assert main(["report", str(tmp_path / "p1"), str(tmp_path / "p2"), "--out", str(tmp_path / "p"), *gate]) == 0
    assert "stale:" not in capsys.readouterr().err
    # a run.json of before the record (no whole_targets): its cuts are never known to cover every target
    for d in ("f", "m"):
        manifest = json.loads((tmp_path / d / "run.json").read_text())
        del manifest["whole_targets"]
        (tmp_path / d / "run.json").write_text(json.dumps(manifest))
    assert main(["report", str(tmp_path / "f"), str(tmp_path / "m"), "--out", str(tmp_path / "old"), *gate]) == 1
    err = capsys.readouterr().err  # the entry of one API is judged on that API's run, as before
    assert "entry 1 (id 'gone'): not exercised here" in err and "entry 2 (id 'gone-loss'): stale" in err, err


def test_a_merge_without_one_of_its_shards_is_not_everything(tmp_path, capsys):
    """A merge of shards 2/3 and 3/3 passed --strict on what it held (an artifact of shard 1 lost, say): gated,
    a merge of shards stands for the whole run ("gate on the merge"), so a shard it lacks was not checked. One
    shard, by `run --shard` or reported alone, is still gated on its own."""
    import conformance.api as kl

    for k in (1, 2, 3):
        assert _run(tmp_path, "NumpyAdapter", "--shard", f"{k}/3", "--strict", out=f"s{k}") in (0, 1)
    shards = [str(tmp_path / f"s{k}") for k in (1, 2, 3)]
    whole = main(["report", *shards, "--out", str(tmp_path / "all"), "--strict"])
    capsys.readouterr()
    assert main(["report", *shards[1:], "--out", str(tmp_path / "two"), "--strict"]) == max(whole, 3)
    line = "numpy-test: shard 1/3 of its run is not here (it holds 2/3, 3/3): the cases of that shard were not checked"
    assert f"kl-conformance: --strict: {line}" in capsys.readouterr().err.splitlines()
    assert main(["report", *shards[1:], "--out", str(tmp_path / "plain")]) == 0  # without a gate: said
    assert f"kl-conformance: {line}" in capsys.readouterr().err.splitlines()
    assert kl.gate(shards[1:], strict=True).code == max(whole, 3)
    assert kl.gate(shards, strict=True).code == whole
    # one shard reported alone is gated as its run gated it
    assert main(["report", shards[1], "--out", str(tmp_path / "one"), "--strict"]) == \
        _run(tmp_path, "NumpyAdapter", "--shard", "2/3", "--strict", out="s2-again")


def test_junit_agrees_with_the_gate(tmp_path):
    """--fail-on-new passed while junit.xml reported every unchanged finding as a failure."""
    assert _run(tmp_path, "NanAdapter", out="accepted") == 0
    assert _junit_counts(tmp_path / "accepted")["failures"] == 1  # no gate: a finding stays a failure
    accepted = str(tmp_path / "accepted")
    assert _run(tmp_path, "NanAdapter", "--baseline", accepted, "--fail-on-new", out="same") == 0
    junit = (tmp_path / "same" / "junit.xml").read_text()
    assert _junit_counts(tmp_path / "same")["failures"] == 0 and "unchanged since the baseline" in junit
    assert _run(tmp_path, "WrongShapeAdapter", "--baseline", accepted, "--fail-on-new", out="changed") == 1
    assert _junit_counts(tmp_path / "changed")["failures"] >= 1
    # --known alone fails only on stale entries: an undocumented finding is shown skipped, with why
    known = tmp_path / "known.yaml"
    known.write_text("[]\n")
    assert _run(tmp_path, "NanAdapter", "--known", str(known), out="known") == 0
    assert _junit_counts(tmp_path / "known")["failures"] == 0
    assert _run(tmp_path, "NanAdapter", "--strict", out="strict") == 1
    assert _junit_counts(tmp_path / "strict")["failures"] == 2  # the finding, and the gate it failed


def test_the_selftest_proves_the_gates_on_broken_builds(tmp_path, monkeypatch):
    """A framework that cannot be imported and one that lost a dtype must fail every gate asked of them; a
    gate weakened to pass them fails the self-test."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    args = ["selftest", "--framework", ADAPTERS + "NumpyAdapter", "--suite", "none", "--cases", str(cases),
            "--variant", "gate_not_importable", "--variant", "gate_lost_dtype"]
    assert main([*args, "--out", str(tmp_path / "st")]) == 0
    report = {v["name"]: v for v in json.loads((tmp_path / "st" / "selftest.json").read_text())["variants"]}
    assert report["gate_not_importable"]["ok"] and report["gate_lost_dtype"]["ok"]
    assert set(report["gate_not_importable"]["verdicts"]) == {"--strict exit 3", "--fail-on-new exit 3",
                                                              "--known exit 3"}
    assert set(report["gate_lost_dtype"]["verdicts"]) == {"--fail-on-new exit 1"}
    import conformance.report.gate as gate

    monkeypatch.setattr(gate, "incomplete", lambda manifests, tally: [])  # the gates as they were: open
    assert main([*args, "--out", str(tmp_path / "weak")]) == 1
    weak = {v["name"]: v for v in json.loads((tmp_path / "weak" / "selftest.json").read_text())["variants"]}
    assert not weak["gate_not_importable"]["ok"] and "the gate passed" in weak["gate_not_importable"]["missed"][0]


def test_a_profile_set_written_as_a_path_runs_and_a_bad_choice_is_one_line(tmp_path, capsys):
    """`set: {gradients.conventions.nan_propagation: formula}` died mid-run with a TypeError (exit 1, run.json
    left at `running`); it names the choice now. An unknown choice is refused at load in one line, exit 2."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    deviation = ("framework: numpy-test\ndeviations:\n- {id: x, apis: [numpy.kl_div], set: "
                 "{gradients.conventions.nan_propagation: %s}, rationale: r, basis: docs, reference: 'https://x'}\n")
    (profiles / "numpy-test.yaml").write_text(deviation % "formula")
    assert _run(tmp_path, "NumpyAdapter", "--profiles", str(profiles), out="ok") == 0
    assert json.loads((tmp_path / "ok" / "run.json").read_text())["status"] == "complete"
    (profiles / "numpy-test.yaml").write_text(deviation % "bogus")
    capsys.readouterr()
    assert _run(tmp_path, "NumpyAdapter", "--profiles", str(profiles), out="bad") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "numpy-test.yaml" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()
