"""Which cases a command runs: the generated suite, users' case files, --only and --shard.

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
from typing import Callable, Iterator

import numpy as np

from conformance.cases.generate import DEFAULT_SEED, build_case, check_key, generated_keys
from conformance.cases.ids import CaseKey, build_id, parse_id
from conformance.cases.shard import Shard, parse_shard
from conformance.cases.userfile import load_case_file
from conformance.core.errors import CaseFileError, UsageError
from conformance.core.model import Case, Spec

DEFAULT_MEMORY_BUDGET_MB = 8192.0
# Peak bytes per element of a case (its input, target and broadcast result), in the two processes that hold
# it at once. The harness judging it: the reference's float64 and extended-precision temporaries, the
# expectation of every part, the observations, and the alternative expectations an explanation or a profile
# reads (tests/faults/test_inputs.py measures the peak and holds it under this).
JUDGE_BYTES_PER_ELEMENT = 640
# The worker: the case's float64 arrays and the framework's tensors, results and gradients.
FRAMEWORK_BYTES_PER_ELEMENT = 128
BYTES_PER_ELEMENT = JUDGE_BYTES_PER_ELEMENT + FRAMEWORK_BYTES_PER_ELEMENT


@dataclass(frozen=True)
class CaseSelection:
    """Which cases a command runs, as its options (--seed, --suite, --samples, --cases, --only, --shard and
    --memory-budget-mb) state them."""

    seed: int = DEFAULT_SEED
    suite: str = "default"  # default, exhaustive or none (user case files only)
    samples: int = 1
    case_files: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # case ids or glob patterns; empty selects every case
    shard: str | None = None  # "K/N"
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB


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
    user = _user_cases(selection.case_files)
    only = tuple(dict.fromkeys(selection.only))  # `--only ID --only ID` runs the case once
    exact = [p for p in only if not any(ch in p for ch in "*?[")]
    if only and len(exact) == len(only) and selection.suite != "none":
        # exact generated ids: rebuild them directly, whichever suite they came from
        seen_user = {c.id for c in user}
        for case_id in exact:
            if case_id in seen_user:
                continue
            key = _generated_key(case_id, selection.memory_budget_mb)
            yield case_id, functools.partial(build_case, key, selection.seed)
        yield from ((c.id, functools.partial(_given, c)) for c in user if c.id in exact)
        return
    generated = () if selection.suite == "none" else (
        (case_id, "generated", functools.partial(build_case, key, selection.seed))
        for case_id, key in generated_keys(spec, exhaustive=selection.suite == "exhaustive",
                                           samples=selection.samples))
    user_ids = {c.id: c.source for c in user}
    for case_id, source, make in _chain(generated, ((c.id, c.source, functools.partial(_given, c)) for c in user)):
        if source == "generated" and case_id in user_ids:
            raise CaseFileError("this id is also a generated case's id: two cases would share it", file=user_ids[case_id],
                                where=f"case {case_id!r}", fix="rename the case, or run your file alone with --suite none")
        if not only or any(fnmatch.fnmatchcase(case_id, p) for p in only):
            yield case_id, make


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


def _generated_key(case_id: str, budget_mb: float) -> CaseKey:
    """The key of a generated id given to --only, checked before any value is drawn."""
    fix = "copy the id from a report or `kl-conformance cases`"
    try:
        key = parse_id(case_id)
        check_key(key)
    except ValueError as exc:
        raise UsageError(str(exc), where="--only", fix=fix) from None
    if build_id(key) != case_id:
        raise UsageError(f"{case_id!r} is written another way than the generator writes it", where="--only",
                         fix=f"use {build_id(key)!r}")
    need_mb = shapes_need_mb(key.input_shape, key.target_shape)
    if need_mb > budget_mb:
        raise UsageError(f"case {case_id!r} needs about {need_mb:,.0f} MB, over the memory budget of "
                         f"{budget_mb:,.0f} MB", where="--only", fix="choose smaller shapes, or raise --memory-budget-mb")
    return key


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
