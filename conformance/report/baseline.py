"""Compares results with an earlier run: what is new, fixed, changed or lost, and what was not checked.

For a maintainer validating a port or an upgrade. Keys are (case_id, framework, api, device, mode, part), no
release: a baseline of another release compares the same calls; case ids are API, so a baseline stays comparable
across harness versions with the same spec. A result the baseline judged that is now unsupported, crashed where it
used to answer, ran eagerly where a compiled mode was asked (fallback), or is missing although the run selected
it, is lost coverage: `--fail-on-new` fails on it as on a new divergence. A baseline row outside the run's
selection (another part, API, device, mode, shard or subset of ids) was not checked, and is counted as such.

A baseline is a run's directory, or the compact file `--write-baseline` writes from one: gzip'd JSON lines holding
only what the comparison and its checks read (each row's key, verdict and cause; each case's digest; the spec,
the seeds and the releases), in a fixed order and with no time in its header, so the same rows give the same
bytes. Reads rows only.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from conformance.core.errors import ResultsError, UsageError
from conformance.core.model import PARTS, Result, Verdict, key_label
from conformance.core.results import (CASE_DIGEST, MAX_LINE_BYTES, MODE_NAME, RESULTS_FILE, is_present, iter_results,
                                      write_bytes_atomic)
from conformance.core.rundirs import other_spec
from conformance.core.scope import Scope
from conformance.core.text import terminal_line

Key = tuple[str, str, str, str, str, str]  # Result.key: (case_id, framework, api, device, mode, part)
_NO_ANSWER = (Verdict.CRASH.value, Verdict.TIMEOUT.value, Verdict.FALLBACK.value)
BASELINE_FORMAT = "kl-conformance baseline"  # the compact file's first line names it, with its version
BASELINE_VERSION = 1
REBASELINE = ("re-baseline: run the accepted build again with this harness "
              "(kl-conformance run ... --write-baseline FILE, or --force --out DIR)")
_VERDICTS = frozenset(v.value for v in Verdict)


def _key(r: Result) -> Key:
    return r.key


def _state(r: Result) -> tuple[str, str]:
    return (r.verdict.value, r.cause if r.verdict.is_divergence else "")


def _judged(state: tuple[str, str]) -> bool:
    """The row checked its call: not unsupported, and not a mode's call that ran eagerly instead (fallback)."""
    return state[0] not in (Verdict.UNSUPPORTED.value, Verdict.FALLBACK.value)


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
    return kind in ("new", "changed") and Verdict(now[0]).is_divergence and not accepted \
        and now[0] != Verdict.FALLBACK.value


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
        old = self._before.pop(_key(r), None)
        now = _state(r)
        diverges = r.verdict.is_divergence
        item = (_key(r), old, now, r.is_accepted)
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
        if _judged(old) and (not _judged(now) or (now[0] in _NO_ANSWER and old[0] not in _NO_ANSWER)):
            diff.lost.append(item)
            return "lost"
        was_divergence = Verdict(old[0]).is_divergence
        if diverges and not was_divergence:
            diff.new.append(item)
            return "new"
        if now[0] == Verdict.PASS.value and was_divergence:
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
                if _judged(old):
                    self.diff.lost.append((key, old, None, False))
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


def compare(rows: Iterable[Result], baseline: str | Path, scope: Scope | None = None) -> BaselineDiff:
    """Classify every current row against the baseline (see BaselineComparison); without a `scope`, every
    baseline row not seen counts as not checked."""
    comparison = BaselineComparison(baseline)
    for r in rows:
        comparison.add(r)
    return comparison.finish(scope or Scope())


def render_baseline_markdown(diff: BaselineDiff, listed: int = 200) -> list[str]:
    from conformance.report.markdown import cell, code  # the same escaping as the rest of report.md

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
            fmt = lambda s: cell(s[0]) + (f" ({code(s[1])})" if s and s[1] else "") if s else "-"
            tag = " (documented or known)" if accepted and now and Verdict(now[0]).is_divergence else ""
            out.append(f"| {code(key[0])} | {cell(key_label(key))} | {fmt(old)} | {fmt(now)}{tag} |")
        if len(items) > listed:
            out.append(f"\n{len(items) - listed} more in baseline.json.")
        out.append("")
    return out


def one_release(row: Result, first_release: dict[str, str], file: str, where: str, fix: str) -> None:
    """A baseline compares a call with the same call of another release: each side may hold one release of a
    framework (two would make one key two rows). Raises ResultsError at a framework's second release."""
    first = first_release.setdefault(row.framework, row.framework_version)
    if row.framework_version != first:
        raise ResultsError(f"these results hold two releases of {row.framework} ({first} and "
                           f"{row.framework_version}): a baseline compares one call with the same call of one "
                           "release", file=file, where=where, fix=fix)


@dataclass(frozen=True)
class BaselineRow:
    """What the gates compare of one baseline row: its verdict, and its cause where it is a divergence."""

    verdict: Verdict
    cause: str


@dataclass
class Baseline:
    """What a baseline holds for the comparison and its checks, read from a run's directory or a compact file.

    `shown` is the file a message names; `states` maps each row key to (verdict, cause), `digests` each case id
    to its case digest, `seeds` are those generated rows were drawn with, `releases` the one release per
    framework."""

    shown: str
    spec_hashes: set[str] = field(default_factory=set)
    seeds: set[int] = field(default_factory=set)
    releases: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    states: dict[Key, tuple[str, str]] = field(default_factory=dict)

    def rows(self) -> dict[Key, BaselineRow]:
        return {key: BaselineRow(Verdict(verdict), cause) for key, (verdict, cause) in self.states.items()}


def load_baseline(path: str | Path, where: str = "--baseline") -> Baseline:
    """The baseline at `path`: a run's (or merge's) directory, or a file `--write-baseline` wrote.

    Raises
    ------
    UsageError
        where there is no such directory or file, or the directory holds no results.jsonl.
    ResultsError
        for a damaged or foreign file, rows of two releases of one framework, or one case with two digests.
    """
    given = Path(path)
    if is_present(given, directory=True):
        if not is_present(given / RESULTS_FILE):
            raise UsageError("no results.jsonl in the baseline directory", file=str(path), where=where,
                             fix="pass the --out directory of an earlier run, or the file its --write-baseline wrote")
        return _from_rows(iter_results(given), str(given / RESULTS_FILE), where)
    if not is_present(given):
        raise UsageError("no such baseline directory or file", file=str(path), where=where,
                         fix="pass the --out directory of an earlier run, or the file its --write-baseline wrote")
    return _from_file(given, where)


def baseline_rows(path: str | Path, spec_hash: str, seed: int, where: str = "--baseline") -> dict[Key, BaselineRow]:
    """The baseline's rows by key (`verdict`, `cause`), checked to be of this spec and drawn with this seed:
    what the pytest plugin compares each item with."""
    held = load_baseline(path, where)
    check_baseline_draw(held, spec_hash, seed, where)
    return held.rows()


def check_baseline_draw(baseline: "Baseline | str | Path", spec_hash: str, seed: int,
                        where: str = "--baseline") -> None:
    """A baseline of another spec or another --seed would compare other cases under the same ids."""
    held = baseline if isinstance(baseline, Baseline) else load_baseline(baseline, where)
    for found in sorted(held.spec_hashes):
        if found != spec_hash:
            raise other_spec(found, spec_hash, held.shown, where, REBASELINE)
    for drawn in sorted(held.seeds):
        if drawn != seed:
            raise ResultsError(f"the baseline drew its cases with --seed {drawn}, this run with --seed {seed}",
                               file=held.shown, where=where,
                               fix=f"run with --seed {drawn}, or take a baseline made with --seed {seed}")


def write_baseline(run_dir: str | Path, path: str | Path) -> Baseline:
    """Write the compact baseline of the rows in `run_dir` to `path` (its folders made as needed).

    Raises
    ------
    ResultsError
        where the rows hold two specs (no baseline can be of both).
    """
    held = load_baseline(run_dir)
    if len(held.spec_hashes) > 1:
        raise ResultsError(f"these results were made with {len(held.spec_hashes)} specs "
                           f"{sorted(held.spec_hashes)}", file=held.shown, where="--write-baseline",
                           fix="write the baseline of runs made with one spec")
    by_case: dict[str, list] = {}
    for key, (verdict, cause) in held.states.items():
        by_case.setdefault(key[0], []).append([*key[1:], verdict, cause])
    header = {"format": BASELINE_FORMAT, "format_version": BASELINE_VERSION,
              "spec_hash": next(iter(held.spec_hashes), None), "seeds": sorted(held.seeds),
              "releases": dict(sorted(held.releases.items()))}
    lines = [_line(header)] + [_line({"case": case_id, "digest": held.digests[case_id], "rows": sorted(rows)})
                               for case_id, rows in sorted(by_case.items())]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # mtime 0 and no file name in the gzip header: the same rows give the same bytes
    write_bytes_atomic(Path(path), gzip.compress("".join(lines).encode("utf-8"), compresslevel=9, mtime=0))
    return held


def baseline_written(held: Baseline, path: str | Path) -> str:
    """The line a command prints once it wrote a baseline file."""
    return (f"Baseline: {terminal_line(str(path))} ({len(held.states)} results of {len(held.digests)} cases, "
            f"{Path(path).stat().st_size} bytes)")


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def _from_rows(rows: Iterable[Result], shown: str, where: str) -> Baseline:
    held = Baseline(shown)
    for r in rows:
        one_release(r, held.releases, shown, where, "give as the baseline a run (or merge) of one release per "
                    "framework")
        digest = held.digests.setdefault(r.case_id, r.case_digest)
        if digest != r.case_digest:
            raise ResultsError(f"the baseline holds two case digests for this case ({digest} and {r.case_digest})",
                               file=shown, where=f"case {r.case_id!r}", fix="pass a run (or merge) of one --seed "
                               "and one version of its case files: " + REBASELINE)
        held.states[_key(r)] = _state(r)
        held.spec_hashes.add(r.spec_hash)
        if r.source == "generated" and r.seed is not None:
            held.seeds.add(r.seed)
    return held


def _from_file(path: Path, where: str) -> Baseline:
    """A compact baseline file; anything else (another format or version, a damaged file) is refused naming
    the file and the line."""
    held = Baseline(str(path))
    number = 0

    def refuse(problem: str) -> ResultsError:
        return ResultsError(problem, file=str(path), where=f"{where}, line {number}" if number else where,
                            fix=REBASELINE)
    try:
        with gzip.open(path, "rb") as f:
            while line := f.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(line) > MAX_LINE_BYTES:
                    raise refuse("a line longer than any baseline file holds")
                document = json.loads(line)
                if not isinstance(document, dict):
                    raise refuse(f"a line must be a JSON object, got {type(document).__name__}")
                problem = _header_problem(document, held) if number == 1 else _case_problem(document, held)
                if problem:
                    raise refuse(problem)
    except (OSError, EOFError, zlib.error, ValueError, RecursionError) as exc:  # gzip.BadGzipFile is an OSError
        raise refuse(f"not a baseline file {BASELINE_FORMAT!r} ({type(exc).__name__}: {exc})") from None
    if number == 0:
        raise refuse("an empty file, not a baseline")
    return held


def _header_problem(header: dict[str, Any], held: Baseline) -> str | None:
    if header.get("format") != BASELINE_FORMAT:
        return f"not a baseline file: its first line names no format {BASELINE_FORMAT!r}"
    if header.get("format_version") != BASELINE_VERSION:
        return (f"a baseline file of format version {header.get('format_version')!r}; this harness reads version "
                f"{BASELINE_VERSION}")
    spec_hash, seeds, releases = header.get("spec_hash"), header.get("seeds"), header.get("releases")
    if not (spec_hash is None or type(spec_hash) is str) or type(seeds) is not list or \
            not all(type(s) is int and s >= 0 for s in seeds) or type(releases) is not dict or \
            not all(type(k) is str and type(v) is str for k, v in releases.items()):
        return "a header whose spec_hash, seeds or releases have another type than a baseline file holds"
    held.spec_hashes.update([spec_hash] if spec_hash else [])
    held.seeds.update(seeds)
    held.releases.update(releases)
    return None


def _case_problem(document: dict[str, Any], held: Baseline) -> str | None:
    case_id, digest, rows = document.get("case"), document.get("digest"), document.get("rows")
    if type(case_id) is not str or not case_id.strip() or type(digest) is not str or \
            not CASE_DIGEST.fullmatch(digest) or type(rows) is not list:
        return "a case line needs a case id, its digest (24 hex digits) and its rows"
    if case_id in held.digests:
        return f"case {case_id!r} appears twice"
    held.digests[case_id] = digest
    for row in rows:
        if type(row) is not list or len(row) != 7 or not all(type(v) is str for v in row):
            return f"case {case_id!r}: a row must be [framework, api, device, mode, part, verdict, cause]"
        framework, api, device, mode, part, verdict, cause = row
        if part not in PARTS or not MODE_NAME.fullmatch(mode) or verdict not in _VERDICTS:
            return f"case {case_id!r}: a row with an unknown part, mode or verdict ({part!r}, {mode!r}, {verdict!r})"
        key = (case_id, framework, api, device, mode, part)
        if key in held.states:
            return f"case {case_id!r}: the row {key_label(key)} appears twice"
        held.states[key] = (verdict, cause)
    return None
