"""The selection counted from ids alone is the selection run: same ids, same order, same checks.

`run` counts and checks the selection with `select_lazily` (no value drawn) before anything is
written, then makes the cases; a difference would mis-count the progress bar, or let a bad case
file through the check and fail after output was written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from conformance.errors import CaseFileError, UsageError
from conformance.selection import select_cases, select_lazily

EXAMPLES = str(Path(__file__).resolve().parents[2] / "cases" / "examples" / "regressions.yaml")


def _args(**given) -> argparse.Namespace:
    options = dict(seed=0, suite="default", samples=1, cases=[], only=[], shard=None, memory_budget_mb=8192.0)
    return argparse.Namespace(**{**options, **given})


SELECTIONS = {
    "default": _args(),
    "two samples": _args(samples=2),
    "pattern": _args(only=["fwd/none/*"]),
    "shard": _args(shard="2/5"),
    "user file alone": _args(suite="none", cases=[EXAMPLES]),
    "user file and suite": _args(cases=[EXAMPLES]),
    "exact id and pattern": _args(only=["fwd/none/log_target=0/scalar/float16/softmax/s0", "fwd/sum/*"]),
    "exact id": _args(only=["fwd/none/log_target=0/scalar/float16/softmax/s0"]),
    "exhaustive shard": _args(suite="exhaustive", shard="3/40"),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_lazy_selection_makes_exactly_the_selected_cases(spec, name):
    args = SELECTIONS[name]
    lazy = list(select_lazily(spec, args))
    made = list(select_cases(spec, args))
    assert len(lazy) == len(made) > 0
    for (case_id, make), case in zip(lazy, made):
        again = make()
        assert case_id == case.id == again.id and again.source == case.source and again.params == case.params
        assert np.array_equal(again.input, case.input, equal_nan=True)
        assert np.array_equal(again.target, case.target, equal_nan=True)


def test_ids_alone_make_the_same_checks(spec, tmp_path):
    """A user id that is also a generated id, and a malformed exact id, are refused while only ids are listed."""
    clash = tmp_path / "clash.yaml"
    clash.write_text("- id: fwd/none/log_target=0/scalar/float16/softmax/s0\n  input: [0.5]\n  target: [0.5]\n")
    with pytest.raises(CaseFileError, match="also a generated case's id"):
        list(select_lazily(spec, _args(cases=[str(clash)])))
    with pytest.raises(UsageError):
        list(select_lazily(spec, _args(only=["fwd/none/log_target=0/scalar/float17/softmax/s0"])))
