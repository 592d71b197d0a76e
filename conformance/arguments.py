"""The checked command-line arguments as the layers below take them: the case selection, the cache directory,
the gates asked for, and the inputs that --force must never remove. Shared by `run`, `report` and `selftest`."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path
from typing import Sequence

from conformance.core.errors import ResultsError, UsageError
from conformance.core.model import Spec
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import other_spec
from conformance.core.known import KnownFindings, load_known
from conformance.judge.refcache import default_cache_dir
from conformance.report.baselinefile import REBASELINE, check_baseline_draw, is_baseline_file, load_baseline
from conformance.report.gate import Gates
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, CaseSelection


def case_selection(args: argparse.Namespace) -> CaseSelection:
    """The selection options of `run`, `cases` and `selftest` as a CaseSelection."""
    return CaseSelection(seed=args.seed, suite=args.suite, samples=args.samples, case_files=tuple(args.cases),
                         only=tuple(args.only), shard=args.shard,
                         memory_budget_mb=getattr(args, "memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB),
                         reduction=tuple(args.reduction), log_target=tuple(args.log_target), dtype=tuple(args.dtype),
                         family=tuple(args.family))


def no_case_matches() -> UsageError:
    """What `run` and `selftest` say when their selection options leave no case."""
    return UsageError("no case matches the selection",
                      where="--only / --cases / --suite / --shard / --reduction / --log-target / --dtype / --family",
                      fix="check the ids with `kl-conformance cases` and the same options")


def cache_dir_of(args: argparse.Namespace) -> Path | None:
    """The reference cache's directory (also where a framework keeps its compiled kernels); None with --no-cache."""
    return None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def check_gate_options(spec: Spec, args: argparse.Namespace, seed: int | None = None) -> KnownFindings | None:
    """--baseline, --fail-on-new and --known, checked before anything is written; returns the known findings."""
    if args.fail_on_new and args.baseline is None:
        raise UsageError("--fail-on-new needs --baseline DIR|FILE", where="--fail-on-new",
                         fix="pass the accepted run's directory, or the file `run --write-baseline` wrote, "
                             "with --baseline")
    check_write_baseline(args)
    if args.baseline is not None:
        baseline = Path(args.baseline)
        if baseline.resolve() == Path(args.out).resolve():
            raise UsageError("the baseline is the output directory, which this command rewrites",
                             file=args.baseline, where="--baseline",
                             fix="copy the accepted run elsewhere and pass that copy with --baseline")
        if seed is not None:
            check_baseline_draw(load_baseline(baseline), spec.hash, seed)
    return load_known(args.known) if args.known else None


def check_write_baseline(args: argparse.Namespace) -> None:
    """--write-baseline FILE, checked before anything is written: a file outside the output directory (which
    --force empties), not a directory."""
    target = getattr(args, "write_baseline", None)
    if target is None:
        return
    if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode) and not os.path.isdir(target):
        raise UsageError("not a regular file (a link, a device or a FIFO), which writing it would replace",
                         file=target, where="--write-baseline", fix="name a regular file, e.g. baseline/torch.jsonl.gz")
    path, out = resolved_or_none(target), resolved_or_none(args.out)
    if path is None:
        raise UsageError("a path through a link that loops", file=target, where="--write-baseline",
                         fix="name a regular file, e.g. baseline/torch.jsonl.gz")
    if out is not None and (path == out or out in path.parents):
        raise UsageError("the baseline file would be inside the output directory, which this command rewrites",
                         file=target, where="--write-baseline",
                         fix="write it outside --out, where you commit it (e.g. baseline/torch.jsonl.gz)")
    if path.is_dir():
        raise UsageError("a directory, not a file", file=target, where="--write-baseline",
                         fix="name the file to write, e.g. baseline/torch.jsonl.gz")
    for option, given in inputs_of(args, *(("a run to merge", run) for run in getattr(args, "runs", ()))):
        read = resolved_or_none(given)  # one that cannot be (a loop) is refused in its own line by the check that reads it
        if read is None or option == "--baseline" and read == path:
            continue  # a baseline refreshed in place: written only where the gates pass (runcommand)
        if read == path or read in path.parents:
            raise UsageError(f"the baseline file would replace what this command reads ({option} {given})",
                             file=target, where="--write-baseline",
                             fix="write it to a file of its own, e.g. baseline/torch.jsonl.gz")
    if path.is_file() and path.stat().st_size and not is_baseline_file(path):
        raise UsageError("a file that is not a baseline, which writing one would replace", file=target,
                         where="--write-baseline", fix="name a new file, or one --write-baseline wrote before")
    folder = next(parent for parent in path.parents if parent.exists())  # the folders below it are made
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot be written: {folder} is not a folder this user may write in", file=target,
                         where="--write-baseline", fix="name a file in a writable folder")
    longest = os.pathconf(folder, "PC_NAME_MAX")
    if any(len(os.fsencode(part)) > longest for part in path.relative_to(folder).parts):
        raise UsageError(f"cannot be written: a name longer than {longest} bytes, which the file system refuses",
                         file=target, where="--write-baseline", fix="name a file with shorter names")


def resolved_or_none(path: str | Path) -> Path | None:
    """`path` made absolute through its links; None where they loop."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return None


def check_baseline_cases(baseline: Path, spec: Spec, selection: CaseSelection) -> None:
    """Each selected case the baseline holds must hold the same values there (its case digest), checked before
    any case runs (after `check_baseline_draw`): otherwise a verdict would be compared with one on other inputs
    under the same id."""
    from conformance.cases.digest import case_digest
    from conformance.run.selection import select_lazily

    held = load_baseline(baseline)
    theirs = held.digests
    for case_id, make in select_lazily(spec, selection):
        if case_id in theirs:
            mine = case_digest(make())
            if mine != theirs[case_id]:
                raise ResultsError(f"the baseline holds other values for this case (case digest {theirs[case_id]} "
                                   f"against {mine}): another --seed or another version of its case file",
                                   file=held.shown, where=f"case {case_id!r}",
                                   fix="take a baseline made with the same seed and case files, or " + REBASELINE)


def gates_of(args: argparse.Namespace) -> Gates:
    return Gates(strict=args.strict, fail_on_new=args.fail_on_new, known=args.known is not None,
                 fail_on_own=getattr(args, "fail_on_own", False))


def read_runs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The run directories a command reads beside its own (what each is, its path): its --out must lie outside
    each, where a later command reading that run would read what this one wrote."""
    found = [("the baseline run", args.baseline)] if args.baseline and os.path.isdir(args.baseline) else []
    like_run = getattr(args, "like_run", None)
    return found + ([("the run --like-run reads", like_run)] if like_run else [])


def inputs_of(args: argparse.Namespace, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """The command's input files and directories, as (option, path): --force must not remove one."""
    given = [("--cases", path) for path in getattr(args, "cases", [])] + list(more)
    given += [("--known", args.known), ("--baseline", args.baseline), ("--spec", args.spec),
              ("--profiles", getattr(args, "profiles", None)), ("--like-run", getattr(args, "like_run", None))]
    return tuple((option, path) for option, path in given if path)


def like_marks(spec: Spec, args: argparse.Namespace, runs: Sequence[str] = (), mirrors: dict | None = None,
               manifests: Sequence[dict] = ()):
    """--like and --like-run, checked before anything is written: the report's marks of a port's findings
    (report/like.py), or None without --like. `runs`: the directories `report` merges, each port run of which
    must have been judged with the same --like (and so the `manifests` of runs held in memory, the API's);
    `mirrors`: the port adapter's mirrored APIs (`run`)."""
    from conformance.adapters.registry import known_adapters
    from conformance.core.rundirs import load_manifests
    from conformance.judge.profiles import profile_source
    from conformance.report.like import LikeMarks, mirrors_of

    like, like_run = getattr(args, "like", None), getattr(args, "like_run", None)
    for flag, asked in (("--fail-on-own", getattr(args, "fail_on_own", False)),
                        ("--draft-shared", getattr(args, "draft_shared", False))):
        if asked and like_run is None:
            raise UsageError(f"{flag} needs --like FRAMEWORK --like-run DIR", where=flag,
                             fix="pass the framework the port is judged like and a recorded run of it")
    if like is None:
        if like_run is not None:
            raise UsageError("--like-run needs --like FRAMEWORK", where="--like-run",
                             fix="name the framework the recorded run is of with --like")
        return None
    if mirrors and set(mirrors) == {like}:  # its rows are never marked: with no port beside it, all would pass
        raise UsageError(f"{like!r} is the framework this run judges: --like names the framework a port is "
                         "judged like", where="--like", fix=f"compare a build of {like} with a recorded run of it as "
                         "a baseline (--baseline), or leave out --like")
    profiles = Path(args.profiles) if getattr(args, "profiles", None) else None
    frameworks = f"one of {sorted(known_adapters())}, or a framework with a profile"
    known = like in known_adapters() or profile_source(like, profiles) is not None \
        or profile_source(like, None) is not None
    # `report` checks instead that each port run was judged like it (by a profile its run's --profiles held)
    if not runs and not manifests and not known:
        raise UsageError(f"unknown framework {like!r}", where="--like", fix=f"use {frameworks}")
    if like_run is not None:
        if not (Path(like_run) / RESULTS_FILE).is_file():
            raise UsageError("no results.jsonl in the recorded run", file=like_run, where="--like-run",
                             fix=f"pass the --out directory of a `kl-conformance run --framework {like}`")
        if Path(like_run).resolve() == Path(args.out).resolve():
            raise UsageError("the recorded run is the output directory, which this command rewrites", file=like_run,
                             where="--like-run", fix="copy it elsewhere and pass that copy with --like-run")
        for row in iter_results(like_run):  # one spec for all rows (iter_rows refuses a mix)
            if row.spec_hash != spec.hash:
                raise other_spec(row.spec_hash, spec.hash, like_run, "--like-run", REBASELINE)
            break
        ran = {row.framework for row in iter_results(like_run)}
        if like not in ran:
            raise UsageError(f"a run of {sorted(ran) or 'no framework'}, not of {like!r}", file=like_run,
                             where="--like-run", fix=f"pass a run of {like} (`kl-conformance run --framework {like}`)")
    if runs or manifests:
        mirrors = {}
        ports = 0  # runs of another framework than `like`
        given = [(None, list(manifests))] if manifests else []  # runs held in memory have no directory
        for run, held in given + [(run, load_manifests([run], getattr(args, "allow_missing", False))[1])
                                  for run in runs]:
            for manifest in held:
                adapter = (manifest.get("selection") or {}).get("adapter") or manifest.get("framework")
                judged = manifest.get("like")
                ports += adapter != like
                if manifest.get("status") != "not_run" and adapter != like and judged != like:
                    # a name no adapter or profile here has: the fix does not send the user to run it
                    again = f"--like {like}" if known else f"--like FRAMEWORK ({frameworks})"
                    raise ResultsError(f"a run of {adapter!r} judged " + (f"like {judged!r}" if judged else
                                                                         "without --like") + f", not like {like!r}",
                                       file=None if run is None else str(run), where="--like",
                                       fix=f"run the port again with {again}, or report it without --like")
            mirrors.update(mirrors_of(held))
        if not ports:
            raise UsageError(f"every run here is of {like!r} itself: --like judges a port's rows like another "
                             "framework's", where="--like", fix=f"compare a build of {like} with a recorded run "
                             "of it as a baseline (--baseline), or leave out --like")
    return LikeMarks(like, like_run, mirrors)
