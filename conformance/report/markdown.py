"""Writes report.md and divergences.md from result rows.

report.md: provenance, summary matrix, case-family matrix, then one section per cause and verdict of the
divergences (what it spans and one worked example), known findings, warnings and the baseline. It is meant to be
pasted into an issue, whose body holds 65,536 characters: each part has a budget, a table too wide for it is shown
by coarser targets, and what does not fit is counted and left to divergences.md, which lists every divergent row.
The budget is report/mdbudget.py's, the two matrices report/matrices.py's, the reproduce command
report/reprocommand.py's; here each document is put together, with its other sections.

Reads rows, run manifests and details only; never calls a framework or the reference, which
is what makes merging runs from several machines sound.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from conformance.core.known import EntryAudit
from conformance.core.model import EAGER, Result, Verdict
from conformance.report.defects import DOCUMENTED, KNOWN, UNDOCUMENTED, UNSUPPORTED, shown, title
from conformance.report.example import MESSAGE, VALUES, render_example
from conformance.report.gaps import mode_gaps, refused_gaps, refused_line, release_gaps
from conformance.report.matrices import family_matrix, fitted, summary_matrix
from conformance.report.mdbudget import BUDGET, LINK, LISTED_CELL, PART_BUDGETS, fit, size_of
from conformance.report.mdtext import CELL as _CELL, cell as _cell, code as _code, code_cell as _code_cell, cut as _cut
from conformance.report.releases import KIND_TEXT, KINDS, ReleasePair, call_text, release_pairs, seen_text
from conformance.report.reprocommand import Runs, repro_command
from conformance.report.tally import SPANS, Tally, framework_label

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
             "summary": fitted(lambda level: summary_matrix(tally, level), "summary"),
             "families": fitted(lambda level: family_matrix(tally, level), "families"),
             "known": fit(_known(known_audit), PART_BUDGETS["known"], "entries", "a stale one is named by the "
                          "command's output and junit.xml") if known_audit is not None else [],
             "warnings": fit(_warnings(tally), PART_BUDGETS["warnings"], "rows", "see missing_warnings in "
                             "results.jsonl"),
             "baseline": fit(list(baseline), PART_BUDGETS["baseline"], "lines", f"see {LINK} and baseline.json"),
             "releases": _fitted_releases(release_pairs(tally))}
    parts["provenance"] = fit(parts["provenance"], PART_BUDGETS["provenance"], "runs", "see each run's run.json")
    used = sum(size_of(lines) for lines in parts.values()) + 100
    parts["defects"] = fit(_defects(tally), PART_BUDGETS["defects"], "lines", "see summary.json's defects")
    used += size_of(parts["defects"])
    out: list[str] = ["# kl_div conformance report", ""]
    out += parts["defects"] + parts["provenance"] + parts["summary"] + parts["releases"]
    out += _divergences(tally, manifests, examples or {}, BUDGET - used)
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
        out += [f"| {_code_cell(d.id)} | {_cell(title(d, spec), 400)} | {d.rows} | {_cell(d.where(), 300)} | "
                f"{_code_cell(d.example.case_id)} ({_cell(d.example.api)}, {_cell(d.example.part)}): "
                f"{_cell(shown(d.example), 300)} |" for d in undocumented]
        out.append("")
    for status, heading in ((KNOWN, "Known (accepted by a known-findings file)"),
                            (DOCUMENTED, "Documented by the framework's profile"),
                            (UNSUPPORTED, "Not offered by the API (unsupported)")):
        found = defects.ordered(status)
        if found:
            out += [f"## {heading}: {len(found)} defect{'' if len(found) == 1 else 's'}", "",
                    "| defect | what it does | rows | by |", "|---|---|---:|---|"]
            out += [f"| {_code_cell(d.id)} | {_cell(title(d, spec), 300)} | {d.rows} | "
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
    runs = Runs(manifests)
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
            out.append(f"| {_code_cell(r.case_id)} | {_cell(r.api)} / {_cell(r.device)}"
                       f"{'' if r.mode == EAGER else ' / ' + _cell(r.mode)}"
                       f"{'' if r.part == 'forward' else ' / ' + _cell(r.part)}"
                       f"{', release ' + _cell(r.framework_version) if r.framework in tally.released else ''}"
                       f" | {_cell(r.message, LISTED_CELL)}"
                       f"{tags} | {_code_cell(repro_command(r, runs.of(r)))} |")
        if size > len(members):
            out.append(f"\n{size - len(members)} more in results.jsonl (cause {_code(cause)}, verdict "
                       f"{_code(verdict)}).")
        out.append("")
    out += _releases(release_pairs(tally), _RELEASE_LISTED)
    for render in (summary_matrix, family_matrix):  # the tables report.md shows by coarser targets, by every one here
        lines = render(tally, "target")
        if size_of(lines) > PART_BUDGETS["summary" if render is summary_matrix else "families"]:
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


def _provenance(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    out = ["| run | framework | version | status | cases | shard | python | numpy | spec | harness |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(manifests, start=1):
        status = str(m.get("status", "?")) + (f": {m['reason']}" if m.get("reason") else "")
        out.append(f"| {i} | {_cell(m.get('framework', '?'))} | {_cell(m.get('framework_version', '-'))} | "
                   f"{_cell(status, LISTED_CELL)} | {_cell(m.get('cases', '-'))} | "
                   f"{_cell(m.get('shard') or '-')} | "
                   f"{_cell(m.get('python_version', '-'))} | {_cell(m.get('numpy_version', '-'))} | "
                   f"{_cell(m.get('spec_hash', '-'))} | {_cell(m.get('harness_version', '-'))} |")
    seeds = sorted({str(m.get("seed")) for m in manifests if m.get("seed") is not None})
    out += ["", f"{tally.total} results; seed {_cell(', '.join(seeds) or '-')}. {_legend(tally)}", ""]
    return out + _modes(tally, manifests) + _release_gaps(manifests) + _refused(tally)


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
    out = [f"Not run: {_cell(g.framework)} API {_cell(g.name)}: {_cell(g.why, LISTED_CELL)}." if g.what == "API"
           else f"Note: {_cell(g.framework)}: {_cell(g.why, LISTED_CELL)}." for g in release_gaps(manifests)]
    return out + [""] if out else []


def _refused(tally: Tally) -> list[str]:
    """Per framework, the results whose calls the harness refused to make (the memory budget): not checked."""
    out = [f"{_cell(refused_line(g), LISTED_CELL)}." for g in
           refused_gaps(tally.refused_by_framework, tally.refused_reason)]
    return out + [""] if out else []


def _modes(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    """The modes the rows were made in and those a run could not run here; nothing for an eager-only report."""
    not_run = mode_gaps(manifests)
    if set(tally.modes) <= {EAGER} and not not_run:
        return []
    out = ["Modes: " + ", ".join(f"{_cell(mode)} ({n} results)" for mode, n in sorted(tally.modes.items())) + "."]
    out += [f"Not run: {_cell(g.framework)} mode {_cell(g.name)}: {_cell(g.why, LISTED_CELL)}." for g in not_run]
    return out + [""]


def _fitted_releases(pairs: list[ReleasePair]) -> list[str]:
    """"Changed between releases" with as many calls listed per kind as fit its part's budget."""
    budget = PART_BUDGETS["releases"]
    for listed in _RELEASE_LISTS:
        lines = _releases(pairs, listed)
        if size_of(lines) <= budget:
            return lines
    return fit(lines, budget, "lines")


def _releases(pairs: list[ReleasePair], listed: int) -> list[str]:
    """Per framework and consecutive releases, what changed: counts per kind, one worked example each, and the
    first `listed` calls of each kind; nothing where the report holds one release per framework."""
    if not pairs:
        return []
    out = ["## Changed between releases", "",
           "Each framework's releases in this report, each against the next newer one (ordered by version), call by "
           "call (case, API, device, mode, part): `new` passed and now diverges, `fixed` diverged and now passes, "
           "`changed` diverges by another verdict or cause, `lost` was judged and now has no row or is unsupported."
           f" Every such call is listed in {LINK}.", ""]
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
            out += [f"| {_code_cell(_cut(call[0], _CELL))} | {_cell(call_text(call))} | {_cell(seen_text(old))} | "
                    f"{_cell(seen_text(now))} |" for call, old, now in calls[:listed]]
            if len(calls) > listed:
                out.append(f"\nAnd {len(calls) - listed} more {kind}"
                           + (f": see {LINK}." if listed < _RELEASE_LISTED else " (see results.jsonl)."))
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
            f"reproduce command, is listed in {LINK}.", ""]
    runs = Runs(manifests)
    order = tally.ordered_groups()
    used, shown = size_of(out) + 400, 0  # room for the line that counts what is left out
    for key in order:
        section = _section(tally, key, runs.of(tally.group_example[key]),
                           _example_detail(examples, tally.group_example[key]))
        if used + size_of(section) > budget:
            break
        out += section
        used += size_of(section)
        shown += 1
    left = order[shown:]
    if left:
        results = sum(tally.group_sizes[k] for k in left)
        undocumented = sum(tally.group_undocumented[k] for k in left)
        out += [f"And {len(left)} more causes ({results} results, {undocumented} undocumented), left out to keep "
                f"this report short: see {LINK}.", ""]
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
    return _code(command) if len(command) <= LISTED_CELL else f"too long to show here: see {LINK}"


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
        out.append(f"| {_code_cell(_cut(e.id, _CELL))} | {a.accepted} | {a.concerned} | {status} | {_cell(e.reason)} | "
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
