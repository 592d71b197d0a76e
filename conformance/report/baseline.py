"""Compares results with an earlier run: what is new, what is fixed, what changed.

For a maintainer validating a port or an upgrade. Keys are (case_id, framework, api,
device, part); case ids are API, so a baseline stays comparable across harness
versions with the same spec. Reads rows only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from conformance.core.errors import ResultsError
from conformance.core.model import Result, Verdict
from conformance.core.results import iter_results

Key = tuple[str, str, str, str, str]


def _key(r: Result) -> Key:
    return (r.case_id, r.framework, r.api, r.device, r.part)


def _state(r: Result) -> tuple[str, str]:
    return (r.verdict.value, r.cause if r.verdict.is_divergence else "")


@dataclass
class BaselineDiff:
    """The differences, each a list of (key, before, after, accepted) with states (verdict, cause);
    `accepted` says the current row is documented by a profile or accepted by a known-findings file."""

    baseline: str
    new: list = field(default_factory=list)
    fixed: list = field(default_factory=list)
    changed: list = field(default_factory=list)
    added: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def failing(self) -> list:
        """New or changed divergences that no profile documents and no known-findings entry accepts:
        what --fail-on-new fails on."""
        return [item for item in self.new + self.changed
                if Verdict(item[2][0]).is_divergence and not item[3]]

    def to_json(self) -> str:
        def rows(items):
            return [{"case_id": k[0], "framework": k[1], "api": k[2], "device": k[3], "part": k[4],
                     "before": list(b) if b else None, "after": list(a) if a else None, "accepted": accepted}
                    for k, b, a, accepted in items]
        return json.dumps({"baseline": self.baseline, "new": rows(self.new), "fixed": rows(self.fixed),
                           "changed": rows(self.changed), "failing": rows(self.failing), "added": self.added,
                           "removed": self.removed, "unchanged": self.unchanged}, indent=2) + "\n"


def compare(rows: Iterable[Result], baseline_dir: str | Path) -> BaselineDiff:
    """Classify every current row against the baseline run in `baseline_dir`.

    Raises
    ------
    ResultsError
        when the baseline was made with another spec (its verdicts would not be comparable).
    """
    before: dict[Key, tuple[str, str]] = {}
    digests: dict[str, str] = {}
    spec_hashes = set()
    for r in iter_results(baseline_dir):
        before[_key(r)] = _state(r)
        digests[r.case_id] = r.case_digest
        spec_hashes.add(r.spec_hash)
    diff = BaselineDiff(str(baseline_dir))
    for r in rows:
        if spec_hashes and r.spec_hash not in spec_hashes:
            raise ResultsError(f"the baseline was made with spec {sorted(spec_hashes)}, these results with "
                               f"{r.spec_hash}", file=str(baseline_dir), where="--baseline",
                               fix="rerun the baseline with the current spec")
        if digests.get(r.case_id, r.case_digest) != r.case_digest:
            raise ResultsError(f"the baseline holds other values for this case (case digest {digests[r.case_id]} "
                               f"against {r.case_digest}): another --seed or another version of its case file",
                               file=str(baseline_dir), where=f"case {r.case_id!r}",
                               fix="compare runs made with the same --seed and case files")
        old = before.pop(_key(r), None)
        now = _state(r)
        diverges = r.verdict.is_divergence
        item = (_key(r), old, now, r.is_accepted)
        if old is None:
            diff.added += 1
            if diverges:
                diff.new.append(item)
        elif old == now:
            diff.unchanged += 1
        elif diverges and old[1] == "":
            diff.new.append(item)
        elif not diverges and old[1] != "":
            diff.fixed.append(item)
        else:
            diff.changed.append(item)
    diff.removed = len(before)
    return diff


def render_baseline_markdown(diff: BaselineDiff, listed: int = 200) -> list[str]:
    out = ["## Against the baseline", "",
           f"Baseline `{diff.baseline}`: {len(diff.new)} new divergences, {len(diff.fixed)} fixed, "
           f"{len(diff.changed)} changed, {diff.unchanged} unchanged; {diff.added} results added, "
           f"{diff.removed} gone. {len(diff.failing)} of the new and changed divergences are neither documented "
           "nor known (what `--fail-on-new` fails on). All of them are in `baseline.json`.", ""]
    for title, items in (("New", diff.new), ("Fixed", diff.fixed), ("Changed", diff.changed)):
        if not items:
            continue
        out += [f"### {title} ({len(items)})", "", "| case | framework / api / device / part | before | after |",
                "|---|---|---|---|"]
        for key, old, now, accepted in items[:listed]:
            fmt = lambda s: f"{s[0]}" + (f" (`{s[1]}`)" if s and s[1] else "") if s else "-"
            tag = " (documented or known)" if accepted and Verdict(now[0]).is_divergence else ""
            out.append(f"| `{key[0]}` | {key[1]} / {key[2]} / {key[3]} / {key[4]} | {fmt(old)} | {fmt(now)}{tag} |")
        if len(items) > listed:
            out.append(f"\n{len(items) - listed} more in baseline.json.")
        out.append("")
    return out
