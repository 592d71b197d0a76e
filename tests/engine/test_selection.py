"""The selection counted from ids alone is the selection run: same ids, same order, same checks.

`run` counts and checks the selection with `select_lazily` (no value drawn) before anything is
written, then makes the cases; a difference would mis-count the progress bar, or let a bad case
file through the check and fail after output was written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conformance.core.errors import CaseFileError, UsageError
from conformance.run.selection import CaseSelection, select_cases, select_lazily

EXAMPLES = str(Path(__file__).resolve().parents[2] / "cases" / "examples" / "regressions.yaml")


def _selection(**given) -> CaseSelection:
    return CaseSelection(**{"seed": 0, **given})


SELECTIONS = {
    "default": _selection(),
    "two samples": _selection(samples=2),
    "pattern": _selection(only=("fwd/none/*",)),
    "shard": _selection(shard="2/5"),
    "user file alone": _selection(suite="none", case_files=(EXAMPLES,)),
    "user file and suite": _selection(case_files=(EXAMPLES,)),
    "exact id and pattern": _selection(only=("fwd/none/log_target=0/scalar/float16/softmax/s0", "fwd/sum/*")),
    "exact id": _selection(only=("fwd/none/log_target=0/scalar/float16/softmax/s0",)),
    "exhaustive shard": _selection(suite="exhaustive", shard="3/40"),
    "by meaning": _selection(reduction=("mean",), dtype=("float32",), case_files=(EXAMPLES,)),
    "by meaning and exact ids": _selection(family=("softmax",), only=(
        "fwd/none/log_target=0/scalar/float16/softmax/s0", "fwd/none/log_target=0/scalar/float16/onehot/s0")),
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
        list(select_lazily(spec, _selection(case_files=(str(clash),))))
    # --only naming exactly that id took the user's case in the generated one's place, silently
    for select in (select_lazily, select_cases):
        with pytest.raises(CaseFileError, match="also a generated case's id"):
            list(select(spec, _selection(case_files=(str(clash),),
                                         only=("fwd/none/log_target=0/scalar/float16/softmax/s0",))))
    alone = list(select_cases(spec, _selection(case_files=(str(clash),), suite="none",
                                               only=("fwd/none/log_target=0/scalar/float16/softmax/s0",))))
    assert [c.source for c in alone] == [str(clash)]  # the file alone: its case, no generated one to share the id
    with pytest.raises(UsageError):
        list(select_lazily(spec, _selection(only=("fwd/none/log_target=0/scalar/float17/softmax/s0",))))
