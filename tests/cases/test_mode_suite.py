"""The mode suite (`--suite modes`): what compiled modes run, each signature a compile. It keeps every
(family, dtype pair, reduction) of the default suite in each input space, and is much smaller."""

from __future__ import annotations

import numpy as np

from conformance.cases.generate import build_case, generated_keys
from conformance.cases.ids import parse_id
from conformance.cli import main
from conformance.core.specload import load_spec


def _keys(suite):
    return [key for _, key in generated_keys(load_spec(), suite=suite)]


def _coverage(keys):
    return {(k.family, k.dtype, k.params.reduction, k.params.prob_input) for k in keys}


def test_the_mode_suite_covers_what_the_default_suite_covers_and_is_much_smaller(capsys):
    # the construction cases (made otherwise than from NumPy) are not the mode suite's: a tensor is made before any
    # compiled call, so a mode adds nothing to how it was made
    default, modes = [k for k in _keys("default") if k.construction.is_default], _keys("modes")
    assert all(k.construction.is_default for k in modes)
    assert _coverage(default) <= _coverage(modes)
    assert main(["cases", "--suite", "modes", "--count"]) == 0
    printed = int(capsys.readouterr().out.strip())
    assert printed == len(modes) and 3 * printed < 2 * len(default)  # under two thirds
    # every shape level and both log_target values are still met, with every reduction
    assert {(k.input_shape, k.target_shape, k.layout) for k in default} <= \
        {(k.input_shape, k.target_shape, k.layout) for k in modes}
    assert {(k.params.reduction, k.params.log_target) for k in default} <= \
        {(k.params.reduction, k.params.log_target) for k in modes}


def test_the_mode_suite_holds_the_pinned_cases_of_the_inductor_findings(capsys):
    assert main(["cases", "--suite", "modes", "--family", "pinned"]) == 0
    ids = capsys.readouterr().out.split()
    cases = {case_id: build_case(parse_id(case_id), seed=1) for case_id in ids}
    by_what = {(c.params.reduction, c.params.log_target, str(c.dtype.input), str(c.dtype.target)): c
               for c in cases.values()}
    half_mean = by_what[("mean", False, "float16", "float16")]
    assert np.all(half_mean.input[:, 0] == -60000.0) and np.all(half_mean.target[:, 0] == 5.0)
    assert not half_mean.target[:, 1:].any()  # the other terms are 0: the mean is within float16, the term not
    mixed_log = by_what[("sum", True, "float32", "float16")]
    assert np.all(mixed_log.target == 80.0)
    # not in the default suite: its ids are unchanged
    assert not any(k.family == "pinned" for k in _keys("default"))
