"""The exit code of `run` and `report`: which outcomes fail a CI job, and the line that says why.

- 0: finished. Divergences are findings, not failures, unless a gate below asks.
- 1: a gate failed: with --strict, a divergence that no profile documents and no known-findings
  entry accepts; with --fail-on-own, such a divergence that is a port's own (not shared with the recorded
  run of the framework it is judged like: --like-run), with or without --strict, which it narrows to those;
  with --fail-on-new, such a divergence that is new or changed since the baseline,
  or lost coverage (a result the baseline judged that is now unsupported, crashed where it answered,
  or missing although the run selected it); with --known, a stale entry (it accepts nothing any more,
  after a run of the whole suite it speaks about).
- 2: bad input; nothing was written (conformance/core/errors.py; not decided here).
- 3: a gate was asked for (--strict, --fail-on-new, --known or --fail-on-own) and not everything was judged:
  a framework could not be loaded (not_run), a run stopped before its end, a framework judged nothing (no results,
  or every result unsupported), a mode's call ran eagerly instead of compiled (a `fallback` row: the mode
  was not checked), a mode asked for could not run here (run.json's `modes_not_run`), an API the installed
  release lacks (run.json's `apis_not_run`; select the APIs it has with --api to gate on those), or a call the
  harness refused to make (over --memory-budget-mb: Result.refused). The gates fail
  closed: what was not checked never passes. A fallback row is not a finding --strict counts: it is what
  was not checked. Without a gate
  these print a line and exit 0, so a matrix with one missing framework still writes its merged report.
  Always 3, gate or not, when a run failed (no memory, a full disk): run.json says `failed` and why, and
  when a run is damaged (`damaged`): its rows disagree with what its run.json counts (results by verdict,
  cases with results), so a selected case or call without its rows is never passed as "not checked"; such a
  run is not gated.
- 130: interrupted (Ctrl-C); 143: terminated (SIGTERM). The rows written so far are kept, run.json says
  `interrupted`, and --resume continues.

junit.xml agrees with the gates (`junit_view`, `Decision.lines`): with a gate, a finding the gate accepts
is a skipped test with its reason and each failed gate is a failing test, so CI's dashboard is green
exactly when the exit code is 0. Reads counts and run manifests only; never a framework or the reference.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from conformance.core.known import KnownFindings
from conformance.core.model import Result, Verdict, key_label
from conformance.core.scope import missing_shards, row_framework
from conformance.core.text import terminal_line
from conformance.report.baseline import BaselineDiff
from conformance.report.defects import UNDOCUMENTED
from conformance.report.gaps import refused_gaps, refused_line
from conformance.report.runrecord import damaged, held_by_framework, names_rows, unrecorded
from conformance.report.reprocommand import Runs
from conformance.report.summary import short_summary
from conformance.report.tally import Tally, split_label

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
NAMED = 10  # targets and causes a failed gate names; the rest are counted
LISTED_IN_BASELINE_JSON = " (listed in baseline.json under 'failing')"  # said where a report writes baseline.json


@dataclass(frozen=True)
class Gates:
    """The gates a command was asked for."""

    strict: bool = False
    fail_on_new: bool = False
    known: bool = False
    fail_on_own: bool = False  # the strict gate on a port's own divergences only (--like-run marks them)

    @property
    def asked(self) -> bool:
        return self.strict or self.fail_on_new or self.known or self.fail_on_own

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(n for n, on in (("--strict", self.strict), ("--fail-on-new", self.fail_on_new),
                                     ("--known", self.known), ("--fail-on-own", self.fail_on_own)) if on)

    def fails_strictly(self, r: Result) -> bool:
        """Whether an undocumented divergence fails whatever its baseline: with --strict, and with --fail-on-own
        (which narrows --strict to them) where it is a port's own."""
        if self.fail_on_own:
            return r.like == "own"
        return self.strict

    @property
    def names(self) -> str:
        return ", ".join(self.flags)


@dataclass
class Decision:
    """The exit code, the lines that say why (each a failed gate), lines that inform without failing, and for a
    failed gate's line the lines that say what failed it (its targets and causes, with their counts)."""

    code: int = EXIT_OK
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    gates: tuple[str, ...] = ()
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # what each check counted: its line's figures
    names: dict[str, str] = field(default_factory=dict)  # a failed gate's line -> the gate that failed it

    def fail(self, line: str, name: str) -> None:
        """Add a failed gate's line, and the gate's name (junit.xml's test name for it)."""
        self.lines.append(line)
        self.names[line] = name

    @property
    def outcome(self) -> str:
        """`passed`, `failed` (a gate failed), `incomplete` (not everything was judged) or `not gated`."""
        if self.code == EXIT_GATE:
            return "failed"
        if self.code == EXIT_INCOMPLETE:
            return "incomplete"
        return "passed" if self.gates else "not gated"

    @property
    def line(self) -> str:
        """The decision in one line, pass or fail: what each check counted, then the outcome."""
        said = [f"{check}: " + ", ".join(f"{n} {what}" for what, n in figures.items())
                for check, figures in self.counts.items()]
        verdict = {"passed": "gate passed", "failed": "gate failed", "not gated": "no gate asked",
                   "incomplete": ("gate failed: " if self.gates else "") + "not everything was judged"}[self.outcome]
        return "; ".join(said + [verdict + (f" ({', '.join(self.gates)})" if self.gates else "")])

    def to_json(self) -> dict[str, Any]:
        """summary.json's `decision`."""
        return {"gates": list(self.gates), "outcome": self.outcome, "exit_code": self.code, "line": self.line,
                "counts": self.counts, "failed": list(self.lines)}

    def shown(self) -> list[tuple[str, str]]:
        """What the decision prints, as (kind, plain line): the notes, the failed gates each followed by what
        failed it ("detail"), then, for a gated run, the one decision line, pass or fail. Plain lines: text from
        rows and known-findings files may hold escape sequences."""
        out = []
        for line in self.notes + self.lines:
            out.append(("failed" if line in self.lines else "note", f"kl-conformance: {terminal_line(line)}"))
            out += [("detail", f"kl-conformance:   {terminal_line(detail)}") for detail in self.details.get(line, ())]
        if self.gates or self.counts:
            out.append(("decision", f"kl-conformance: {terminal_line(self.line)}"))
        return out

    def print(self) -> int:
        """Print what the decision shows on stderr; the exit code."""
        for _, line in self.shown():
            print(line, file=sys.stderr)
        return self.code

    def text(self, line: str) -> str:
        """A failed gate's line with what failed it, one item a line (junit.xml's failure)."""
        return "\n".join([line, *(f"  {detail}" for detail in self.details.get(line, ()))])

    def named(self) -> list[tuple[str, str]]:
        """Each failed gate as (its name, its text), a name that recurs numbered from its second: junit.xml's
        failing tests."""
        seen: Counter = Counter()
        named = []
        for line in self.lines:
            name = self.names.get(line, "gate")
            seen[name] += 1
            named.append((name if seen[name] == 1 else f"{name} ({seen[name]})", self.text(line)))
        return named


def junit_view(gates: Gates, r: Result, kind: str | None) -> tuple[str, str] | None:
    """How junit.xml shows a row under the gates: ("failure", message), ("skipped", reason), or None for the
    usual view (an undocumented divergence fails, an accepted one or an unsupported case is skipped).
    `kind` is the row's class against the baseline (report.baseline.BaselineComparison.add), if any."""
    if not gates.asked:
        return None
    # whatever its baseline: a divergence that is no finding (fallback: the call was not checked) no gate accepts
    if r.verdict.is_divergence and not r.verdict.is_finding:
        return "failure", f"not checked: the {r.mode} call ran eagerly instead. {r.message}"
    if gates.fail_on_new and kind == "lost" and not (r.is_accepted and r.verdict.is_divergence):
        return "failure", f"lost coverage since the baseline: now {r.verdict.value}. {r.message}"
    if not r.verdict.is_divergence or r.is_accepted or gates.fails_strictly(r):
        return None
    if gates.fail_on_new:
        if kind in ("new", "changed", "lost"):
            return None
        return "skipped", "unchanged since the baseline (--fail-on-new fails only on what is new)"
    if gates.fail_on_own:
        return "skipped", ("shared with the recorded run of the framework the port is judged like "
                           "(--fail-on-own fails only on the port's own)" if r.like == "shared" else
                           "no port's own divergence (--fail-on-own fails only on those)")
    return "skipped", "a finding neither documented nor known; only --strict or --fail-on-new fail on it"


def incomplete(manifests: Sequence[dict[str, Any]], tally: Tally) -> list[str]:
    """One line per run or framework that did not judge everything: not loaded, stopped, judging nothing; then
    the lines of `unchecked`."""
    lines = []
    totals: Counter = Counter()
    judged: Counter = Counter()
    for label, counts in tally.by_target.items():
        framework = split_label(label)["framework"]
        totals[framework] += sum(counts.values())
        judged[framework] += sum(n for v, n in counts.items() if Verdict(v).is_judged)
    for m in manifests:
        name, status = m.get("framework", "?"), m.get("status", "of unknown status")
        reason = f": {m['reason']}" if m.get("reason") else ""
        if status == "not_run":
            lines.append(f"{name} did not run{reason}")
        elif status == "stopped":
            lines.append(f"the {name} run stopped before its end{reason}")
        elif status != "complete":
            lines.append(f"the {name} run is {status}{reason}")
        elif not totals[row_framework(m)] and (names_rows(m) or not tally.total):
            lines.append(f"{name} produced no results (no selected part or API applies)")
    if not tally.total and not lines:
        lines.append("the runs hold no results")
    lines += unrecorded(manifests, totals)
    for framework in sorted(totals):
        if totals[framework] and not judged[framework]:
            lines.append(f"{framework} judged nothing: all its {totals[framework]} results are unsupported")
    return lines + unchecked(manifests, tally)


def unchecked(manifests: Sequence[dict[str, Any]], tally: Tally) -> list[str]:
    """One line per mode a run asked for and could not run here (run.json's `modes_not_run`), per API the
    installed release lacks (`apis_not_run`), per target whose calls ran eagerly instead of in its mode
    (fallback rows), and per framework whose calls the harness refused to make (the memory budget): what a mode,
    a release or the harness left unchecked."""
    lines = []
    for m in manifests:
        for key, what in (("modes_not_run", "mode"), ("apis_not_run", "API")):
            not_run = m.get(key)
            if isinstance(not_run, dict) and m.get("status") != "not_run":  # a framework not run says it once
                lines += [f"{m.get('framework', '?')} did not run {what} {name}: {why}"
                          for name, why in sorted(not_run.items())]
    for label, n in sorted(tally.fallback.items()):
        if n:
            lines.append(f"{label}: {n} results ran eagerly instead of in mode {split_label(label)['mode']} "
                         "(fallback): not checked")
    return lines + [refused_line(g) for g in refused_gaps(tally.refused_by_framework, tally.refused_reason)]


def damaged_decision(gates: Gates, broken: list[str]) -> Decision:
    """Exit 3 with `damaged`'s lines, gate or not, and nothing gated: what its rows are missing cannot be judged."""
    decision = Decision(gates=gates.flags)
    for line in broken:
        decision.fail(line, "damaged run")
    decision.code = EXIT_INCOMPLETE
    return decision


def decide(gates: Gates, tally: Tally, manifests: Sequence[dict[str, Any]], baseline_diff: BaselineDiff | None = None,
           known: KnownFindings | None = None, merged: bool = False) -> Decision:
    """The exit code and its lines. `baseline_diff` compares the rows with a baseline; `known` has audited these
    rows and judged the runs' scope; `merged`: a report of the runs, which also judges the shards it lacks."""
    broken = damaged(manifests, held_by_framework(tally))
    if broken:
        return damaged_decision(gates, broken)
    absent = missing_shards(manifests) if merged else []
    decision = Decision(gates=gates.flags)
    if baseline_diff is not None:
        decision.counts["baseline"] = {"new": len(baseline_diff.new), "changed": len(baseline_diff.changed),
                                       "fixed": len(baseline_diff.fixed), "lost": len(baseline_diff.lost)}
    if known is not None:
        stale, not_exercised = known.stale(), known.not_exercised()
        decision.counts["known"] = {"accepted": sum(tally.known.values())}
        decision.counts["known entries"] = {"matched": sum(1 for a in known.audit() if a.status == "matched"),
                                            "not exercised": len(not_exercised), "stale": len(stale)}
        for a in stale:
            decision.fail(known.stale_message(a), f"--known: stale entry {a.entry.id!r}")
        decision.notes += [known.not_exercised_message(a) for a in not_exercised]
    if gates.strict and not gates.fail_on_own:  # a fallback row is not a finding: `incomplete` says it
        targets = Counter({t: n - tally.fallback[t] for t, n in tally.undocumented.items() if n - tally.fallback[t]})
        unaccepted = sum(targets.values())
        decision.counts["strict"] = {"undocumented": unaccepted}
        if unaccepted:
            defects = sum(1 for d in tally.defects.ordered(UNDOCUMENTED)
                          if any(Verdict(v).is_finding for v in d.verdicts))
            line = (f"--strict: {unaccepted} divergences neither documented nor known "
                    f"({_many(len(targets), 'target')}, {_many(defects, 'defect')})")
            decision.fail(line, "--strict")
            decision.details[line] = _named(targets, "targets") + short_summary(tally, Runs(manifests), NAMED,
                                                                                  accepted=False)
    if gates.fail_on_own:  # --strict on the port's own divergences only
        targets = +tally.undocumented_like["own"]
        own = sum(targets.values())
        decision.counts["own"] = {"undocumented": own}
        decision.counts["shared"] = {"undocumented": sum(tally.undocumented_like["shared"].values())}
        if own:
            defects = sum(1 for d in tally.defects.ordered(UNDOCUMENTED) if d.like == "own")
            line = (f"--fail-on-own: {own} divergences neither documented nor known are the port's own, not shared "
                    f"with the recorded run ({_many(len(targets), 'target')}, {_many(defects, 'defect')})")
            decision.lines.append(line)
            decision.details[line] = _named(targets, "targets")
    if gates.fail_on_new and baseline_diff is not None and baseline_diff.failing:
        failing = baseline_diff.failing
        lost_keys = {item[0] for item in baseline_diff.lost}
        lost = sum(1 for item in failing if item[0] in lost_keys)
        line = (f"--fail-on-new: {len(failing) - lost} divergences new or changed since the baseline "
                f"{baseline_diff.baseline}" + (f" and {lost} results lost (judged by the baseline; now unsupported, "
                                               "crashed or not written)" if lost else "")
                + LISTED_IN_BASELINE_JSON
                + (f"; this run found no device {', '.join(sorted(baseline_diff.devices_not_found))} (give --device "
                   "to gate only the devices present)" if baseline_diff.devices_not_found else ""))
        decision.fail(line, "--fail-on-new")
        decision.details[line] = _failing_details(failing, lost_keys)
    if decision.lines:
        decision.code = EXIT_GATE
    if gates.asked:
        missing = incomplete(manifests, tally) + absent
        for line in missing:
            decision.fail(f"{gates.names}: {line}", f"{gates.names}: not everything was judged")
        if missing and decision.code == EXIT_OK:
            decision.code = EXIT_INCOMPLETE
    else:  # said, never a failure without a gate (a matrix still writes its merged report)
        decision.notes += unchecked(manifests, tally) + absent
    return decision


def _named(counts: Counter, what: str, unit: str = "undocumented") -> list[str]:
    """One line per item, most first, up to NAMED; then one line counting the rest."""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    lines = [f"{item}: {n} {unit}" for item, n in top[:NAMED]]
    if len(top) > NAMED:
        lines.append(f"and {len(top) - NAMED} more {what} ({sum(n for _, n in top[NAMED:])} {unit})")
    return lines


def _failing_details(failing: list, lost_keys: set) -> list[str]:
    """What --fail-on-new fails on, by target (framework / api / device / part) and by what the result is now
    (its verdict and cause, or `lost` for a result no longer judged)."""
    targets: Counter = Counter()
    now: Counter = Counter()
    for key, _, state, _ in failing:
        targets[key_label(key)] += 1
        if key in lost_keys:
            now["lost: " + (state[0] if state else "not written")] += 1
        else:
            now[f"{state[0]} {state[1]}".strip()] += 1
    return _named(targets, "targets", "failing") + _named(now, "kinds", "failing")


def _many(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
