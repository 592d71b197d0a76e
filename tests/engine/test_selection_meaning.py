"""Selection by meaning (--reduction, --log-target, --dtype, --family): a case is chosen by what it is, not by
the spelling of its id. `fwd/batchmean/*` used to be the only way to ask for one reduction, and it left out the
legacy variants such as `batchmean(size_average=1)`, which reduce as their size_average/reduce pair says."""

from __future__ import annotations

import pytest

from conformance.cases.ids import parse_id
from conformance.cli import main
from conformance.run.selection import CaseSelection, select_lazily

# The legacy rows of torch's documented rule ("specifying either of those two args will override reduction"),
# written out here rather than read from the spec the code reads: a null argument counts as true.
LEGACY = {(None, True): "mean", (None, False): "none", (True, None): "mean", (True, True): "mean",
          (True, False): "none", (False, None): "sum", (False, True): "sum", (False, False): "none"}


def _ids(spec, **given) -> list[str]:
    return [case_id for case_id, _ in select_lazily(spec, CaseSelection(**given))]


def _performed(case_id: str) -> str:
    params = parse_id(case_id).params
    return LEGACY[(params.size_average, params.reduce)] if params.has_legacy else params.reduction


def test_a_reduction_includes_the_legacy_variants_that_reduce_that_way(spec):
    whole = _ids(spec)
    for reduction in ("none", "mean", "sum", "batchmean"):
        chosen = _ids(spec, reduction=(reduction,))
        # exactly the cases that perform this reduction, in the suite's order
        assert chosen == [i for i in whole if _performed(i) == reduction], reduction
    mean = set(_ids(spec, reduction=("mean",)))
    legacy_to_mean = [i for i in mean if i.startswith("fwd/batchmean(") or i.startswith("fwd/sum(")]
    assert legacy_to_mean, "the default suite has legacy variants written batchmean(...) or sum(...) that mean"
    assert not any(i.startswith("fwd/mean(reduce=0)") for i in mean)  # reduce=0 is unreduced
    assert not any("(" in i for i in _ids(spec, reduction=("batchmean",)))  # no legacy pair maps to batchmean
    both = _ids(spec, reduction=("sum", "none"))
    assert set(both) == set(_ids(spec, reduction=("sum",))) | set(_ids(spec, reduction=("none",)))


def test_dtype_log_target_and_family_select_by_the_case_and_combine_with_only(spec):
    mixed = _ids(spec, dtype=("float32:float64",))
    assert mixed and all("/float32:float64/" in i for i in mixed)
    with_float64 = _ids(spec, dtype=("float64",))
    assert all(parse_id(i).dtype.input == "float64" or parse_id(i).dtype.target == "float64" for i in with_float64)
    assert set(mixed) <= set(with_float64)  # a pair with a float64 side has that dtype
    picked = _ids(spec, log_target=("1",), family=("softmax", "onehot"), only=("fwd/sum*",))
    assert picked and all(i.startswith("fwd/sum") and "/log_target=1" in i and i.split("/")[-2] in
                          ("softmax", "onehot") for i in picked)
    assert _ids(spec, log_target=("true",), family=("softmax", "onehot"), only=("fwd/sum*",)) == picked
    # exact ids are filtered too (the direct path that rebuilds them)
    exact = ("fwd/none/log_target=0/scalar/float16/softmax/s0", "fwd/none/log_target=0/scalar/float16/onehot/s0")
    assert _ids(spec, only=exact, family=("onehot",)) == [exact[1]]


def test_a_case_file_is_selected_by_its_cases_meaning(spec, tmp_path):
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "- {id: legacy-mean, input: [-1.0], target: [0.5], reduction: batchmean, size_average: true}\n"
        "- {id: plain-sum, input: [-1.0], target: [0.5], reduction: sum, dtype: float64}\n"
        "- {id: in-log-space, input: [-1.0], target: [-0.7], reduction: sum, log_target: true}\n")
    given = {"suite": "none", "case_files": (str(cases),)}
    assert _ids(spec, reduction=("mean",), **given) == ["legacy-mean"]
    assert _ids(spec, reduction=("sum",), log_target=("0",), **given) == ["plain-sum"]
    assert _ids(spec, dtype=("float64",), **given) == ["plain-sum"]
    assert _ids(spec, family=("user",), **given) == ["legacy-mean", "plain-sum", "in-log-space"]
    assert _ids(spec, family=("softmax",), **given) == []


@pytest.mark.parametrize("option, value, named", [
    ("--reduction", "batch_mean", "batchmean"), ("--log-target", "yes", "0, 1"),
    ("--dtype", "float8", "bfloat16"), ("--dtype", "float32:float", "INPUT:TARGET"), ("--family", "softmaxx", "onehot"),
])
@pytest.mark.parametrize("command", ["cases", "run", "selftest"])
def test_an_unknown_value_is_one_line_naming_the_option_value_and_choices(tmp_path, capsys, command, option, value,
                                                                          named):
    out = tmp_path / "out"
    extra = ["--framework", "tests.faults.adapters:NumpyAdapter", "--out", str(out)] + \
        (["--no-progress"] if command == "run" else []) if command in ("run", "selftest") else []
    assert main([command, option, value, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and repr(value) in err and named in err, err
    assert not out.exists()
