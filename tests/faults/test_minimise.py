"""Minimising a reproducer: the first single element, in the screen's order, that keeps the run's verdict."""

from __future__ import annotations

import numpy as np

from conformance.cases.userfile import load_case_file
from conformance.core.model import Verdict
from conformance.core.specload import load_spec
from conformance.repro import _Job, _minimise_all, expectations, in_process
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
    job = _Job(case, adapter.api("numpy.kl_div"), "cpu", "forward", verdict=Verdict.VALUE)
    _minimise_all([job], observe, expectations(spec), spec)
    assert job.final.input.shape == (1,) and job.final.target.item() == targets[20]
    assert job.final.input.item() == inputs[20]
    assert [n for n in rounds if n] == [1, 1, 2, 4, 8, 16]  # the screen (one call of every element), then the widening rounds
    assert abs(job.observed.value.item() - (targets[20] * 0.5 + 1.0)) < 1e-12  # element 20's own observation
