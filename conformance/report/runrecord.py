"""What a run's own record (run.json) claims of its rows, against the rows: a damaged run (its rows disagree with
its counts: a selected case or call lost its rows) and one whose record states too little to tell. The gates
refuse the first and fail closed on the second (gate.py); `report --mode` checks the runs whole before it
keeps some modes (writer.merge_runs). Reads manifests and counts only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from conformance.core.scope import row_framework
from conformance.report.tally import Tally, split_label


def held_by_framework(tally: Tally) -> dict[str, Counter]:
    """The rows a tally holds, by framework and verdict: what `damaged` compares with the runs' counts."""
    held: dict[str, Counter] = {}
    for label, counts in tally.by_target.items():
        held.setdefault(split_label(label)["framework"], Counter()).update(counts)
    return held


def damaged(manifests: Sequence[dict[str, Any]], held: dict[str, Counter]) -> list[str]:
    """One line per framework whose rows (`held`, by framework and verdict) disagree with what its runs' run.json
    files count: their results by verdict, or more cases with results than rows. Judged where every run of the
    framework recorded its rows' framework name, counts and stages (a run.json older than the stage record
    counted a resumed run's last command only) and ended `complete` or `stopped`; `report --mode` judges the runs
    whole, before it leaves rows out (writer.merge_runs)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for m in manifests:
        runs.setdefault(row_framework(m), []).append(m)
    lines = []
    for framework, group in sorted(runs.items()):
        if not all(_counted(m) for m in group):
            continue
        claimed: Counter = Counter()
        for m in group:
            claimed.update(m["counts"])
        claimed = +claimed  # a verdict counted 0 times is no claim
        rows = +held.get(framework, Counter())
        cases = sum(m["cases"] for m in group)
        if claimed == rows and cases <= sum(rows.values()):
            continue
        files = "run.json" if len(group) == 1 else f"the run.json files of its {len(group)} runs"
        verb = "counts" if len(group) == 1 else "count"
        lines.append(f"the {framework} run is damaged: {files} {verb} {cases} case{'' if cases == 1 else 's'} with "
                     f"{sum(claimed.values())} results ({_verdicts(claimed)}), its results.jsonl holds "
                     f"{sum(rows.values())} ({_verdicts(rows)}): selected cases or calls are missing their rows; "
                     "run it again (--force)")
    return lines


def _counted(manifest: dict[str, Any]) -> bool:
    """The run.json records what its rows must hold: the framework name they carry, its counts and cases, and
    (being of a harness that keeps them whole across --resume) its stages."""
    return manifest.get("status") in ("complete", "stopped") and _has_counts(manifest) \
        and isinstance(manifest.get("stages"), list) and names_rows(manifest)


def _has_counts(manifest: dict[str, Any]) -> bool:
    """The run.json counts its results by verdict and the cases they cover, as a run writes them as it ends."""
    return isinstance(manifest.get("counts"), dict) and type(manifest.get("cases")) is int


def unrecorded(manifests: Sequence[dict[str, Any]], totals: Counter) -> list[str]:
    """What the runs' own record does not state, so that no gate can tell whether rows are missing: rows of a
    framework whose run has no run.json, and a finished run.json without its counts (a run writes them as it
    ends; a report scoped by --mode drops them on purpose, and says so in its selection)."""
    lines = []
    if all(names_rows(m) for m in manifests):  # runs that name their rows' framework: each must have one
        named = {row_framework(m) for m in manifests}
        lines += [f"the {framework} results have no run.json: what their run selected and counted is unknown"
                  for framework in sorted(totals) if framework not in named]
    for m in manifests:
        selection = m.get("selection") if isinstance(m.get("selection"), dict) else {}
        scoped = "--mode" in (selection.get("narrowed_by") or ())
        finished = m.get("status") in ("complete", "stopped")
        if finished and not scoped and not _has_counts(m):
            lines.append(f"the {m.get('framework', '?')} run.json records no counts of its results: whether rows "
                         "are missing cannot be told")
    return lines


def _verdicts(counts: Counter) -> str:
    return ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())) or "none"


def names_rows(manifest: dict[str, Any]) -> bool:
    """The manifest records the framework name its rows carry (a run.json older than that may not)."""
    return isinstance(manifest.get("selection"), dict) and "adapter" in manifest["selection"]
