"""Which cases a command runs: the generated suite, users' case files, --only, --shard, and the selection by
meaning (--reduction, --log-target, --dtype, --family).

Used by `run` and `cases`. User files are read in full and validated, and ids given to
--only are checked, before any case is drawn, so bad input stops a command before it writes.

Chooses and builds cases only; never computes an expectation or calls a framework.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from conformance.cases.families import FAMILIES
from conformance.cases.generate import DEFAULT_SEED, build_case, check_key, generated_keys
from conformance.cases.ids import CaseKey, build_id, parse_id
from conformance.cases.shard import Shard, parse_shard
from conformance.cases.userfile import load_case_file
from conformance.core.case import Case, DtypePair, Params
from conformance.core.errors import CaseFileError, UsageError
from conformance.core.model import Spec

DEFAULT_MEMORY_BUDGET_MB = 8192.0
# Peak bytes per element of a case (its input, target and broadcast result), in the two processes that hold
# it at once. The harness judging it: the reference's float64 and extended-precision temporaries, the
# expectation of every part, the observations, and the alternative expectations an explanation or a profile
# reads (tests/faults/test_inputs.py measures the peak and holds it under this).
JUDGE_BYTES_PER_ELEMENT = 768
# The worker: the case's float64 arrays and the framework's tensors, results and gradients.
FRAMEWORK_BYTES_PER_ELEMENT = 128
BYTES_PER_ELEMENT = JUDGE_BYTES_PER_ELEMENT + FRAMEWORK_BYTES_PER_ELEMENT


@dataclass(frozen=True)
class CaseSelection:
    """Which cases a command runs, as its options (--seed, --suite, --samples, --cases, --only, --shard,
    --memory-budget-mb, --reduction, --log-target, --dtype and --family) state them. The last four select by
    what a case means, not by its id: each is a set of accepted values (empty accepts all), and a case must
    match every set given and, with --only, a pattern too."""

    seed: int = DEFAULT_SEED
    suite: str = "default"  # default, exhaustive, modes (what a compiled mode runs), mode-slice (its slice) or none
    samples: int = 1
    case_files: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # case ids or glob patterns; empty selects every case
    shard: str | None = None  # "K/N"
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB
    reduction: tuple[str, ...] = ()  # the reduction a call performs: a legacy pair counts as what it maps to
    log_target: tuple[str, ...] = ()  # 0 or 1 (true and false are read as 1 and 0)
    dtype: tuple[str, ...] = ()  # a dtype of input or target, or an exact pair INPUT:TARGET
    family: tuple[str, ...] = ()  # the value family the case is drawn from ("user" for a case file's cases)


MEANING_OPTIONS = {"reduction": "--reduction", "log_target": "--log-target", "dtype": "--dtype", "family": "--family"}
_TRUTH = {"0": False, "1": True, "false": False, "true": True}


def meaning_values(spec: Spec) -> dict[str, tuple[str, ...]]:
    """The values each selection by meaning accepts: the spec's reductions and dtypes, the families a case
    can come from."""
    return {"reduction": spec.reductions, "log_target": ("0", "1"),
            "dtype": tuple(dict.fromkeys(spec.floating_dtypes + spec.rejected_dtypes)),
            "family": (*sorted(FAMILIES), "integers", "pinned", "certain", "user")}


def check_meaning(spec: Spec, selection: CaseSelection) -> None:
    """Refuse a value no case can have, naming the option, the value and the values there are."""
    values = meaning_values(spec)
    for name, option in MEANING_OPTIONS.items():
        for given in getattr(selection, name):
            if name == "log_target":
                ok = given.lower() in _TRUTH
            elif name == "dtype":
                ok = all(part in values["dtype"] for part in given.split(":", 1))
            else:
                ok = given in values[name]
            if not ok:
                shown = ", ".join(values[name]) + (", or INPUT:TARGET" if name == "dtype" else "")
                raise UsageError(f"unknown value {given!r}", where=option, fix=f"use one of {shown}")


def matches_meaning(spec: Spec, selection: CaseSelection, params: Params, dtype: DtypePair, family: str) -> bool:
    """Whether a case of these parameters, dtypes and family is in the selection by meaning. Its reduction is
    the one the call performs: a legacy size_average/reduce pair decides it (spec: signature.legacy)."""
    if selection.reduction:
        reduction = params.reduction
        if params.has_legacy:
            try:
                reduction = spec.legacy_reduction(params.size_average, params.reduce)
            except KeyError:  # a pair the spec does not map: it reduces no named way
                return False
        if reduction not in selection.reduction:
            return False
    if selection.log_target and params.log_target not in {_TRUTH[v.lower()] for v in selection.log_target}:
        return False
    if selection.dtype and not any(v == str(dtype) if ":" in v else v in (dtype.input, dtype.target)
                                   for v in selection.dtype):
        return False
    return not selection.family or family in selection.family


def select_cases(spec: Spec, selection: CaseSelection) -> Iterator[Case]:
    """Generated and user cases, filtered by --only and --shard; user files are validated before anything runs."""
    return (make() for _, make in select_lazily(spec, selection))


def select_lazily(spec: Spec, selection: CaseSelection) -> Iterator[tuple[str, Callable[[], Case]]]:
    """`select_cases` as (case id, a function that makes the case): a generated case's values are drawn only
    when it is made, so the selection can be checked and counted at the cost of its ids."""
    shard = selected_shard(selection)
    selected = _selected(spec, selection)
    return selected if shard is None else ((case_id, make) for case_id, make in selected if shard.holds(case_id))


def selected_shard(selection: CaseSelection) -> Shard | None:
    if selection.shard is None:
        return None
    try:
        return parse_shard(selection.shard)
    except ValueError as exc:
        raise UsageError(str(exc), where="--shard", fix="write --shard K/N, e.g. --shard 1/4 ... --shard 4/4") from None


def _selected(spec: Spec, selection: CaseSelection) -> Iterator[tuple[str, Callable[[], Case]]]:
    """Each selected case's id, and how to make the case (a generated case's values are drawn only then)."""
    check_meaning(spec, selection)
    every_user = _user_cases(selection.case_files)  # all of them name ids that generated cases must not take
    user_ids = {c.id: c.source for c in every_user}
    user = [c for c in every_user if matches_meaning(spec, selection, c.params, c.dtype, c.family)]
    only = tuple(dict.fromkeys(selection.only))  # `--only ID --only ID` runs the case once
    exact = [p for p in only if not any(ch in p for ch in "*?[")]
    if only and len(exact) == len(only) and selection.suite != "none":
        # exact generated ids: rebuild them directly, whichever suite they came from
        for case_id in exact:
            if case_id in user_ids:
                if _is_generated_id(case_id):  # the user's case would stand in for the generated one
                    raise _shared_id(case_id, user_ids[case_id])
                continue
            key = _generated_key(case_id, selection.memory_budget_mb, spec)
            if not matches_meaning(spec, selection, key.params, key.dtype, key.family):
                continue
            yield case_id, functools.partial(build_case, key, selection.seed)
        yield from ((c.id, functools.partial(_given, c)) for c in user if c.id in exact)
        return
    generated = () if selection.suite == "none" else (
        (case_id, "generated", functools.partial(build_case, key, selection.seed))
        for case_id, key in generated_keys(spec, suite=selection.suite,
                                           samples=selection.samples)
        if matches_meaning(spec, selection, key.params, key.dtype, key.family))
    for case_id, source, make in _chain(generated, ((c.id, c.source, functools.partial(_given, c)) for c in user)):
        if source == "generated" and case_id in user_ids:
            raise _shared_id(case_id, user_ids[case_id])
        if not only or any(fnmatch.fnmatchcase(case_id, p) for p in only):
            yield case_id, make


def _shared_id(case_id: str, source: str) -> CaseFileError:
    return CaseFileError("this id is also a generated case's id: two cases would share it", file=source,
                         where=f"case {case_id!r}", fix="rename the case, or run your file alone with --suite none")


def _is_generated_id(case_id: str) -> bool:
    """An id the generator writes (whichever suite draws it): --only rebuilds such an id directly."""
    try:
        return build_id(parse_id(case_id)) == case_id
    except ValueError:
        return False


def _given(case: Case) -> Case:
    return case


def _user_cases(paths: tuple[str, ...]) -> list[Case]:
    """Every case of every file; one id in two files (or one file given twice) is refused."""
    cases, origin = [], {}
    for path in paths:
        for case in load_case_file(path):
            if case.id in origin:
                raise CaseFileError(f"duplicate id {case.id!r}: {origin[case.id]} has it too", file=path,
                                    where=f"case {case.id!r}", fix="give every case a unique id, and pass each file once")
            origin[case.id] = path
            cases.append(case)
    return cases


def _generated_key(case_id: str, budget_mb: float, spec: Spec | None = None) -> CaseKey:
    """The key of a generated id given to --only, checked before any value is drawn."""
    fix = "copy the id from a report or `kl-conformance cases`"
    try:
        key = parse_id(case_id)
        check_key(key, spec)
    except ValueError as exc:
        raise UsageError(str(exc), where="--only", fix=fix) from None
    if build_id(key) != case_id:
        raise UsageError(f"{case_id!r} is written another way than the generator writes it", where="--only",
                         fix=f"use {build_id(key)!r}")
    need_mb = shapes_need_mb(key.input_shape, key.target_shape)
    if need_mb > budget_mb:
        raise UsageError(f"case {case_id!r} {over_budget(need_mb, budget_mb)}", where="--only",
                         fix="choose smaller shapes, or raise --memory-budget-mb")
    return key


def over_budget(need_mb: float, budget_mb: float) -> str:
    """A case over the memory budget, in the words of every refusal: what it needs against the budget."""
    return f"needs about {_megabytes(need_mb)} MB, over the memory budget of {_megabytes(budget_mb)} MB"


def _megabytes(mb: float) -> str:
    return f"{mb:,.0f}" if mb >= 10 else f"{mb:.2g}"  # a budget below 10 MB (a test's) shows its digits


def needs_mb(case: Case) -> float:
    """The memory a case is estimated to need, in MB (BYTES_PER_ELEMENT of each element)."""
    return element_count(case) * BYTES_PER_ELEMENT / 2**20


def shapes_need_mb(input_shape: tuple[int, ...], target_shape: tuple[int, ...]) -> float:
    """needs_mb of a case of these shapes, known before its values are drawn (a generated id's)."""
    return shape_element_count(tuple(input_shape), tuple(target_shape)) * BYTES_PER_ELEMENT / 2**20


def element_count(case: Case) -> int:
    """The elements of a case's input, target and broadcast result (0 for shapes that do not broadcast)."""
    return shape_element_count(case.input.shape, case.target.shape)


def shape_element_count(input_shape: tuple[int, ...], target_shape: tuple[int, ...]) -> int:
    """element_count from the shapes alone, in Python integers (no overflow however large the shapes)."""
    try:
        out = math.prod(np.broadcast_shapes(input_shape, target_shape))
    except ValueError:
        out = 0
    return math.prod(input_shape) + math.prod(target_shape) + out


def _chain(*iterables):
    for it in iterables:
        yield from it


def file_digest(path: str) -> str:
    """A digest of a case file's bytes: --resume refuses a run whose case files changed."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def check_modes(framework: str, modes: Sequence[str], mode_names: Sequence[str]) -> None:
    """Refuse a mode the framework's adapter does not declare (`--mode` on every surface: run, repro, the plugin,
    the self-test), listing the ones it does."""
    for name in modes:
        if name not in mode_names:
            raise UsageError(f"unknown mode {name!r} for framework {framework!r}", where="--mode",
                             fix=f"use one of {list(mode_names)} (`kl-conformance modes --framework {framework}`)")
