"""The construction cases (issue 30 item 3): tensors made from NumPy arrays, nested Python lists and the
frameworks' fill factories, the dtype given or inferred, on a few cases only; every earlier id keeps its meaning."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from conformance.cases.digest import case_digest
from conformance.cases.generate import DEFAULT_SEED, build_case, check_key, generate_cases, generated_keys
from conformance.cases.ids import build_id, parse_id
from conformance.cases.suites import swapped_pairs
from conformance.cli import main
from conformance.core.case import Construction
from conformance.core.rounding import is_representable

# main's pinned digest of the default suite before construction cases and swapped dtype pairs existed (tests/helpers.py
# before both)
DIGEST_BEFORE_CONSTRUCTIONS = "4699d4bfc68891cf8380e37c543eaaa206b11b80f3a049afd1a1217e217fb74b"


def _construction_cases(spec):
    return [c for c in generate_cases(spec, DEFAULT_SEED) if not c.construction.is_default]


def test_every_earlier_case_keeps_its_id_and_content(spec):
    """Only the new cases carry a construction: the rest of the default suite, but for the swapped dtype pairs
    added beside them (a wide input with a narrow target, which no earlier case had), is the suite before, id for
    id and digest for digest."""
    swapped = set(swapped_pairs(spec))
    lines = "".join(f"{c.id} {case_digest(c)}\n" for c in generate_cases(spec, DEFAULT_SEED)
                    if c.construction.is_default and c.dtype not in swapped)
    assert hashlib.sha256(lines.encode()).hexdigest() == DIGEST_BEFORE_CONSTRUCTIONS


def test_how_many_construction_cases_and_where(spec):
    """Per input space (log and linear targets, and probability inputs for Keras): a list in float16, bfloat16
    and float64 on 4x6, 0-d and 3x0 (9), a fill factory in those dtypes on 0-d and 3x0 (6), a list and a factory
    with the dtype inferred as float32 (3 + 2), and a NumPy array of float16, float32 and float64 with the dtype
    inferred (9): 29, three times."""
    cases = _construction_cases(spec)
    assert len(cases) == 3 * (9 + 6 + 3 + 2 + 9)
    assert all(",from=" in c.id for c in cases)
    assert all(",from=" not in c.id for c in generate_cases(spec, DEFAULT_SEED) if c.construction.is_default)
    by_source = Counter((c.construction.source, c.construction.inferred, c.dtype.input) for c in cases)
    assert by_source == Counter({**{("list", False, d): 9 for d in ("float16", "bfloat16", "float64")},
                                 **{("factory", False, d): 6 for d in ("float16", "bfloat16", "float64")},
                                 ("list", True, "float32"): 9, ("factory", True, "float32"): 6,
                                 **{("numpy", True, d): 9 for d in ("float16", "float32", "float64")}})
    assert {c.input.shape for c in cases} == {(4, 6), (), (3, 0)}
    assert {c.input.shape for c in cases if c.construction.source == "factory"} == {(), (3, 0)}
    assert {(c.family, c.layout, c.dtype.is_mixed) for c in cases} == {("certain", "contiguous", False)}
    assert {c.params.reduction for c in cases if 0 in c.input.shape} == {"sum"}
    assert {c.params.reduction for c in cases if 0 not in c.input.shape} == {"none"}


def test_construction_cases_hold_full_precision_inputs_against_a_certain_target(spec):
    """The loss is -input term by term, so the input's values are what is judged; a float64 input is not a
    float32 number (a constructor rounding through float32 shows)."""
    for case in _construction_cases(spec):
        if case.input.size:
            assert np.all(case.target == (0.0 if case.params.log_target else 1.0)), case.id
            assert is_representable(case.input, case.dtype.input)
        if case.dtype.input == "float64" and case.input.size:
            assert not is_representable(case.input, "float32"), case.id


def test_construction_ids_round_trip_and_read_as_documented(spec):
    key = parse_id("fwd/none/log_target=1/4x6/float64,from=list/certain/s0")
    assert key.construction == Construction("list") and str(key.dtype) == "float64"
    key = parse_id("fwd/sum/log_target=0/3x0/float32,from=factory,inferred/certain/s0")
    assert key.construction == Construction("factory", inferred=True) and key.input_shape == (3, 0)
    assert parse_id("fwd/sum/log_target=0/4x6/float32/softmax/s0").construction.is_default
    for case_id, key in generated_keys(spec):
        assert build_id(parse_id(case_id)) == case_id
    with pytest.raises(ValueError, match="no construction"):
        parse_id("fwd/none/log_target=1/4x6/float64,from=tuple/certain/s0")


@pytest.mark.parametrize("case_id, problem", [
    ("fwd/none/log_target=1/4x6/float64,from=factory/certain/s0", "only 0-d"),
    ("fwd/none/log_target=1/4x6.T/float64,from=list/certain/s0", "contiguous"),
    ("fwd/none/log_target=1/4x6/bfloat16,from=numpy,inferred/certain/s0", "NumPy has no bfloat16"),
    ("fwd/none/log_target=1/4x6/float64,from=list,inferred/certain/s0", "dtypes.inferred.python_float"),
    ("fwd/none/log_target=1/4x6/float64/certain/s0", "only the construction cases"),
    ("fwd/none/log_target=1/4x6/float64,from=list/softmax/s0", "family 'certain'"),
    ("fwd/none/log_target=1/4x6/float32:float64,from=list/certain/s0", "one floating dtype"),
])
def test_a_construction_no_generator_makes_is_refused(spec, case_id, problem):
    with pytest.raises(ValueError, match=problem):
        check_key(parse_id(case_id), spec)


def test_only_names_a_construction_case_and_refuses_another_spelling(capsys):
    assert main(["cases", "--only", "fwd/none/log_target=1/4x6/float64,from=list/certain/s0"]) == 0
    assert capsys.readouterr().out.split() == ["fwd/none/log_target=1/4x6/float64,from=list/certain/s0"]
    assert main(["cases", "--only", "fwd/none/log_target=1/4x6/float64,from=numpy/softmax/s0"]) == 2
    assert "written another way" in capsys.readouterr().err
    assert main(["cases", "--only", "fwd/none/log_target=1/4x6/float64,from=list,inferred/certain/s0"]) == 2
    assert "dtypes.inferred.python_float" in capsys.readouterr().err


def test_the_construction_is_part_of_the_digest(spec):
    """Two cases of one content made two ways are two cases: the digest says which."""
    listed = build_case(parse_id("fwd/none/log_target=1/4x6/float64,from=list/certain/s0"), DEFAULT_SEED)
    assert case_digest(listed) != case_digest(replace(listed, construction=Construction()))


def test_the_family_option_selects_the_construction_cases(capsys):
    assert main(["cases", "--family", "certain", "--count"]) == 0
    assert int(capsys.readouterr().out.strip()) == 3 * 29
