"""A known-findings file (`--known FILE`): the divergences a user has accepted, for now.

Like array-api-tests' xfails file, and unlike spec/profiles: a profile documents how a
framework departs from the spec, stated as spec choices and checked against the
reference; a known-findings file is a maintainer's list of findings they know about and
accept while a fix is pending, matched by case-id glob, framework, API, device, mode, part,
verdict and cause, each with a reason and a link. An entry without `mode:` speaks about eager calls only, as a
profile deviation does: a compiled mode is another implementation, and an entry written for eager must not
accept a compiled mode's different bug; `mode: "*"` speaks about every mode. No entry accepts a `fallback` row
(a mode's call that ran eagerly was not checked). A divergence an entry matches carries the entry's
id in `known_by`, shows as "known" in the reports, and does not fail `--strict` or
`--fail-on-new`. An entry that concerns results of the run (its selectors match them)
but matches none of their divergences is stale: the finding is gone or changed, and the
run or report fails, so the list cannot hide a regression once it has rotted. That is judged
only when the run selected the whole suite the entry speaks about (no --only, --shard, --part,
--api, --device, --mode or other --seed cut into it, as run.json records; runs merged that together made every
shard, part and target of one draw count as whole: core/scope.py); after a narrower run the entry is "not
exercised here": said, never a failure. An entry pinned to a mode no run made concerns no row
here: it is "not in these results", never stale.

Example::

    - id: torch-log-target-neg-inf            # unique in the file; rows carry it in known_by
      case_id: "fwd/*/log_target=1/*/onehot/*" # glob over case ids (required)
      framework: torch                         # optional: exact adapter name
      api: "torch.nn.*"                        # optional: glob over API names
      device: cpu                              # optional: glob over devices
      mode: inductor                           # optional: glob over modes; without it, eager only
      part: forward                            # optional: forward, grad_input, grad_target, grad2_input
      verdict: nonfinite                       # optional: the divergence verdict accepted
      cause: pointwise.conventions.log_target_neg_inf  # optional: glob over the spec path named as cause
      defect: torch-552dc1d03e                 # optional: the defect id (summary.json); case_id then defaults to "*"
      reason: NaN at a log-space target of -inf; fix pending upstream
      link: https://github.com/pytorch/pytorch/issues/0

Reads the user's file and marks the rows it matches; never changes a verdict.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.core.defects import DEFECT_ID
from conformance.core.errors import KnownFileError
from conformance.core.model import EAGER, PARTS, Result, Verdict
from conformance.core.scope import Scope
from conformance.core.yamlload import parse_yaml, read_text

FIELDS = ("id", "case_id", "framework", "api", "device", "mode", "part", "verdict", "cause", "defect", "reason",
          "link")
REQUIRED = ("id", "reason")  # and case_id, unless the entry names a defect
DIVERGENCES = tuple(v.value for v in Verdict if v.is_finding)  # the verdicts an entry may name


@dataclass(frozen=True)
class KnownEntry:
    """One accepted finding; a selector left out (None) matches anything."""

    number: int  # its place in the file, counted from 1 as a user counts the list's items
    id: str
    case_id: str
    reason: str
    framework: str | None = None
    api: str | None = None
    device: str | None = None
    mode: str = EAGER  # a glob over modes; eager only unless the entry says otherwise
    part: str | None = None
    verdict: str | None = None
    cause: str | None = None
    defect: str | None = None
    link: str | None = None

    def concerns(self, row: Result) -> bool:
        """The row is one this entry speaks about, whatever its verdict."""
        return (fnmatch.fnmatchcase(row.case_id, self.case_id)
                and (self.framework is None or row.framework == self.framework)
                and (self.api is None or fnmatch.fnmatchcase(row.api, self.api))
                and (self.device is None or fnmatch.fnmatchcase(row.device, self.device))
                and fnmatch.fnmatchcase(row.mode, self.mode)
                and (self.part is None or row.part == self.part))

    def accepts(self, row: Result) -> bool:
        """The row is a divergence this entry accepts."""
        return (row.verdict.is_finding
                and (self.verdict is None or row.verdict.value == self.verdict)
                and (self.cause is None or fnmatch.fnmatchcase(row.cause, self.cause))
                and (self.defect is None or row.defect == self.defect) and self.concerns(row))


@dataclass
class EntryAudit:
    """How one entry fared over a set of rows."""

    entry: KnownEntry
    concerned: int = 0
    accepted: int = 0
    frameworks: set = dataclasses.field(default_factory=set)  # of the rows it concerns
    narrowed_by: tuple[str, ...] = ()  # the options by which the runs selected less than the entry speaks about

    @property
    def status(self) -> str:
        """`matched`, `stale` (concerns rows of a whole run, accepts none), `not exercised here` (the same after
        a narrower run) or `not in these results`."""
        if self.accepted:
            return "matched"
        if not self.concerned:
            return "not in these results"
        return "not exercised here" if self.narrowed_by else "stale"


class KnownFindings:
    """The validated entries of one known-findings file."""

    def __init__(self, entries: list[KnownEntry], source: str, digest: str) -> None:
        self.entries = entries
        self.source = source
        self.digest = digest  # of the file's bytes: --resume refuses another file
        self._audit = [EntryAudit(e) for e in entries]

    def mark(self, row: Result) -> Result:
        """The row with `known_by` set to the ids of the entries that accept it (replacing any earlier)."""
        known_by = tuple(e.id for e in self.entries if e.accepts(row)) if row.verdict.is_divergence else ()
        return row if known_by == row.known_by else dataclasses.replace(row, known_by=known_by)

    def start_audit(self) -> None:
        """Begin a pass over the rows (audit_row each): forget what an earlier pass counted."""
        self._audit = [EntryAudit(e) for e in self.entries]

    def audit_row(self, row: Result) -> None:
        """Count, per entry, whether it concerns the row and whether it accepts it."""
        for audit in self._audit:
            if audit.entry.concerns(row):
                audit.concerned += 1
                audit.accepted += audit.entry.accepts(row)
                audit.frameworks.add(row.framework)

    def judge_scope(self, scope: Scope) -> None:
        """Say, per entry, how the runs read (their selections) cut into what it speaks about; call it after the
        pass over the rows. Without it every run counts as whole (a run.json without a selection record)."""
        for a in self._audit:
            e = a.entry
            a.narrowed_by = tuple(sorted({option for framework in a.frameworks
                                          for option in scope.narrowing(framework, e.part, e.api, e.device,
                                                                        e.mode)}))

    def audit(self) -> list[EntryAudit]:
        """Per entry, what the last pass over the rows counted."""
        return list(self._audit)

    def stale(self) -> list[EntryAudit]:
        return [a for a in self._audit if a.status == "stale"]

    def not_exercised(self) -> list[EntryAudit]:
        return [a for a in self._audit if a.status == "not exercised here"]

    def not_exercised_message(self, audit: EntryAudit) -> str:
        e = audit.entry
        return (f"{self.source}: entry {e.number} (id {e.id!r}): not exercised here: matches none of the "
                f"{audit.concerned} results it concerns, but the run selected only part of its suite "
                f"({', '.join(audit.narrowed_by)}); an entry that matches nothing fails only after a run of the "
                "whole suite")

    def stale_message(self, audit: EntryAudit) -> str:
        e = audit.entry
        return str(KnownFileError(
            f"stale: matches none of the {audit.concerned} results it concerns (no divergence"
            + (f" with verdict {e.verdict!r}" if e.verdict else "") + " left there)",
            file=self.source, where=f"entry {e.number} (id {e.id!r})",
            fix="remove the entry if the finding is fixed, or correct its selectors if the finding changed"))


def load_known(path: str | Path) -> KnownFindings:
    """Read and validate a known-findings file.

    Raises
    ------
    KnownFileError
        naming the file, the entry (counted from 1) and the field, with the fix.
    """
    shown = str(path)
    text = read_text(path, shown, KnownFileError, fix="give --known the path of a readable YAML file")
    data = parse_yaml(text, shown, KnownFileError)
    if not isinstance(data, list):
        raise KnownFileError(f"expected a YAML list of entries, got {type(data).__name__}", file=shown,
                             fix="write the file as a list: '- id: my-finding' followed by its fields, or [] for none")
    entries: list[KnownEntry] = []
    seen: set[str] = set()
    for number, item in enumerate(data, start=1):
        entry = _parse_entry(item, number, shown)
        if entry.id in seen:
            raise KnownFileError(f"duplicate id {entry.id!r}", file=shown, where=f"entry {number}, field 'id'",
                                 fix="give every entry a unique id")
        seen.add(entry.id)
        entries.append(entry)
    return KnownFindings(entries, shown, hashlib.sha256(text.encode("utf-8")).hexdigest()[:16])


def _parse_entry(item: Any, number: int, shown: str) -> KnownEntry:
    def fail(field: str | None, problem: str, fix: str) -> KnownFileError:
        return KnownFileError(problem, file=shown, where=f"entry {number}" + (f", field {field!r}" if field else ""),
                              fix=fix)

    if not isinstance(item, dict):
        raise fail(None, f"expected a mapping, got {type(item).__name__}",
                   "each list item needs fields such as 'id:', 'case_id:' and 'reason:'")
    unknown = sorted(set(map(str, item)) - set(FIELDS))
    if unknown:
        raise fail(unknown[0], f"unknown field {unknown[0]!r}", f"use only the fields {list(FIELDS)}")
    for name in REQUIRED:
        if name not in item:
            raise fail(name, f"missing field {name!r}", f"add '{name}:' to the entry")
    if "case_id" not in item and "defect" not in item:
        raise fail("case_id", "missing field 'case_id'", "add 'case_id:' (a glob over case ids) or 'defect:' to the entry")
    for name in FIELDS:
        value = item.get(name)
        if name in item and (not isinstance(value, str) or not value.strip()):
            raise fail(name, f"must be a non-empty string, got {value!r}", f"write e.g. '{name}: ...' (quote globs)")
    if item.get("part") is not None and item["part"] not in PARTS:
        raise fail("part", f"unknown part {item['part']!r}", f"use one of {list(PARTS)}")
    if item.get("verdict") == Verdict.FALLBACK.value:
        raise fail("verdict", "no entry accepts 'fallback': a mode's call that ran eagerly was not checked",
                   "make the mode compile (raise its recompile limit, remove the graph break), or run without it")
    if item.get("verdict") is not None and item["verdict"] not in DIVERGENCES:
        raise fail("verdict", f"{item['verdict']!r} is not a divergence verdict", f"use one of {list(DIVERGENCES)}")
    if item.get("defect") is not None and not DEFECT_ID.fullmatch(item["defect"]):
        raise fail("defect", f"{item['defect']!r} is not a defect id", "copy an id from summary.json's defects "
                   "(\"<framework>-<10 hex digits>\")")
    return KnownEntry(number=number, **{"case_id": "*", **{name: item.get(name) for name in FIELDS if name in item}})
