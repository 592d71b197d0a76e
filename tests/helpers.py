"""Small builders shared by the tests (not a framework stand-in)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from conformance.core.case import Case, DtypePair, Params


def make_case(x, t, *, reduction="none", log_target=False, dtype="float64", size_average=None, reduce=None,
              layout="contiguous", case_id="test") -> Case:
    """A Case from plain values; `dtype` is a name or an (input, target) pair."""
    pair = DtypePair(*dtype) if isinstance(dtype, tuple) else DtypePair(dtype, dtype)
    return Case(id=case_id, params=Params(reduction, log_target, size_average, reduce),
                input=np.asarray(x, dtype=np.float64), target=np.asarray(t, dtype=np.float64),
                dtype=pair, family="test", layout=layout)


def load_adapter(loaded: dict, name: str):
    """The adapter called `name`, loaded once and kept in `loaded` (the session's `loaded_adapters`)."""
    if name not in loaded:
        from conformance.adapters.registry import get_adapter

        adapter = get_adapter(name)
        adapter.load()
        adapter.learn_release()  # calls fitted to the installed release, as the worker's are
        loaded[name] = adapter
    return loaded[name]


@functools.lru_cache(maxsize=1)
def _current_spec_hash() -> str:
    """The shipped spec's hash: rows made with another spec are refused by `report`."""
    from conformance.core.specload import load_spec

    return load_spec().hash


def make_result(case_id="fwd/sum/log_target=0/4x6/float32/softmax/s0", **fields):
    """A Result row with plausible provenance; `fields` override any of them."""
    from conformance.core.defects import defect_of
    from conformance.core.model import Result, Verdict

    row = dict(case_id=case_id, case_digest="0" * 24, seed=20261122, family="softmax", reduction="sum",
               log_target=False, framework="torch", framework_version="2.13.0", api="torch.nn.functional.kl_div",
               device="cpu", mode="eager", dtype="float32", part="forward", verdict=Verdict.PASS, documented=False,
               documented_by=(), known_by=(), max_abs_err=0.0, bound=1e-6, cause="", rules=(), defect="", message="", warnings=(),
               missing_warnings=(), elapsed_s=0.001, source="generated", spec_hash=_current_spec_hash(),
               harness_version="0.1.0", python_version="3.11.7", numpy_version="2.0.0", device_name="cpu")
    row.update(fields)
    if isinstance(row["verdict"], str):
        row["verdict"] = Verdict(row["verdict"])
    if row["verdict"] is Verdict.VALUE and "max_abs_err" not in fields:
        row["max_abs_err"] = 1e-3  # outside the bound, as a value divergence's error is (results.row_problem)
    if "defect" not in fields:  # as a run names it: by the API alone, as an adapter that declares no implementation
        row["defect"] = defect_of(Result(**row), row["api"])
    return Result(**row)
def as_api_takes(case: Case, api, spec) -> Case:
    """`case` as `api` expresses it: the target in log space for an API that takes log-probabilities only
    (MLX), the input as probabilities for an API that takes those (Keras: q = exp(log q)), and batchmean
    as the mean over distributions for a dialect without batchmean (the same divisor for a 2-d batch)."""
    if api.prob_input and not case.params.prob_input:
        with np.errstate(over="ignore"):
            case = replace(case, input=np.exp(case.input), params=replace(case.params, prob_input=True))
    p = case.params
    if api.only_log_target and not p.log_target:
        with np.errstate(divide="ignore"):
            case = replace(case, target=np.log(case.target), params=replace(p, log_target=True))
    if case.params.reduction == "batchmean" and "batchmean" not in spec.dialect(api.dialect)["reductions"]:
        case = replace(case, params=replace(case.params, reduction="mean"))
    return case


def default_suite_digest() -> str:
    """One digest of every default case's id and content, for comparing environments (NumPy 1 and 2)."""
    import hashlib

    from conformance.cases.digest import case_digest
    from conformance.cases.generate import DEFAULT_SEED, generate_cases
    from conformance.core.specload import load_spec

    lines = "".join(f"{case.id} {case_digest(case)}\n" for case in generate_cases(load_spec(), DEFAULT_SEED))
    return hashlib.sha256(lines.encode()).hexdigest()


# The default suite's digest, the same under every NumPy and libm (cases/rounded_math.py): each framework's
# environment checks it (tests/e2e/test_case_values.py), so `report` can merge their rows. It changes only when
# the generator, the spec's suite or the case format changes; then update it here, in the same commit.
DEFAULT_SUITE_DIGEST = "eab38a6e035750a4b5fa55d1c02484da06843c8b694131f36795af76ef4beae0"


def code_without_strings(source: str) -> str:
    """Python source's code with every string constant emptied: what could run, whatever text it quotes."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.unparse(tree)
