"""The one exception hierarchy for bad input: spec, case files, usage, results.

Each error names the file, the place in it, the problem and the fix, so the CLI
can print one line and exit 2. Framework exceptions are never raised through
here: adapters return them as data.
"""

from __future__ import annotations

import errno
import os
from typing import Sequence


class ConformanceError(Exception):
    """Bad input from the user; printed as `file: where: problem. Fix: fix`."""

    def __init__(self, problem: str, *, file: str | None = None, where: str | None = None, fix: str | None = None):
        self.file = file
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        parts = [p for p in (self.file, self.where) if p]
        text = ": ".join(parts + [self.problem])
        return f"{text}. Fix: {self.fix}" if self.fix else text


class SpecError(ConformanceError):
    """The spec file is unreadable, malformed or violates its schema."""


class CaseFileError(ConformanceError):
    """A user case file is unreadable or one of its cases is invalid."""


class UsageError(ConformanceError):
    """The command line or an adapter name is wrong."""


class ResultsError(ConformanceError):
    """A results directory is unreadable or incompatible."""


class KnownFileError(ConformanceError):
    """A known-findings file (--known) is unreadable or one of its entries is invalid."""


class HarnessBug(Exception):
    """An internal invariant of the harness broke (never bad user input): it fails the run loudly,
    with a traceback, rather than let a verdict rest on it. Example: a non-finite error bound at a
    finite expected value, which would accept any answer."""


def unusable_path(exc: BaseException, words: Sequence[str] = (), where: str | None = None) -> UsageError | None:
    """A path the user gave that the file system cannot follow (a name too long, a loop of links) as the one line
    of bad input it is, the option named where `words` (the command line) holds it; None for any other error.
    Python raises these from wherever the path is first touched, so each surface converts them once, at its
    edge."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
        path, problem = exc.filename, exc.strerror or str(exc)
    elif isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):  # Path.resolve's
        path, problem = str(exc).removeprefix("Symlink loop from ").strip("'"), "a loop of symbolic links"
    else:
        return None
    path = "" if path is None else str(path)
    words = [part for word in words for part in (word.split("=", 1) if word.startswith("--") else [word])]
    where = where or next((option for option, value in zip(words, words[1:]) if option.startswith("-") and value
                  for given in (value, os.path.abspath(value))
                  if path == given or path.startswith(given.rstrip("/") + "/")), None)
    shown = path if len(path) <= 80 else path[:40] + "..." + path[-20:]
    return UsageError(problem.lower() if problem[:1].isupper() and problem[1:2].islower() else problem,
                      file=shown or None, where=where, fix="give a path the file system can open: shorter names, "
                      "no loop of symbolic links")
