"""The matrices of report.md and divergences.md: the summary (verdict counts per target) and the case families
(passes per reduction, log_target and value family, per target), by every target or, where that is too wide for
its part's budget, by framework / API / device or by framework alone.

Reads what a Tally gathered; never a row file, a framework or the reference.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from conformance.core.model import EAGER, Verdict
from conformance.report.mdbudget import LINK, PART_BUDGETS, fit, size_of
from conformance.report.mdtext import cell as _cell
from conformance.report.tally import VERDICT_ORDER, Tally, join_framework, split_label

def fitted(render: Callable[[str], list[str]], part: str) -> list[str]:
    """A table by every target if it fits its part's budget, else by framework / API / device, else by framework."""
    budget = PART_BUDGETS[part]
    for level in ("target", "where", "framework"):
        lines = render(level)
        if size_of(lines) <= budget:
            return lines
    return fit(lines, budget, "rows")


def _level(label: str, level: str) -> str:
    """A target label at a coarser level: "where" drops the part, "framework" keeps the framework only."""
    if level == "target":
        return label
    pieces = split_label(label)
    if level == "framework":
        return join_framework(pieces)
    return " / ".join((join_framework(pieces), pieces["api"], pieces["device"],
                       *([] if pieces["mode"] == EAGER else [pieces["mode"]])))


_LEVEL_NOTE = {"target": "", "where": " Shown by framework / API / device here, all parts together (too many "
                                      f"targets to fit); by every target in {LINK}.",
               "framework": " Shown by framework here, all APIs, devices and parts together (too many targets "
                            f"to fit); by every target in {LINK}."}


def _by_level(tally: Tally, level: str) -> dict[str, tuple[Counter, int, int]]:
    """Verdict counts, undocumented and known divergences per target label at `level` (see `_level`)."""
    merged: dict[str, tuple[Counter, list[int]]] = {}
    for label, counts in tally.by_target.items():
        c, accepted = merged.setdefault(_level(label, level), (Counter(), [0, 0]))
        c.update(counts)
        accepted[0] += tally.undocumented[label]
        accepted[1] += tally.known[label]
    return {label: (c, new, known) for label, (c, (new, known)) in merged.items()}


def summary_matrix(tally: Tally, level: str = "target") -> list[str]:
    counts = _by_level(tally, level)
    present = [v for v in VERDICT_ORDER if any(c[v] for c, _, _ in counts.values())]
    heading = {"target": "framework / api / device", "where": "framework / api / device",
               "framework": "framework"}[level]
    out = ["## Summary", "",
           "Divergences the framework's profile documents (spec/profiles) are counted apart from new ones, and so "
           "are those a known-findings file (--known) accepts; `--strict` fails on the undocumented ones only."
           + _LEVEL_NOTE[level], "",
           f"| {heading} | results | undocumented | documented | known | " + " | ".join(present) + " |",
           "|---|---:|---:|---:|---:|" + "---:|" * len(present)]
    for target in sorted(counts):
        c, new, known = counts[target]
        divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
        out.append(f"| {_cell(target)} | {sum(c.values())} | {new} | {divergent - new - known} | {known} | "
                   + " | ".join(str(c[v]) for v in present) + " |")
    return out + [""]


def family_matrix(tally: Tally, level: str = "target") -> list[str]:
    """Rows: reduction x log_target x value family; columns: targets; cells: passes / judged (divergences)."""
    targets = sorted({_level(t, level) for t in tally.by_target})
    out = ["## Case families", "",
           "Each cell: passes / results judged, then divergences; `n/a` where the API cannot express the family "
           "(its dialect takes the other input space, so there is no row, or every case was unsupported)."
           + _LEVEL_NOTE[level], "",
           "| family | reduction | log_target | " + " | ".join(_cell(t) for t in targets) + " |",
           "|---|---|---|" + "---|" * len(targets)]
    for key in sorted(tally.by_family):
        cells: dict[str, Counter] = {}
        for target, counts in tally.by_family[key].items():
            cells.setdefault(_level(target, level), Counter()).update(counts)
        row = []
        for target in targets:
            c = cells.get(target, Counter())
            judged = sum(n for v, n in c.items() if Verdict(v).is_judged)
            divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
            if not judged:  # no row (the API's dialect cannot state the family's cases) or all unsupported
                row.append("n/a")
            else:
                row.append(f"{c['pass']}/{judged}" + (f" **{divergent} div**" if divergent else ""))
        out.append(f"| {_cell(key[0])} | {_cell(key[1])} | {_cell(key[2])} | " + " | ".join(row) + " |")
    return out + [""]
