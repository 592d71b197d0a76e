"""Writes report.md and divergences.md from result rows.

report.md: provenance, summary matrix, case-family matrix, then one section per cause and verdict of the
divergences (what it spans and one worked example), known findings, warnings and the baseline. It is meant to be
pasted into an issue, whose body holds 65,536 characters: each part has a budget, a table too wide for it is shown
by coarser targets, and what does not fit is counted and left to divergences.md, which lists every divergent row.

Reads rows, run manifests and details only; never calls a framework or the reference, which
is what makes merging runs from several machines sound.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from typing import Any, Callable, Sequence

from conformance.core.known import EntryAudit
from conformance.core.model import EAGER, Result, Verdict
from conformance.core.rundirs import DIVERGENCES_FILE
from conformance.report.defects import DOCUMENTED, KNOWN, UNDOCUMENTED, UNSUPPORTED, shown, title
from conformance.report.example import MESSAGE, VALUES, render_example
from conformance.report.gaps import mode_gaps, release_gaps
from conformance.report.mdtext import CELL as _CELL, cell as _cell, code as _code, cut as _cut
from conformance.report.releases import KIND_TEXT, KINDS, ReleasePair, call_text, release_pairs, seen_text
from conformance.report.tally import SPANS, VERDICT_ORDER, Tally, framework_label, join_framework, split_label

REPORT_LIMIT = 65_536  # characters an issue body holds: report.md stays below
_BUDGET = REPORT_LIMIT - 1_536  # what the parts may fill together; the rest is slack for the lines that say "more"
# the most characters each part but the divergences may take; the divergences' sections get what is left
_PART_BUDGETS = {"defects": 16_000, "provenance": 8_000, "summary": 12_000, "families": 12_000, "known": 4_000,
                 "warnings": 4_000, "baseline": 6_000, "releases": 10_000}
_LISTED_CELL = 600  # characters of a row's text in one cell of divergences.md
_LINK = f"[{DIVERGENCES_FILE}]({DIVERGENCES_FILE})"
_RELEASE_LISTS = (5, 2, 0)  # calls listed per kind in report.md's "Changed between releases", the most that fit
_RELEASE_LISTED = 500  # calls listed per kind in divergences.md
_SPAN_NAMES = {"part": "parts", "dtype": "dtypes", "reduction": "reductions", "log_target": "log_target",
               "family": "families"}


def render_markdown(tally: Tally, manifests: Sequence[dict[str, Any]],
                    known_audit: Sequence[EntryAudit] | None = None,
                    examples: dict[tuple, dict[str, Any]] | None = None, baseline: Sequence[str] = ()) -> str:
    """report.md's text, under REPORT_LIMIT characters. `known_audit` (the known-findings file's audit) adds the
    known-findings section; `examples` are the details (details.jsonl lines) of the worked examples, by
    `detail_key`; `baseline` is the comparison with a baseline (report.baseline.render_baseline_markdown)."""
    parts = {"provenance": _provenance(tally, manifests),
             "summary": _fitted(lambda level: _summary(tally, level), "summary"),
             "families": _fitted(lambda level: _family_matrix(tally, level), "families"),
             "known": _fit(_known(known_audit), _PART_BUDGETS["known"], "entries", "a stale one is named by the "
                           "command's output and junit.xml") if known_audit is not None else [],
             "warnings": _fit(_warnings(tally), _PART_BUDGETS["warnings"], "rows", "see missing_warnings in "
                              "results.jsonl"),
             "baseline": _fit(list(baseline), _PART_BUDGETS["baseline"], "lines", f"see {_LINK} and baseline.json"),
             "releases": _fitted_releases(release_pairs(tally))}
    parts["provenance"] = _fit(parts["provenance"], _PART_BUDGETS["provenance"], "runs", "see each run's run.json")
    used = sum(_size(lines) for lines in parts.values()) + 100
    parts["defects"] = _fit(_defects(tally), _PART_BUDGETS["defects"], "lines", "see summary.json's defects")
    used += _size(parts["defects"])
    out: list[str] = ["# kl_div conformance report", ""]
    out += parts["defects"] + parts["provenance"] + parts["summary"] + parts["releases"]
    out += _divergences(tally, manifests, examples or {}, _BUDGET - used)
    out += parts["known"] + parts["warnings"] + parts["baseline"] + parts["families"]
    return "\n".join(out).rstrip() + "\n"


def _defects(tally: Tally) -> list[str]:
    """What report.md opens with: each undocumented defect once (its id, plain title, rows, where it shows, its
    draft), then the accepted ones (documented by the profile, known) and what the APIs do not offer."""
    defects = tally.defects
    if not defects.by_id:
        return ["No divergences: every judged result is within the spec.", ""]
    spec = tally.spec()
    undocumented = defects.ordered(UNDOCUMENTED)
    out = [f"## {len(undocumented)} undocumented defect{'' if len(undocumented) == 1 else 's'}", ""]
    if undocumented:
        out += ["Each distinct behaviour once: rows of one implementation, cause and behaviour are one defect, "
                "whatever their API, part, dtype, shape, layout, legacy arguments or mode. Each has an issue "
                "draft in `issues/` and a reproducer; the example is its simplest row.", "",
                "| defect | what it does | rows | where it shows | example |", "|---|---|---:|---|---|"]
        out += [f"| {_code(d.id)} | {_cell(title(d, spec), 400)} | {d.rows} | {_cell(d.where(), 300)} | "
                f"{_code(d.example.case_id)} ({_cell(d.example.api)}, {_cell(d.example.part)}): "
                f"{_cell(shown(d.example), 300)} |" for d in undocumented]
        out.append("")
    for status, heading in ((KNOWN, "Known (accepted by a known-findings file)"),
                            (DOCUMENTED, "Documented by the framework's profile"),
                            (UNSUPPORTED, "Not offered by the API (unsupported)")):
        found = defects.ordered(status)
        if found:
            out += [f"## {heading}: {len(found)} defect{'' if len(found) == 1 else 's'}", "",
                    "| defect | what it does | rows | by |", "|---|---|---:|---|"]
            out += [f"| {_code(d.id)} | {_cell(title(d, spec), 300)} | {d.rows} | "
                    f"{_cell(', '.join(d.documented_by) or ', '.join(sorted(d.apis)))} |" for d in found]
            out.append("")
    return out


def render_divergences(tally: Tally, manifests: Sequence[dict[str, Any]], baseline: Sequence[str] = ()) -> str:
    """divergences.md's text: every divergent row (up to tally.LISTED_PER_GROUP per cause), in report.md's order
    of causes, the case families by every target, and the whole comparison with a baseline."""
    out = ["# kl_div conformance report: every divergence", "",
           "The rows behind report.md's sections, by cause and verdict in the same order. Each row's `reproduce` "
           "command writes a standalone script (the framework and NumPy only) that prints the framework's result and "
           "the spec's expected value; run it in that framework's environment.", ""]
    run_info = {m.get("framework"): m for m in manifests}
    if not tally.group_sizes:
        out += ["No divergences: every judged result is within the spec.", ""]
    for key in tally.ordered_groups():
        cause, verdict = key
        size, members = tally.group_sizes[key], tally.groups[key]
        out += [f"## {_code(cause)}: {_cell(verdict)} ({_counts(tally, key)})", "",
                "| case | api / device | finding | reproduce |", "|---|---|---|---|"]
        for r in sorted(members, key=lambda r: (r.case_id, r.api, r.device, r.mode, r.framework_version)):
            tags = (f" **documented** ({_cell(', '.join(r.documented_by))})" if r.documented else "") + \
                (f" **known** ({_cell(', '.join(r.known_by))})" if r.known_by else "")
            out.append(f"| {_code(r.case_id)} | {_cell(r.api)} / {_cell(r.device)}"
                       f"{'' if r.mode == EAGER else ' / ' + _cell(r.mode)}"
                       f"{'' if r.part == 'forward' else ' / ' + _cell(r.part)}"
                       f"{', release ' + _cell(r.framework_version) if r.framework in tally.released else ''}"
                       f" | {_cell(r.message, _LISTED_CELL)}"
                       f"{tags} | {_code(repro_command(r, run_info.get(r.framework, {})))} |")
        if size > len(members):
            out.append(f"\n{size - len(members)} more in results.jsonl (cause {_code(cause)}, verdict "
                       f"{_code(verdict)}).")
        out.append("")
    out += _releases(release_pairs(tally), _RELEASE_LISTED)
    for render in (_summary, _family_matrix):  # the tables report.md shows by coarser targets, by every one here
        lines = render(tally, "target")
        if _size(lines) > _PART_BUDGETS["summary" if render is _summary else "families"]:
            out += lines
    out += list(baseline)
    return "\n".join(out).rstrip() + "\n"


def detail_key(r: Result) -> tuple[str, ...]:
    """A row's key in details.jsonl (details.DETAIL_KEYS' values, in Result.key's order), then its release
    (details.detail_matcher)."""
    return (*r.key, r.framework_version)


def _example_detail(examples: dict[tuple, dict[str, Any]], r: Result) -> dict[str, Any] | None:
    """The worked example's detail: by its key and release, else by its key alone (a caller's details by key)."""
    return examples.get(detail_key(r), examples.get(r.key))


def wanted_details(tally: Tally) -> set[tuple[str, str, str, str, str]]:
    """The details report.md's worked examples show: one row per cause group."""
    return {detail_key(r) for r in tally.group_example.values()}


def _size(lines: Sequence[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _fit(lines: list[str], budget: int, what: str, where: str = f"see {_LINK}") -> list[str]:
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


def _fitted(render: Callable[[str], list[str]], part: str) -> list[str]:
    """A table by every target if it fits its part's budget, else by framework / API / device, else by framework."""
    budget = _PART_BUDGETS[part]
    for level in ("target", "where", "framework"):
        lines = render(level)
        if _size(lines) <= budget:
            return lines
    return _fit(lines, budget, "rows")


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
                                      f"targets to fit); by every target in {_LINK}.",
               "framework": " Shown by framework here, all APIs, devices and parts together (too many targets "
                            f"to fit); by every target in {_LINK}."}


def _provenance(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    out = ["| run | framework | version | status | cases | shard | python | numpy | spec | harness |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(manifests, start=1):
        status = str(m.get("status", "?")) + (f": {m['reason']}" if m.get("reason") else "")
        out.append(f"| {i} | {_cell(m.get('framework', '?'))} | {_cell(m.get('framework_version', '-'))} | "
                   f"{_cell(status, _LISTED_CELL)} | {_cell(m.get('cases', '-'))} | "
                   f"{_cell(m.get('shard') or '-')} | "
                   f"{_cell(m.get('python_version', '-'))} | {_cell(m.get('numpy_version', '-'))} | "
                   f"{_cell(m.get('spec_hash', '-'))} | {_cell(m.get('harness_version', '-'))} |")
    seeds = sorted({str(m.get("seed")) for m in manifests if m.get("seed") is not None})
    out += ["", f"{tally.total} results; seed {_cell(', '.join(seeds) or '-')}. {_legend(tally)}", ""]
    return out + _modes(tally, manifests) + _release_gaps(manifests)


def _legend(tally: Tally) -> str:
    """The verdicts, each with its gloss (core/verdict.py): those that pass, the divergences, then those that judge
    nothing. A divergence that is no finding (fallback, which only a compiled mode gives) is named only where a
    row has it, so that an eager report does not explain it."""
    present = {v for c in tally.by_target.values() for v, n in c.items() if n}

    def named(verdicts: list[Verdict]) -> str:
        return ", ".join(f"`{v.value}`" + (f" ({v.gloss})" if v.gloss else "") for v in verdicts)
    passing = [v for v in Verdict if v.is_judged and not v.is_divergence]
    divergences = [v for v in Verdict if v.is_finding or (v.is_divergence and v.value in present)]
    judging_nothing = [v for v in Verdict if not v.is_judged]
    return f"Verdicts: {named(passing)}; divergences {named(divergences)}; and {named(judging_nothing)}."


def _release_gaps(manifests: Sequence[dict[str, Any]]) -> list[str]:
    """Once per run, each API its framework's installed release lacks (not run: no rows for it) and each of the
    harness's own options that release could not take (gaps.release_gaps)."""
    out = [f"Not run: {_cell(g.framework)} API {_cell(g.name)}: {_cell(g.why, _LISTED_CELL)}." if g.what == "API"
           else f"Note: {_cell(g.framework)}: {_cell(g.why, _LISTED_CELL)}." for g in release_gaps(manifests)]
    return out + [""] if out else []


def _modes(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    """The modes the rows were made in and those a run could not run here; nothing for an eager-only report."""
    not_run = mode_gaps(manifests)
    if set(tally.modes) <= {EAGER} and not not_run:
        return []
    out = ["Modes: " + ", ".join(f"{_cell(mode)} ({n} results)" for mode, n in sorted(tally.modes.items())) + "."]
    out += [f"Not run: {_cell(g.framework)} mode {_cell(g.name)}: {_cell(g.why, _LISTED_CELL)}." for g in not_run]
    return out + [""]


def _by_level(tally: Tally, level: str) -> dict[str, tuple[Counter, int, int]]:
    """Verdict counts, undocumented and known divergences per target label at `level` (see `_level`)."""
    merged: dict[str, tuple[Counter, list[int]]] = {}
    for label, counts in tally.by_target.items():
        c, accepted = merged.setdefault(_level(label, level), (Counter(), [0, 0]))
        c.update(counts)
        accepted[0] += tally.undocumented[label]
        accepted[1] += tally.known[label]
    return {label: (c, new, known) for label, (c, (new, known)) in merged.items()}


def _summary(tally: Tally, level: str = "target") -> list[str]:
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


def _family_matrix(tally: Tally, level: str = "target") -> list[str]:
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


def _fitted_releases(pairs: list[ReleasePair]) -> list[str]:
    """"Changed between releases" with as many calls listed per kind as fit its part's budget."""
    budget = _PART_BUDGETS["releases"]
    for listed in _RELEASE_LISTS:
        lines = _releases(pairs, listed)
        if _size(lines) <= budget:
            return lines
    return _fit(lines, budget, "lines")


def _releases(pairs: list[ReleasePair], listed: int) -> list[str]:
    """Per framework and consecutive releases, what changed: counts per kind, one worked example each, and the
    first `listed` calls of each kind; nothing where the report holds one release per framework."""
    if not pairs:
        return []
    out = ["## Changed between releases", "",
           "Each framework's releases in this report, each against the next newer one (ordered by version), call by "
           "call (case, API, device, mode, part): `new` passed and now diverges, `fixed` diverged and now passes, "
           "`changed` diverges by another verdict or cause, `lost` was judged and now has no row or is unsupported."
           f" Every such call is listed in {_LINK}.", ""]
    for p in pairs:
        counts = p.counts()
        out += [f"### {_cell(p.framework)}: {_cell(p.older)} to {_cell(p.newer)}", "",
                f"{p.compared} calls judged in both releases: " + ", ".join(f"{counts[k]} {k}" for k in KINDS)
                + f"; {p.gained} judged in {_cell(p.newer)} only.", ""]
        for kind in KINDS:
            calls = p.calls[kind]
            if not calls:
                continue
            call, old, now = calls[0]
            shown = now if now is not None and kind != "fixed" else old
            out += [f"- {KIND_TEXT[kind]}: {len(calls)}. Example: {_code(_cut(call[0], _CELL))} on "
                    f"{_cell(call_text(call))}: {_cell(p.older)} {_cell(seen_text(old))}, {_cell(p.newer)} "
                    f"{_cell(seen_text(now))}; {_cell(shown.dtype)}; message: {_cell(shown.message, _CELL) or '-'}"]
        if any(p.calls.values()):
            out.append("")
        for kind in KINDS if listed else ():
            calls = p.calls[kind]
            if not calls:
                continue
            out += [f"| {kind} | api / device / part | {_cell(p.older)} | {_cell(p.newer)} |", "|---|---|---|---|"]
            out += [f"| {_code(_cut(call[0], _CELL))} | {_cell(call_text(call))} | {_cell(seen_text(old))} | "
                    f"{_cell(seen_text(now))} |" for call, old, now in calls[:listed]]
            if len(calls) > listed:
                out.append(f"\nAnd {len(calls) - listed} more {kind}"
                           + (f": see {_LINK}." if listed < _RELEASE_LISTED else " (see results.jsonl)."))
            out.append("")
    return out


def _counts(tally: Tally, key: tuple[str, str]) -> str:
    return (f"{tally.group_sizes[key]} results: {tally.group_undocumented[key]} undocumented, "
            f"{tally.group_documented[key]} documented, {tally.group_known[key]} known")


def _divergences(tally: Tally, manifests: Sequence[dict[str, Any]], examples: dict[tuple, dict[str, Any]],
                 budget: int) -> list[str]:
    """One section per cause and verdict, undocumented first and largest first, as many as `budget` holds."""
    out = ["## Divergences by cause", ""]
    if not tally.group_sizes:
        return out + ["No divergences: every judged result is within the spec.", ""]
    out += ["One section per cause and verdict: causes with undocumented divergences first, the largest first. The "
            "cause is the spec choice whose alternative reproduces what the framework did (\"behaves as\"), the rule "
            "a verdict states by itself, or `unexplained` (then the rules the rows touch are listed). Each section "
            "says what its rows span and shows one of them worked through; every divergent row, with its "
            f"reproduce command, is listed in {_LINK}.", ""]
    run_info = {m.get("framework"): m for m in manifests}
    order = tally.ordered_groups()
    used, shown = _size(out) + 400, 0  # room for the line that counts what is left out
    for key in order:
        section = _section(tally, key, run_info.get(tally.group_example[key].framework, {}),
                           _example_detail(examples, tally.group_example[key]))
        if used + _size(section) > budget:
            break
        out += section
        used += _size(section)
        shown += 1
    left = order[shown:]
    if left:
        results = sum(tally.group_sizes[k] for k in left)
        undocumented = sum(tally.group_undocumented[k] for k in left)
        out += [f"And {len(left)} more causes ({results} results, {undocumented} undocumented), left out to keep "
                f"this report short: see {_LINK}.", ""]
    return out


def _section(tally: Tally, key: tuple[str, str], run_info: dict[str, Any], detail: dict[str, Any] | None) -> list[str]:
    """One cause and verdict: its counts, what its rows span, and its worked example."""
    cause, verdict = key
    spans = tally.group_spans[key]
    out = [f"### {_code(_cut(cause, _CELL))}: {_cell(verdict)} ({_counts(tally, key)})", "",
           "- targets: " + _values(spans["target"])]
    out += [f"- {_SPAN_NAMES[name]}: " + _values(spans[name]) for name in SPANS]
    if cause == "unexplained":
        out.append("- touches: " + (_values(spans["rules"]) if spans["rules"] else "no rule recorded"))
    r = tally.group_example[key]
    status = "documented" if r.documented else "known" if r.known_by else "undocumented"
    out += ["", f"Example ({status}): {_code(_cut(r.case_id, _CELL))} on {_cell(framework_label(r, tally.released))}"
                f" / {_cell(r.api)} / "
                f"{_cell(r.device)}{'' if r.mode == EAGER else ', mode ' + _cell(r.mode)}, part {_cell(r.part)}, "
                f"{_cell(r.dtype)}, reduction {_cell(r.reduction)}, "
                f"log_target {int(r.log_target)}.", ""]
    out += render_example(detail, r.message)
    out += [f"- message: {_cell(r.message, MESSAGE) or '-'}",
            f"- reproduce: {_reproduce(repro_command(r, run_info))}", ""]
    return out


def _reproduce(command: str) -> str:
    """The worked example's reproduce command, unless its case id makes it too long for report.md."""
    return _code(command) if len(command) <= _LISTED_CELL else f"too long to show here: see {_LINK}"


def _values(counts: Counter, shown: int = VALUES) -> str:
    """A span as its values, most frequent first, with their counts; past `shown`, the rest counted."""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{_cell(_cut(v, 80))} ({n})" for v, n in top[:shown])
    return text + (f", and {len(top) - shown} more" if len(top) > shown else "")


def _known(audit: Sequence[EntryAudit]) -> list[str]:
    """How each entry of the known-findings file fared: matched, stale, or about rows not in this report."""
    out = ["## Known findings", ""]
    if not audit:
        return out + ["The known-findings file has no entries.", ""]
    out += ["Entries of the known-findings file (--known). A stale entry concerns results here but matches none of "
            "their divergences: the run or report fails until it is removed or corrected. After a run of part of "
            "the suite it speaks about (--only, --shard, --part, --api, --device, --mode, another --seed) such an "
            "entry is `not exercised here` instead, and fails nothing. An entry without `mode:` speaks about eager "
            "calls only.", "",
            "| entry | divergences accepted | results concerned | status | reason | link |",
            "|---|---:|---:|---|---|---|"]
    for a in audit:
        e = a.entry
        status = f"**{a.status}**" if a.status == "stale" else a.status
        out.append(f"| {_code(_cut(e.id, _CELL))} | {a.accepted} | {a.concerned} | {status} | {_cell(e.reason)} | "
                   f"{_cell(e.link or '-')} |")
    return out + [""]


def _warnings(tally: Tally) -> list[str]:
    missing = tally.missing_warnings
    out = ["## Warnings", "", "Warnings are advisory (spec: warnings.policy) and never change a verdict."]
    if not missing:
        return out + ["Every warning the spec expects was given.", ""]
    out += ["", "| framework / api / device | expected warning not given | results |", "|---|---|---:|"]
    out += [f"| {_cell(t)} | {_cell(w)} | {n} |" for (t, w), n in sorted(missing.items())]
    return out + [""]


def repro_command(r: Result, run_info: dict[str, Any], framework: str | None = None) -> str:
    """The one-line command that prints a standalone script reproducing exactly this result; `framework` is the
    word the user gave (a `module:Class` adapter's), where it is not the row's framework name."""
    # every value from a row is one shell word (shlex.quote) joined to its option, and the case id comes after
    # `--`: an id or path that starts with a dash is then never read as another option
    words = ["kl-conformance", "repro", f"--framework={framework or r.framework}", f"--api={r.api}", f"--device={r.device}",
             *([] if r.mode == EAGER else [f"--mode={r.mode}"]), f"--part={r.part}"]
    if r.source != "generated":
        words += [f"--cases={r.source}"]
    elif run_info.get("seed") is not None:
        words += [f"--seed={run_info['seed']}"]
    words += ["--", r.case_id]
    if r.framework == "rtorch":  # R torch's reproducer is an R script
        return " ".join(map(shell_word, words)) + " > repro.R && Rscript repro.R"
    return " ".join(map(shell_word, words)) + " > repro.py && python repro.py"


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # what a one-line command cannot hold as is


def shell_word(word: str) -> str:
    """`word` as one shell word on one line: shlex.quote's, or where it holds a line break or another control
    character, bash's and zsh's $'...' quoting with each such character escaped (the line break joined into a
    space, as a code span shows it, would name another case). A case id of `a`, a line break and `b` becomes
    the word $'a\\nb', which the shell reads back as those three characters."""
    if not _UNPRINTABLE.search(word):
        return shlex.quote(word)
    escaped = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "$'" + "".join(escaped.get(c) or (f"\\u{ord(c):04x}" if _UNPRINTABLE.match(c) else c)
                          for c in word) + "'"
