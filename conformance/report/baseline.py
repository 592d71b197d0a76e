"""Compares results with an earlier run: what is new, fixed, changed or lost, and what was not checked.

For a maintainer validating a port or an upgrade. Keys are (case_id, framework, api, device, mode, part), no
release: a baseline of another release compares the same calls; case ids are API, so a baseline stays comparable
across harness versions with the same spec. A result the baseline judged that is now unsupported, crashed where it
used to answer, ran eagerly where a compiled mode was asked (fallback), or is missing although the run selected
it, is lost coverage: `--fail-on-new` fails on it as on a new divergence. A baseline row outside the run's
selection (another part, API, device, mode, shard or subset of ids) was not checked, and is counted as such.
A baseline is a run's directory or its compact file (report/baselinefile.py). Reads rows only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from conformance.core.errors import ResultsError
from conformance.core.model import Result, Verdict, key_label
from conformance.core.scope import Scope
from conformance.report.baselinefile import BaselineRow, Key, check_baseline_draw, load_baseline, row_state
from conformance.report.mdtext import cell, code, code_cell  # the same escaping as the rest of report.md


def _checked(state: tuple[str, str]) -> bool:
    """The row checked its call: not unsupported, and not a mode's call that ran eagerly instead (fallback)."""
    return Verdict(state[0]).is_checked


def _answered(state: tuple[str, str]) -> bool:
    """The row's call came back with a value or an exception: no crash, no hang."""
    return Verdict(state[0]).is_answered


@dataclass
class BaselineDiff:
    """The differences, each a list of (key, before, after, accepted) with states (verdict, cause), after None for
    a row the run selected but did not write; `accepted` says the current row is documented by a profile or
    accepted by a known-findings file."""

    baseline: str
    new: list = field(default_factory=list)
    fixed: list = field(default_factory=list)
    changed: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    added: int = 0
    removed: int = 0  # baseline rows the run selected but did not write
    not_checked: int = 0  # baseline rows outside the run's selection
    unchanged: int = 0
    devices_not_found: set = field(default_factory=set)  # the devices of lost rows that no run here found

    @property
    def failing(self) -> list:
        """What --fail-on-new fails on: new or changed divergences that no profile documents and no known-findings
        entry accepts, and lost coverage (a crash where it used to answer fails unless it is accepted)."""
        return [item for item in self.new + self.changed if is_failing("new", item)] + \
            [item for item in self.lost if is_failing("lost", item)]

    def to_json(self) -> str:
        def rows(items):
            return [{"case_id": k[0], "framework": k[1], "api": k[2], "device": k[3], "mode": k[4], "part": k[5],
                     "before": list(b) if b else None, "after": list(a) if a else None, "accepted": accepted}
                    for k, b, a, accepted in items]
        return json.dumps({"baseline": self.baseline, "new": rows(self.new), "fixed": rows(self.fixed),
                           "changed": rows(self.changed), "lost": rows(self.lost), "failing": rows(self.failing),
                           "added": self.added, "removed": self.removed, "not_checked": self.not_checked,
                           "unchanged": self.unchanged}, indent=2) + "\n"


def is_failing(kind: str, item: tuple) -> bool:
    """Whether one classified item fails --fail-on-new."""
    _, _, now, accepted = item
    if kind == "lost":
        return not (accepted and now is not None and Verdict(now[0]).is_divergence)
    # a fallback the baseline did not answer is no finding: the gates' incompleteness line fails on it (exit 3)
    return kind in ("new", "changed") and Verdict(now[0]).is_finding and not accepted


class BaselineComparison:
    """Classifies rows against the baseline (a run's directory or its compact file) as they come (`add`), so the report's one
    pass over the rows also decides junit.xml's view of each; `finish` adds the baseline rows not seen.

    A row made with another spec or other case values is remembered and refused at `finish` (a run feeding
    its rows must not stop halfway through on it)."""

    def __init__(self, baseline: str | Path) -> None:
        self.diff = BaselineDiff(str(baseline))
        held = load_baseline(baseline)
        self._before: dict[Key, tuple[str, str]] = dict(held.states)
        self._digests = held.digests
        self._spec_hashes = held.spec_hashes
        self._seen_cases: set[tuple[str, str]] = set()  # (framework, case id) the run wrote rows for
        self._problem: ResultsError | None = None

    def add(self, r: Result) -> str:
        """Classify one row: `new`, `fixed`, `changed`, `lost`, `unchanged` or `added`."""
        if self._problem is None:
            self._problem = self._mismatch(r)
        self._seen_cases.add((r.framework, r.case_id))
        old = self._before.pop(r.key, None)
        now = row_state(r)
        diverges = r.verdict.is_divergence
        item = (r.key, old, now, r.is_accepted)
        diff = self.diff
        if old is None:
            diff.added += 1
            kind = "new" if diverges else "added"
            if diverges:
                diff.new.append(item)
            return kind
        if old == now:
            diff.unchanged += 1
            return "unchanged"
        if _checked(old) and (not _checked(now) or (_answered(old) and not _answered(now))):
            diff.lost.append(item)
            return "lost"
        was_divergence = Verdict(old[0]).is_divergence
        if diverges and not was_divergence:
            diff.new.append(item)
            return "new"
        if not diverges and was_divergence:
            diff.fixed.append(item)
            return "fixed"
        diff.changed.append(item)
        return "changed"

    def finish(self, scope: Scope) -> BaselineDiff:
        """The diff, with each baseline row not seen: lost (when it was judged) or removed if the run selected it
        (its case, target and part), else not checked.

        Raises
        ------
        ResultsError
            when the baseline was made with another spec or other case values (its verdicts would not be comparable).
        """
        if self._problem is not None:
            raise self._problem
        for key, old in self._before.items():
            if (key[1], key[0]) in self._seen_cases and scope.selects(key[1], key[2], key[3], key[5], key[4]):
                self.diff.removed += 1
                if _checked(old):
                    self.diff.lost.append((key, old, None, False))
                    if not scope.found_device(key[1], key[3]):
                        self.diff.devices_not_found.add(key[3])
            else:
                self.diff.not_checked += 1
        self._before.clear()
        return self.diff

    def _mismatch(self, r: Result) -> ResultsError | None:
        where = str(self.diff.baseline)
        if self._spec_hashes and r.spec_hash not in self._spec_hashes:
            return ResultsError(f"the baseline was made with spec {sorted(self._spec_hashes)}, these results with "
                                f"{r.spec_hash}", file=where, where="--baseline",
                                fix="rerun the baseline with the current spec")
        if self._digests.get(r.case_id, r.case_digest) != r.case_digest:
            return ResultsError(f"the baseline holds other values for this case (case digest "
                                f"{self._digests[r.case_id]} against {r.case_digest}): another --seed or another "
                                f"version of its case file", file=where, where=f"case {r.case_id!r}",
                                fix="compare runs made with the same --seed and case files")
        return None


def render_baseline_markdown(diff: BaselineDiff, listed: int = 200) -> list[str]:

    out = ["## Against the baseline", "",
           f"Baseline {code(diff.baseline)}: {len(diff.new)} new divergences, {len(diff.fixed)} fixed, "
           f"{len(diff.changed)} changed, {len(diff.lost)} lost, {diff.unchanged} unchanged; {diff.added} results "
           f"added, {diff.removed} gone although selected, {diff.not_checked} not checked (outside this run's "
           f"selection). Lost: judged by the baseline, now unsupported, crashed where it answered, or not written. "
           f"{len(diff.failing)} of the new, changed and lost results are neither documented nor known (what "
           "`--fail-on-new` fails on). All of them are in `baseline.json`.", ""]
    for title, items in (("New", diff.new), ("Lost", diff.lost), ("Fixed", diff.fixed), ("Changed", diff.changed)):
        if not items:
            continue
        out += [f"### {title} ({len(items)})", "", "| case | framework / api / device / part | before | after |",
                "|---|---|---|---|"]
        for key, old, now, accepted in items[:listed]:
            fmt = lambda s: cell(s[0]) + (f" ({code_cell(s[1])})" if s and s[1] else "") if s else "-"
            tag = " (documented or known)" if accepted and now and Verdict(now[0]).is_divergence else ""
            out.append(f"| {code_cell(key[0])} | {cell(key_label(key))} | {fmt(old)} | {fmt(now)}{tag} |")
        if len(items) > listed:
            out.append(f"\n{len(items) - listed} more in baseline.json.")
        out.append("")
    return out


def baseline_rows(path: str | Path, spec_hash: str, seed: int, where: str = "--baseline") -> dict[Key, BaselineRow]:
    """The baseline's rows by key (`verdict`, `cause`), checked to be of this spec and drawn with this seed:
    what the pytest plugin compares each item with."""
    held = load_baseline(path, where)
    check_baseline_draw(held, spec_hash, seed, where)
    return held.rows()
