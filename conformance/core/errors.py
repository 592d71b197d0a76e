"""The one exception hierarchy for bad input: spec, case files, usage, results.

Each error names the file, the place in it, the problem and the fix, so the CLI
can print one line and exit 2. Framework exceptions are never raised through
here: adapters return them as data.
"""

from __future__ import annotations


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
