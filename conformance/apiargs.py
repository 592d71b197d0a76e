"""The Python API's arguments, checked as the CLI checks its options, and its errors in its own words: each
function of conformance/api.py refuses a value of the wrong kind in one line naming the argument, and a
ConformanceError from the layers below names the API's arguments, never the command line's options.

Reads no framework and writes nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from conformance.core.errors import ConformanceError, UsageError, unusable_path
from conformance.core.known import KnownFindings, load_known
from conformance.core.model import Spec
from conformance.core.specload import load_spec
from conformance.options import API, spelled
from conformance.run.outdir import RESUME_FIX

RUNS_FIX = "pass what conformance.api.run returned, or the directory a run wrote (its out, `kl-conformance run --out`)"


def in_api_words(function):
    """Raise a ConformanceError from the layers below naming the argument as this API calls it (`dtype`,
    `apis`), not as the command line does (`--dtype`, `--api`)."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ConformanceError as exc:
            exc.where, exc.problem, exc.fix = (spelled(text, API) if text else text
                                               for text in (exc.where, exc.problem, exc.fix))
            if exc.fix:  # the API continues no run: it has no --resume
                exc.fix = exc.fix.replace(RESUME_FIX, "")
            exc.args = (exc.render(),)
            raise
        except (OSError, RuntimeError) as exc:
            problem = unusable_path(exc)
            if problem is None:
                raise
            raise problem from None
    return checked


def given_spec(spec: Any) -> Spec:
    """The `spec` a function was given, or the shipped one; anything but a Spec is refused in one line."""
    if spec is None:
        return load_spec()  # the shipped spec
    if not isinstance(spec, Spec):
        raise UsageError(f"expected a Spec, got {type(spec).__name__} {spec!r}", where="spec",
                         fix="pass what conformance.api.load_spec(path) returns, or leave it out for the shipped spec")
    return spec


def known_findings(known: "str | Path | KnownFindings | None") -> KnownFindings | None:
    """A known-findings file (a path) read and checked, or KnownFindings as they are."""
    if known is None or isinstance(known, KnownFindings):
        return known
    path_or_none(known, "known")
    return load_known(known)


def path_or_none(path: Any, keyword: str) -> None:
    if path is not None and not isinstance(path, (str, Path)):
        raise UsageError(f"expected a path, got {type(path).__name__} {path!r}", where=keyword,
                         fix="pass a str or a pathlib.Path, or None")


def listed(runs: Any) -> list:
    try:
        return list(runs)
    except TypeError:
        raise UsageError(f"expected a run or a list of runs, got {type(runs).__name__}", where="runs",
                         fix=RUNS_FIX) from None


def flags(**given: Any) -> None:
    """Each switch is True or False: `force="no"` would otherwise read as True (and replace a run)."""
    for keyword, value in given.items():
        if type(value) is not bool:
            raise UsageError(f"expected True or False, got {value!r}", where=keyword,
                             fix=f"pass {keyword}=True or {keyword}=False")
