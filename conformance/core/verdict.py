"""The verdicts, and what each means to the rest of the harness, stated once in one table (`MEANINGS`).

A judged row carries one `Verdict`. Whether it is a divergence, whether a call was judged, checked in its mode
or came back, whether a profile or a known-findings entry may accept it, its test outcome, a defect title's
words and report.md's gloss are read from here by the judge, the gates, the baseline, the tallies, every
report, repro and the pytest plugin, never restated as sets of verdicts in their own files. Adding a verdict is
a member and its row here, and the code that gives it (docs/layout.md: Add a verdict). Imports nothing from
the project.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(str, enum.Enum):
    """How an observation compares with the spec; values are written to results files, and reports list the
    verdicts in this order."""

    PASS = "pass"
    VALUE = "value"
    NONFINITE = "nonfinite"
    SHAPE = "shape"
    DTYPE = "dtype"
    ERROR = "error"
    UNSUPPORTED = "unsupported"
    CRASH = "crash"
    TIMEOUT = "timeout"
    # a compiled or graph mode's call that ran eagerly instead (Dynamo's recompile limit, a graph break, a jit
    # that traced nothing): the mode was not checked, so no profile documents it and no gate accepts it
    FALLBACK = "fallback"

    @property
    def meaning(self) -> Meaning:
        return MEANINGS[self]

    @property
    def is_divergence(self) -> bool:
        """The call did not do what the spec says."""
        return MEANINGS[self].divergence

    @property
    def is_judged(self) -> bool:
        """A call was made and judged: what the reports count as judged (every verdict but unsupported)."""
        return MEANINGS[self].judged

    @property
    def is_checked(self) -> bool:
        """The call was made as asked, in its mode, and checked against the spec: a baseline compares it, and
        a row that stops being checked is lost coverage."""
        return MEANINGS[self].checked

    @property
    def is_answered(self) -> bool:
        """The call came back, with a value or an exception: a reproducer can make it again. A crash or a hang
        is the run's own record, and turning an answer into one is lost coverage."""
        return MEANINGS[self].answered

    @property
    def is_finding(self) -> bool:
        """A divergence of a checked call: what a profile deviation or a known-findings entry may accept, and
        what --strict, --fail-on-new and --fail-on-own count. A divergence that is no finding (fallback) is
        accepted by nothing: the gates call its run incomplete instead."""
        return MEANINGS[self].divergence and MEANINGS[self].checked

    @property
    def outcome(self) -> str:
        """The test outcome of a row no profile or known entry accepts (junit.xml, the pytest plugin), one of
        OUTCOMES: a pass passes, what judges nothing is skipped, a divergence whose call never came back is an
        error (the test could not finish), and any other divergence fails."""
        meaning = MEANINGS[self]
        if not meaning.judged:
            return "skipped"
        if not meaning.divergence:
            return "passed"
        return "failed" if meaning.answered else "error"

    @property
    def words(self) -> str:
        """What the framework does, as a defect's title says it after the API's name."""
        return MEANINGS[self].words

    @property
    def gloss(self) -> str:
        """What report.md's legend says after the verdict's name, or "" where the name says it."""
        return MEANINGS[self].gloss


OUTCOMES = ("passed", "skipped", "failed", "error")  # a test's outcomes, as junit.xml and pytest know them


@dataclass(frozen=True)
class Meaning:
    """What one verdict means; the properties of `Verdict` read it, and derive the rest."""

    divergence: bool
    judged: bool
    checked: bool
    answered: bool
    words: str  # what the framework does, as a defect's title says it
    gloss: str = ""  # what report.md's legend says after the name, where the name does not say it


_GLOSS_ERROR = ("raised where a value was expected, returned a value where an error was expected, or a different "
                "exception type")
_GLOSS_FALLBACK = "a compiled mode's call ran eagerly instead: the mode was not checked, and no gate accepts it"

MEANINGS: dict[Verdict, Meaning] = {
    #                                 divergence judged checked answered
    Verdict.PASS:        Meaning(False, True, True, True, "does what the spec says"),
    Verdict.VALUE:       Meaning(True, True, True, True, "values outside the spec's rounding bound",
                                 "outside the bound"),
    Verdict.NONFINITE:   Meaning(True, True, True, True, "NaN or inf where the spec has none, or the reverse",
                                 "NaN/inf pattern"),
    Verdict.SHAPE:       Meaning(True, True, True, True, "another shape than the spec's"),
    Verdict.DTYPE:       Meaning(True, True, True, True, "another dtype than the spec's"),
    Verdict.ERROR:       Meaning(True, True, True, True, "raises where the spec expects a value", _GLOSS_ERROR),
    # the API cannot express the case: no call was made, so nothing was judged
    Verdict.UNSUPPORTED: Meaning(False, False, False, False, "not offered", "the API cannot express the case"),
    # the worker process died, or did not answer in time: the run's own record, not a call to make again
    Verdict.CRASH:       Meaning(True, True, True, False, "crashes the process"),
    Verdict.TIMEOUT:     Meaning(True, True, True, False, "does not return"),
    # the call came back, but not from the mode asked for: nothing of the mode was checked
    Verdict.FALLBACK:    Meaning(True, True, False, True, "ran eagerly instead of compiled", _GLOSS_FALLBACK),
}
