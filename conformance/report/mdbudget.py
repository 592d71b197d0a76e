"""report.md's budget: an issue body holds REPORT_LIMIT characters, so each part of report.md has the most it may
fill (PART_BUDGETS), and a part past its budget is cut with a line that counts what was left out and says where it
is (divergences.md, LINK).

Measures and cuts lines of text only; never decides what a part says.
"""

from __future__ import annotations

from typing import Sequence

from conformance.core.rundirs import DIVERGENCES_FILE

REPORT_LIMIT = 65_536  # characters an issue body holds: report.md stays below
BUDGET = REPORT_LIMIT - 1_536  # what the parts may fill together; the rest is slack for the lines that say "more"
# the most characters each part but the divergences may take; the divergences' sections get what is left
PART_BUDGETS = {"defects": 16_000, "provenance": 8_000, "summary": 12_000, "families": 12_000, "known": 4_000,
                "warnings": 4_000, "baseline": 6_000, "releases": 10_000}
LISTED_CELL = 600  # characters of a row's text in one cell of divergences.md
LINK = f"[{DIVERGENCES_FILE}]({DIVERGENCES_FILE})"


def size_of(lines: Sequence[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def fit(lines: list[str], budget: int, what: str, where: str = f"see {LINK}") -> list[str]:
    """`lines` up to `budget` characters; when cut, a last line says how many `what` were left out, and `where`
    they are."""
    total = 0
    for i, line in enumerate(lines):
        total += len(line) + 1
        if total > budget - 200:
            left = [line for line in lines[i:] if line.startswith("|")]
            return lines[:i] + ["", f"And {len(left) or len(lines) - i} more {what if left else 'lines'}, "
                                    f"left out to keep this report short: {where}.", ""]
    return lines
