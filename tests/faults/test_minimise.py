"""Minimising a reproducer: the first single element, in the screen's order, that keeps the run's verdict."""

from __future__ import annotations

import numpy as np

from conformance.cases.userfile import load_case_file
from conformance.cli import main
from conformance.core.model import Verdict
from conformance.core.results import iter_results
from conformance.core.specload import load_spec
from conformance.repro.minimise import Job, expectations, in_process, minimise_all
from conformance.repro.scripts import within_budget
from conformance.repro.source import CaseSource
from conformance.run.selection import needs_mb
from tests.faults.adapters import OffOnLateSinglesAdapter


def test_the_first_candidate_in_order_wins_in_a_few_rounds(tmp_path):
    """The adapter diverges on elements 20 to 39 alone, and the screening call shows none of them, so the
    order stays 0, 1, 2, ...: element 20 must be chosen, though the round that reaches it tries 21 to 30
    as well (they diverge too), and in 6 rounds (the screen, then 1, 2, 4, 8, 16 candidates), not 22."""
    targets = [round(0.01 * (i + 1), 2) for i in range(40)]
    inputs = [float(np.log(t)) - 0.5 for t in targets]
    cases = tmp_path / "cases.yaml"
    cases.write_text(f"- {{id: late, input: {inputs}, target: {targets}, reduction: sum, dtype: float64}}\n")
    case, = load_case_file(cases)
    adapter = OffOnLateSinglesAdapter()
    spec = load_spec()
    rounds = []

    def observe(calls):
        rounds.append(len(calls))
        return in_process(adapter)(calls)
    job = Job(case, adapter.api("numpy.kl_div"), "cpu", "forward", verdict=Verdict.VALUE)
    minimise_all([job], observe, expectations(), spec)
    assert job.final.input.shape == (1,) and job.final.target.item() == targets[20]
    assert job.final.input.item() == inputs[20]
    assert [n for n in rounds if n] == [1, 1, 2, 4, 8, 16]  # the screen (one call of every element), then the widening rounds
    assert abs(job.observed.value.item() - (targets[20] * 0.5 + 1.0)) < 1e-12  # element 20's own observation


def test_reproducers_are_minimised_in_groups_within_the_memory_budget(tmp_path):
    """Minimising holds every job's observation and expectation until its script is written: many divergent
    cases, each within the budget, are taken in groups that fit it together, and every reproducer is still
    written."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("".join(f"- {{id: fault-{i}, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.5, 0.25]], "
                             f"reduction: none, dtype: float64}}\n" for i in range(5)))
    out = tmp_path / "out"
    assert main(["run", "--framework", "tests.faults.adapters:OffByOneAdapter", "--suite", "none", "--cases",
                 str(cases), "--out", str(out), "--no-progress", "--no-repro"]) == 0
    rows = [r for r in iter_results(out) if r.verdict.is_divergence]
    assert len(rows) == 5
    source = CaseSource(str(out), None, None)
    one_mb = needs_mb(source.get("fault-0"))
    budget_mb = 2.5 * one_mb  # two cases fit together, three do not
    groups = list(within_budget(rows, source.get, budget_mb))
    assert [len(g) for g in groups] == [2, 2, 1]
    assert all(sum(needs_mb(case) for _, case in g) <= budget_mb for g in groups)
    assert main(["repro", "--all", str(tmp_path / "repro"), "--from", str(out), "--framework",
                 "tests.faults.adapters:OffByOneAdapter", "--memory-budget-mb", str(budget_mb)]) == 0
    assert len(list((tmp_path / "repro").glob("*.py"))) == 5


def _off_by_one_run(tmp_path, cases_yaml: str, *extra: str):
    """A run of the off-by-one stand-in over these cases, without reproducers: its directory."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(cases_yaml)
    out = tmp_path / "out"
    assert main(["run", "--framework", "tests.faults.adapters:OffByOneAdapter", "--suite", "none", "--cases",
                 str(cases), "--out", str(out), "--no-progress", "--no-repro", *extra]) == 0
    return out


def _repro_all(tmp_path, out) -> int:
    return main(["repro", "--all", str(tmp_path / "repro"), "--from", str(out), "--framework",
                 "tests.faults.adapters:OffByOneAdapter"])


def test_a_script_shows_the_element_its_row_shows(tmp_path):
    """The minimiser took the first element that kept the verdict, so a script showed another element than its
    row, report.md and the issue draft (whose snippet and "got against expected" then disagreed): the element
    the row's message names is tried first."""
    out = _off_by_one_run(tmp_path, "- {id: all-fault, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.5, 0.25]], "
                                    "reduction: none, dtype: float64}\n")
    row, = [r for r in iter_results(out) if r.verdict.is_divergence and r.part == "forward"]
    assert "worst [0, 2]:" in row.message  # every element is off by one; the worst relative to its bound is [0, 2]
    assert _repro_all(tmp_path, out) == 0
    script = next(p for p in (tmp_path / "repro").glob("*.py") if "forward" in p.name).read_text()
    got = row.message.split("got ", 1)[1].split(",", 1)[0]
    assert "1 of 1 elements" in script and f"got {got}," in script  # element [0, 2]'s own numbers


def test_a_row_whose_message_names_no_element_plainly_is_minimised_as_before(tmp_path):
    """shown_at read any text between the brackets with int(): a doctored row ("worst [0 2]", or a
    5,000-digit index) made `repro --all` end in a traceback. It reads only what compare writes."""
    from conformance.judge.compare import shown_at

    assert shown_at("value: 1 of 7 elements outside bound; worst [3]: got 1.0") == (3,)
    assert shown_at("nonfinite: 2 of 24 elements differ in NaN/inf pattern; first [0, 2]: got nan") == (0, 2)
    assert shown_at("value: 1 of 1 elements outside bound; worst []: got 1.0") == ()
    for hostile in ("value: x; worst [0 2]: got", f"value: x; worst [{'9' * 5000}]: got", "error: raised X"):
        assert shown_at(hostile) is None
    out = _off_by_one_run(tmp_path, "- {id: all-fault, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.5, 0.25]], "
                                    "reduction: none, dtype: float64}\n")
    results = out / "results.jsonl"
    results.write_text(results.read_text().replace("worst [0, 2]", "worst [0 2]"))
    assert _repro_all(tmp_path, out) == 0


def test_the_element_a_row_shows_is_tried_past_the_screened_candidates(tmp_path):
    """Only the first MAX_CANDIDATES elements are screened: the element a row shows lies past them in a larger
    case, and is tried first all the same."""
    from conformance.repro.minimise import MAX_CANDIDATES

    size = MAX_CANDIDATES + 6
    targets = [1.0 / size] * size
    inputs = [-float(i % 7) - 1.0 for i in range(size)]
    out = _off_by_one_run(tmp_path, f"- {{id: wide-fault, input: [{inputs}], target: [{targets}], "
                                    "reduction: none, dtype: float64}\n", "--part", "forward")
    (row,) = [r for r in iter_results(out) if r.verdict.is_divergence]
    results = out / "results.jsonl"  # the row shows the last element, as a worse bound there would make it
    results.write_text(results.read_text().replace(row.message.split("worst ", 1)[1].split(":", 1)[0],
                                                   f"[0, {size - 1}]"))
    assert _repro_all(tmp_path, out) == 0
    (script,) = (tmp_path / "repro").glob("*.py")
    assert f"x_values = values(['{float.hex(inputs[-1])}'], (1, 1))" in script.read_text()  # element 69's own
