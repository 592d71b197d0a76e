"""Writes summary.json: verdict counts per target, the causes of the divergences and run provenance (schema:
spec/summary.schema.json); and the lines that end the output of `run` and `report` on the terminal.

Reads what a Tally gathered; never a framework or the reference.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from conformance.core.model import EAGER, FORMAT_VERSION
from conformance.core.text import terminal_line
from conformance.report.releases import release_pairs
from conformance.report.releases import summary_json as releases_json
from conformance.report.tally import Tally, split_label

SHORT_SUMMARY_CAUSES = 10  # undocumented causes named at the end of a command's output; the rest are counted


def render_summary(tally: Tally, manifests: Sequence[dict[str, Any]]) -> str:
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
                          "mode": split_label(label)["mode"], "verdicts": dict(c),
                          **({"release": split_label(label)["release"]} if "release" in split_label(label) else {})}
                    for key, (label, c) in sorted(targets.items())},
        "modes": dict(sorted(tally.modes.items())),
        "fallback": sum(tally.fallback.values()),
        "causes": [{"cause": cause, "verdict": verdict, "results": tally.group_sizes[(cause, verdict)],
                    "undocumented": tally.group_undocumented[(cause, verdict)],
                    "documented": tally.group_documented[(cause, verdict)],
                    "known": tally.group_known[(cause, verdict)],
                    "targets": dict(sorted(tally.group_spans[(cause, verdict)]["target"].items()))}
                   for cause, verdict in tally.ordered_groups()],
        "undocumented": sum(tally.undocumented.values()),
        "known": sum(tally.known.values()),
        "results": tally.total,
    }
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


def short_summary(tally: Tally, limit: int = SHORT_SUMMARY_CAUSES) -> list[str]:
    """The undocumented causes, most rows first, one line each as pytest's short summary names its failures:
    `UNDOCUMENTED <verdict> <cause>: <n> rows (<APIs>)`; past `limit`, one line counts the rest. Text from the
    rows is made one plain line (a framework's message or a doctored row may hold escape sequences)."""
    causes = [key for key in tally.ordered_groups() if tally.group_undocumented[key]]
    lines = []
    for key in causes[:limit]:
        apis = [api for api, _ in sorted(tally.group_undocumented_apis[key].items(), key=lambda kv: (-kv[1], kv[0]))]
        shown = ", ".join(_short(api, 60) for api in apis[:3]) + (f", and {len(apis) - 3} more APIs" if len(apis) > 3
                                                                  else "")
        lines.append(f"UNDOCUMENTED {_short(key[1], 20)} {_short(key[0], 120)}: {tally.group_undocumented[key]} "
                     f"rows ({shown})")
    if len(causes) > limit:
        rest = sum(tally.group_undocumented[key] for key in causes[limit:])
        lines.append(f"and {len(causes) - limit} more undocumented causes ({rest} rows): see report.md")
    return lines


def _short(text: str, limit: int) -> str:
    text = terminal_line(text)
    return text if len(text) <= limit else text[:limit] + "..."
