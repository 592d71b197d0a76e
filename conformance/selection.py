"""Which cases a command runs: the generated suite, users' case files, --only and --shard.

Used by `run` and `cases`. User files are read in full and validated, and ids given to
--only are checked, before any case is drawn, so bad input stops a command before it writes.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import math
from pathlib import Path
from typing import Callable, Iterator

from conformance.cases.generate import build_case, check_key, generated_keys
from conformance.cases.ids import CaseKey, build_id, parse_id
from conformance.cases.shard import Shard, parse_shard
from conformance.cases.userfile import load_case_file
from conformance.errors import CaseFileError, UsageError
from conformance.model import Case, Spec
from conformance.runner import BYTES_PER_ELEMENT, DEFAULT_MEMORY_BUDGET_MB


def select_cases(spec: Spec, args: argparse.Namespace) -> Iterator[Case]:
    """Generated and user cases, filtered by --only and --shard; user files are validated before anything runs."""
    return (make() for _, make in select_lazily(spec, args))


def select_lazily(spec: Spec, args: argparse.Namespace) -> Iterator[tuple[str, Callable[[], Case]]]:
    """`select_cases` as (case id, a function that makes the case): a generated case's values are drawn only
    when it is made, so the selection can be checked and counted at the cost of its ids."""
    shard = selected_shard(args)
    selected = _selected(spec, args)
    return selected if shard is None else ((case_id, make) for case_id, make in selected if shard.holds(case_id))


def selected_shard(args: argparse.Namespace) -> Shard | None:
    if args.shard is None:
        return None
    try:
        return parse_shard(args.shard)
    except ValueError as exc:
        raise UsageError(str(exc), where="--shard", fix="write --shard K/N, e.g. --shard 1/4 ... --shard 4/4") from None


def _selected(spec: Spec, args: argparse.Namespace) -> Iterator[tuple[str, Callable[[], Case]]]:
    """Each selected case's id, and how to make the case (a generated case's values are drawn only then)."""
    user = _user_cases(args.cases)
    exact = [p for p in args.only if not any(ch in p for ch in "*?[")]
    if args.only and exact == args.only and args.suite != "none":
        # exact generated ids: rebuild them directly, whichever suite they came from
        seen_user = {c.id for c in user}
        for case_id in exact:
            if case_id in seen_user:
                continue
            key = _generated_key(case_id, args)
            yield case_id, functools.partial(build_case, key, args.seed)
        yield from ((c.id, functools.partial(_given, c)) for c in user if c.id in exact)
        return
    generated = () if args.suite == "none" else (
        (case_id, "generated", functools.partial(build_case, key, args.seed))
        for case_id, key in generated_keys(spec, exhaustive=args.suite == "exhaustive", samples=args.samples))
    user_ids = {c.id: c.source for c in user}
    for case_id, source, make in _chain(generated, ((c.id, c.source, functools.partial(_given, c)) for c in user)):
        if source == "generated" and case_id in user_ids:
            raise CaseFileError("this id is also a generated case's id: two cases would share it", file=user_ids[case_id],
                                where=f"case {case_id!r}", fix="rename the case, or run your file alone with --suite none")
        if not args.only or any(fnmatch.fnmatchcase(case_id, p) for p in args.only):
            yield case_id, make


def _given(case: Case) -> Case:
    return case


def _user_cases(paths: list[str]) -> list[Case]:
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


def _generated_key(case_id: str, args: argparse.Namespace) -> CaseKey:
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
    elements = math.prod(key.input_shape) + math.prod(key.target_shape)
    budget_mb = getattr(args, "memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB)
    need_mb = elements * BYTES_PER_ELEMENT / 2**20
    if need_mb > budget_mb:
        raise UsageError(f"case {case_id!r} needs about {need_mb:,.0f} MB, over the memory budget of "
                         f"{budget_mb:,.0f} MB", where="--only", fix="choose smaller shapes, or raise --memory-budget-mb")
    return key


def _chain(*iterables):
    for it in iterables:
        yield from it


def file_digest(path: str) -> str:
    """A digest of a case file's bytes: --resume refuses a run whose case files changed."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
