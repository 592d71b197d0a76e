"""Writes summary.json: verdict counts per target, the causes of the divergences and run provenance (schema:
spec/summary.schema.json); and the lines that end the output of `run` and `report` on the terminal.

Reads what a Tally gathered; never a framework or the reference.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from conformance.core.model import EAGER, FORMAT_VERSION, Result
from conformance.core.text import terminal_line
from conformance.report.defects import DOCUMENTED, KNOWN, UNDOCUMENTED, UNSUPPORTED, shown, title
from conformance.report.drafts import ISSUES_DIR, draft_name
from conformance.report.releases import release_pairs
from conformance.report.releases import summary_json as releases_json
from conformance.report.reprocommand import Runs, repro_command
from conformance.report.tally import Tally, split_label

SHORT_SUMMARY_DEFECTS = 20  # undocumented defects named at the end of a command's output; the rest are counted


def render_summary(tally: Tally, manifests: Sequence[dict[str, Any]], decision: dict[str, Any] | None = None,
                   shared_drafts: bool = False) -> str:
    """summary.json's text; `decision` is what the gates decided (report/gate.py: Decision.to_json);
    `shared_drafts`: the drafts of a port's shared defects are written too (drafts.write_drafts)."""
    targets = {_target_key(label): (label, counts) for label, counts in tally.by_target.items()}
    summary = {
        "format_version": FORMAT_VERSION,
        "spec_hash": sorted(tally.spec_hashes)[0] if tally.spec_hashes else None,
        "runs": [{k: m.get(k) for k in ("framework", "framework_version", "status", "reason", "cases", "seed",
                                        "shard", "python_version", "numpy_version", "harness_version", "modes",
                                        "modes_not_run", "apis_not_run", "notes")}
                 for m in manifests],
        "targets": {key: {"results": sum(c.values()), "undocumented": tally.undocumented[label],
                          "known": tally.known[label], "fallback": tally.fallback[label],
                          "refused": tally.refused[label],
                          "mode": split_label(label)["mode"], "verdicts": dict(c),
                          **({"release": split_label(label)["release"]} if "release" in split_label(label) else {})}
                    for key, (label, c) in sorted(targets.items())},
        "modes": dict(sorted(tally.modes.items())),
        "fallback": sum(tally.fallback.values()),
        "refused": sum(tally.refused.values()),
        "causes": [{"cause": cause, "verdict": verdict, "results": tally.group_sizes[(cause, verdict)],
                    "undocumented": tally.group_undocumented[(cause, verdict)],
                    "documented": tally.group_documented[(cause, verdict)],
                    "known": tally.group_known[(cause, verdict)],
                    "targets": dict(sorted(tally.group_spans[(cause, verdict)]["target"].items()))}
                   for cause, verdict in tally.ordered_groups()],
        "defects": defects_json(tally, manifests, shared_drafts),
        "undocumented": sum(tally.undocumented.values()),
        "known": sum(tally.known.values()),
        "results": tally.total,
    }
    if decision is not None:
        summary["decision"] = decision
    pairs = release_pairs(tally)
    if pairs:  # a report of one release per framework reads as before releases were set side by side
        summary["releases"] = releases_json(pairs)
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def _target_key(label: str) -> str:
    """summary.json's name of a target: framework/api/device/part, with /mode before the part where the mode is
    not eager (an eager run's names are those of the runs made before modes existed), and @release after the
    framework where the report holds several releases of it."""
    pieces = split_label(label)
    release = f"@{pieces['release'].replace('/', '_')}" if pieces.get("release") else ""
    return "/".join([pieces["framework"] + release, pieces["api"], pieces["device"],
                     *([] if pieces["mode"] == EAGER else [pieces["mode"]]), pieces["part"]])


def divergence_counts(tally: Tally) -> str:
    """How many divergences, and how many of them are undocumented, documented and known."""
    divergent = sum(tally.group_sizes.values())
    undocumented, known = sum(tally.undocumented.values()), sum(tally.known.values())
    return (f"{divergent} divergences: {undocumented} undocumented, {divergent - undocumented - known} documented, "
            f"{known} known")


def defects_json(tally: Tally, manifests: Sequence[dict[str, Any]],
                 shared_drafts: bool = False) -> list[dict[str, Any]]:
    """summary.json's `defects`: each defect once, as the reports list them, with its draft where one is written."""
    spec = tally.spec()
    tally.defects.record_bases(manifests)
    runs, found = Runs(manifests), []
    for d in tally.defects.ordered():
        r = d.example
        found.append({
            "id": d.id, "framework": d.framework, "release": d.release, "versions": sorted(d.versions),
            "status": d.status,
            "basis": tally.defects.basis(d),
            "title": title(d, spec), "cause": d.cause, "verdicts": dict(sorted(d.verdicts.items())), "rows": d.rows,
            "apis": sorted(d.apis), "modes": sorted(d.modes), "parts": sorted(d.parts), "dtypes": sorted(d.dtypes),
            "documented_by": list(d.documented_by), "like": d.like,
            "example": {"case_id": r.case_id, "api": r.api, "mode": r.mode, "part": r.part, "device": r.device},
            "reproduce": repro_command(r, _run_info(runs, r)),
            "draft": (f"{ISSUES_DIR}/{draft_name(d.id)}" if d.status == UNDOCUMENTED
                      and (shared_drafts or d.like != "shared") else None),
            "upstream": _upstream_json(tally.defects.upstream(d))})
    return found


def _upstream_json(issue) -> dict[str, Any] | None:
    return None if issue is None else {"url": issue.url, "state": issue.state, "title": issue.title,
                                       "fixed_in": issue.fixed_in}


def _run_info(runs: Runs, r: Result) -> dict[str, Any]:
    """What repro_command reads of the run that wrote `r`: its run.json, with the row's own seed."""
    return {**runs.of(r), **({"seed": r.seed} if r.seed is not None else {})}


def short_summary(tally: Tally, runs: Runs, limit: int = SHORT_SUMMARY_DEFECTS, accepted: bool = True) -> list[str]:
    """The defects, as a command's output ends: "N undocumented defects", then one line each (its id, plain
    title, rows, where it shows, the command that reproduces it), most rows first; past `limit`, one line counts
    the rest; then (with `accepted`) one line for what is accepted (documented, known) and one for what is
    unsupported. Text from the rows is made one plain line (a framework's message or a doctored row may hold escape
    sequences)."""
    spec = tally.spec()
    undocumented = tally.defects.ordered(UNDOCUMENTED)
    if not tally.defects.by_id:
        return []
    lines = [f"{len(undocumented)} undocumented defect{'' if len(undocumented) == 1 else 's'}"
             + (f" ({sum(d.rows for d in undocumented)} rows):" if undocumented else "")]
    for d in undocumented[:limit]:
        issue = tally.defects.upstream(d)
        lines.append(f"UNDOCUMENTED {d.id}: {_short(title(d, spec), 200)} [{d.rows} rows; {_short(d.where(), 200)}] "
                     + f"e.g. {_short(shown(d.example), 300)}; "
                     + (f"upstream: {_short(issue.url, 200)} ({issue.state}) " if issue is not None else "")
                     + f"reproduce: {_short(repro_command(d.example, _run_info(runs, d.example)), 2000)}")
    if len(undocumented) > limit:
        rest = undocumented[limit:]
        lines.append(f"and {len(rest)} more undocumented defects ({sum(d.rows for d in rest)} rows): see report.md")
    if not accepted:
        return lines
    counts = [(status, *tally.defects.count(status)) for status in (DOCUMENTED, KNOWN)]
    lines.append("accepted: " + "; ".join(f"{n} {status} defect{'' if n == 1 else 's'} ({rows} rows)"
                                          for status, n, rows in counts))
    n, rows = tally.defects.count(UNSUPPORTED)
    lines.append(f"unsupported: {n} API part{'' if n == 1 else 's'} not offered ({rows} rows)")
    return lines


def _short(text: str, limit: int) -> str:
    text = terminal_line(text)
    return text if len(text) <= limit else text[:limit] + "..."
