"""Writes report.md from result rows: provenance, summary matrix, case-family matrix, divergences by cause.

Reads rows and run manifests only; never calls a framework or the reference, which
is what makes merging runs from several machines sound.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Sequence

from conformance.core.model import Result, Verdict
from conformance.report.tally import VERDICT_ORDER, Tally


def render_markdown(tally: Tally, manifests: Sequence[dict[str, Any]], known_audit: Sequence[Any] | None = None) -> str:
    """The whole report as Markdown text; `known_audit` (known.EntryAudit items) adds the known-findings section."""
    out: list[str] = ["# kl_div conformance report", ""]
    out += _provenance(tally, manifests)
    out += _summary(tally)
    out += _family_matrix(tally)
    out += _divergences(tally, manifests)
    if known_audit is not None:
        out += _known(known_audit)
    out += _warnings(tally)
    return "\n".join(out).rstrip() + "\n"


def _provenance(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    out = ["| run | framework | version | status | cases | shard | python | numpy | spec | harness |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(manifests, start=1):
        status = m.get("status", "?") + (f": {m['reason']}" if m.get("reason") else "")
        out.append(f"| {i} | {_cell(m.get('framework', '?'))} | {_cell(m.get('framework_version', '-'))} | {_cell(status)} | "
                   f"{m.get('cases', '-')} | {m.get('shard') or '-'} | {m.get('python_version', '-')} | "
                   f"{m.get('numpy_version', '-')} | {m.get('spec_hash', '-')} | {m.get('harness_version', '-')} |")
    seeds = sorted({str(m.get("seed")) for m in manifests if m.get("seed") is not None})
    out += ["", f"{tally.total} results; seed {', '.join(seeds) or '-'}. "
                "Verdicts: `pass`; divergences `value` (outside the bound), `nonfinite` (NaN/inf pattern), "
                "`shape`, `dtype`, `error` (raised where a value was expected, returned a value where an error "
                "was expected, or a different exception type), `crash`, `timeout`; and `unsupported` (the API "
                "cannot express the case).", ""]
    return out


def _summary(tally: Tally) -> list[str]:
    counts = tally.by_target
    present = [v for v in VERDICT_ORDER if any(c[v] for c in counts.values())]
    out = ["## Summary", "",
           "Divergences the framework's profile documents (spec/profiles) are counted apart from new ones, and so "
           "are those a known-findings file (--known) accepts; `--strict` fails on the undocumented ones only.", "",
           "| framework / api / device | results | undocumented | documented | known | " + " | ".join(present) + " |",
           "|---|---:|---:|---:|---:|" + "---:|" * len(present)]
    for target in sorted(counts):
        c = counts[target]
        divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
        new, known = tally.undocumented[target], tally.known[target]
        out.append(f"| {_cell(target)} | {sum(c.values())} | {new} | {divergent - new - known} | {known} | "
                   + " | ".join(str(c[v]) for v in present) + " |")
    return out + [""]


def _family_matrix(tally: Tally) -> list[str]:
    """Rows: reduction x log_target x value family; columns: targets; cells: passes / judged (divergences)."""
    targets = sorted(tally.by_target)
    cells = tally.by_family
    out = ["## Case families", "",
           "Each cell: passes / results judged, then divergences; `n/a` where the API cannot express the family.", "",
           "| family | reduction | log_target | " + " | ".join(_cell(t) for t in targets) + " |",
           "|---|---|---|" + "---|" * len(targets)]
    for key in sorted(cells):
        row = []
        for target in targets:
            c = cells[key][target]
            judged = sum(c.values()) - c["unsupported"]
            divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
            if not sum(c.values()):
                row.append(" ")
            elif not judged:
                row.append("n/a")
            else:
                row.append(f"{c['pass']}/{judged}" + (f" **{divergent} div**" if divergent else ""))
        out.append(f"| {_cell(key[0])} | {_cell(key[1])} | {_cell(key[2])} | " + " | ".join(row) + " |")
    return out + [""]


def _divergences(tally: Tally, manifests: Sequence[dict[str, Any]]) -> list[str]:
    groups = tally.groups
    out = ["## Divergences by cause", ""]
    if not groups:
        return out + ["No divergences: every judged result is within the spec.", ""]
    out += ["Grouped by the spec path that governs the diverging elements. Each row's `reproduce` command writes "
            "a standalone script (the framework and NumPy only) that prints the framework's result and the "
            "spec's expected value; run it in that framework's environment.", ""]
    run_info = {m.get("framework"): m for m in manifests}
    for (cause, verdict), members in sorted(groups.items(), key=lambda kv: (-tally.group_sizes[kv[0]], kv[0])):
        size = tally.group_sizes[(cause, verdict)]
        targets = sorted(tally.group_targets[(cause, verdict)])
        out += [f"### {_code(cause)}: {_cell(verdict)} ({size} results)", "",
                "Affects " + ", ".join(_code(t) for t in targets) + ".", "",
                "| case | api / device | finding | reproduce |", "|---|---|---|---|"]
        for r in sorted(members, key=lambda r: (r.case_id, r.api, r.device)):
            tags = (f" **documented** ({_cell(', '.join(r.documented_by))})" if r.documented else "") + \
                (f" **known** ({_cell(', '.join(r.known_by))})" if r.known_by else "")
            out.append(f"| {_code(r.case_id)} | {_cell(r.api)} / {_cell(r.device)}"
                       f"{'' if r.part == 'forward' else ' / ' + _cell(r.part)} | {_cell(r.message)}{tags} | "
                       f"{_code(repro_command(r, run_info.get(r.framework, {})))} |")
        if size > len(members):
            out.append(f"\n{size - len(members)} more in results.jsonl (cause {_code(cause)}, verdict {_code(verdict)}).")
        out.append("")
    return out


def _known(audit: Sequence[Any]) -> list[str]:
    """How each entry of the known-findings file fared: matched, stale, or about rows not in this report."""
    out = ["## Known findings", ""]
    if not audit:
        return out + ["The known-findings file has no entries.", ""]
    out += ["Entries of the known-findings file (--known). A stale entry concerns results here but matches none of "
            "their divergences: the run or report fails until it is removed or corrected. After a run of part of "
            "the suite it speaks about (--only, --shard, --part, --api, --device, another --seed) such an entry is "
            "`not exercised here` instead, and fails nothing.", "",
            "| entry | divergences accepted | results concerned | status | reason | link |", "|---|---:|---:|---|---|---|"]
    for a in audit:
        e = a.entry
        status = f"**{a.status}**" if a.status == "stale" else a.status
        out.append(f"| {_code(e.id)} | {a.accepted} | {a.concerned} | {status} | {_cell(e.reason)} | {_cell(e.link or '-')} |")
    return out + [""]


def _warnings(tally: Tally) -> list[str]:
    missing = tally.missing_warnings
    out = ["## Warnings", "", "Warnings are advisory (spec: warnings.policy) and never change a verdict."]
    if not missing:
        return out + ["Every warning the spec expects was given.", ""]
    out += ["", "| framework / api / device | expected warning not given | results |", "|---|---|---:|"]
    out += [f"| {_cell(t)} | {_cell(w)} | {n} |" for (t, w), n in sorted(missing.items())]
    return out + [""]


def repro_command(r: Result, run_info: dict[str, Any]) -> str:
    """The one-line command that prints a standalone script reproducing exactly this result."""
    # every value from a row is one shell word (shlex.quote) joined to its option, and the case id comes after
    # `--`: an id or path that starts with a dash is then never read as another option
    words = ["kl-conformance", "repro", f"--framework={r.framework}", f"--api={r.api}", f"--device={r.device}",
             f"--part={r.part}"]
    if r.source != "generated":
        words += [f"--cases={r.source}"]
    elif run_info.get("seed") is not None:
        words += [f"--seed={run_info['seed']}"]
    words += ["--", r.case_id]
    if r.framework == "rtorch":  # R torch's reproducer is an R script
        return " ".join(shlex.quote(w) for w in words) + " > repro.R && Rscript repro.R"
    return " ".join(shlex.quote(w) for w in words) + " > repro.py && python repro.py"


# Characters that can start HTML, an entity, a link or image, code or emphasis, or end a table cell; a backslash
# makes each one literal. Underscores stay as they are, so names such as not_run read as written.
_MARKUP = re.compile(r"([\\`*\[\]<>|&!])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x85\x0b\x0c]")


def _cell(text: object) -> str:
    """Text from a row, spec or known file as plain text in one table cell: no markup, no link, no new row."""
    return _MARKUP.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(text)))


def _code(text: object) -> str:
    """Text as one code span in a table cell, whatever backticks, bars or line breaks it holds."""
    body = _LINE_BREAKS.sub(" ", str(text)).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or body.startswith(" ") else ""
    return f"{fence}{pad}{body}{pad}{fence}"

