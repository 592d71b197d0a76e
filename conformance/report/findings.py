"""The documentation site's findings pages, one per framework, generated from the run directories of a matrix
run, so that what the site says a framework does is what a recorded run found, with that run's provenance.

    python -m conformance.report.findings RUN_DIR... --out docs/findings [--commit SHA]

The counts come from the reports' own one pass over the rows (`Tally`) and summary.json's structure
(`render_summary`), the example commands from report.md's (`repro_command`). The pages hold no time of their
own making, so the same runs always give the same pages. Text from rows and manifests goes through `sitetext`.
The pages go only into a folder of their own (core/generated.py): one holding a file this command did not write
(the site's hand-written pages), or a run directory, is refused before anything is written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from conformance.core.defects import FRAMEWORK_NAME
from conformance.core.errors import ConformanceError, ResultsError, UsageError
from conformance.core.generated import GeneratedFolder, WriteFailed
from conformance.core.model import EAGER, Verdict
from conformance.core.rundirs import iter_rows, load_manifests, released, safe_file_name
from conformance.core.scope import row_framework
from conformance.core.specload import load_spec
from conformance.report.provenance import check_runs
from conformance.report.reprocommand import Runs, repro_command
from conformance.report.runrecord import damaged, held_by_framework
from conformance.report.sitetext import code, text
from conformance.report.summary import divergence_counts, render_summary
from conformance.report.tally import Tally

COMMAND = "python -m conformance.report.findings"
INDEX = "index.md"
_PROVENANCE = (("framework_version", "version"), ("status", "status"), ("started", "started"),
               ("finished", "finished"), ("commit", "harness commit"), ("harness_version", "harness version"),
               ("python_version", "Python"), ("numpy_version", "NumPy"), ("platform", "platform"),
               ("spec_hash", "spec hash"), ("suite", "suite"), ("seed", "seed"), ("cases", "cases"))
_VERDICTS = [v.value for v in Verdict]
REDO = "run the matrix again with this harness (tox -m conformance) and generate the pages from its run directories"


def write_findings(run_dirs: Sequence[str | Path], out_dir: str | Path, commit: str | None = None) -> list[Path]:
    """Write one page per framework of the runs, and an index, into `out_dir`; return the pages written.

    `commit` is the harness's commit the runs were made at, for runs whose run.json does not record one.

    Raises
    ------
    UsageError
        when `out_dir` is not a folder of these pages' own (core/generated.py), before anything is written.
    WriteFailed
        when a page cannot be written (a full disk); every page there is whole.
    """
    folder = GeneratedFolder(out_dir, COMMAND, usual="docs/findings")
    folder.check()
    # as `report` merges them: a directory given twice, a merge beside one of its runs, rows of another spec
    check_runs(run_dirs, load_spec().hash, redo=REDO)
    present, manifests = load_manifests(run_dirs)
    several = released(manifests)  # a framework of several releases: its targets are named with the release
    tallies: dict[str, Tally] = defaultdict(lambda: Tally(released=several))
    for row in iter_rows(present):
        tallies[row.framework].add(row)
    held = {framework: counts for tally in tallies.values() for framework, counts in held_by_framework(tally).items()}
    for line in damaged(manifests, held):  # a page of a run missing rows would state counts no report shows
        raise ResultsError(line, fix=REDO)
    by_framework: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for manifest in manifests:  # by the adapter's name, which its rows carry (`framework` is what --framework said)
        by_framework[row_framework(manifest)].append(manifest)
    names = sorted(set(tallies) | set(by_framework))
    given = [_shown_dir(d) for d in run_dirs]
    pages = {page_name(name): render_framework_page(name, tallies.get(name, Tally()), by_framework.get(name, []),
                                                    given, commit) for name in names}
    pages[INDEX] = render_index(names, tallies, by_framework, given, commit)
    written = folder.write(pages)
    folder.finish()
    return written


def render_framework_page(name: str, tally: Tally, manifests: Sequence[dict[str, Any]], given: Sequence[str],
                          commit: str | None) -> str:
    summary = json.loads(render_summary(tally, manifests))
    lines = [f"# {text(name)}: findings of a matrix run", "", _generated(given, commit), "",
             "What each finding means, and the reasoning behind it, is written by hand on the "
             "[framework pages](../frameworks/index.md); this page is only what the run recorded.", ""]
    not_run = [m for m in manifests if m.get("status") == "not_run"]
    if not tally.total and manifests and len(not_run) == len(manifests):
        lines += ["## Not run", "", "No result: " + "; ".join(text(m.get("reason") or "no reason recorded")
                                                            for m in not_run) + ".", ""]
    else:
        lines += _defects(summary["defects"], tally.defects.by_id)
    lines += ["## Provenance", ""]
    lines += _provenance(manifests, commit)
    lines += ["## Results", "", f"{tally.total} results; {text(divergence_counts(tally))}.", ""]
    verdicts = [v for v in _VERDICTS if any(t["verdicts"].get(v) for t in summary["targets"].values())]
    modes = any(t.get("mode", EAGER) != EAGER for t in summary["targets"].values())
    if not summary["targets"]:
        return "\n".join(lines + ["No target was run.", ""])
    header = [f"target (framework/API/device/{'mode where not eager/' if modes else ''}part)", "results", *verdicts,
              "undocumented", "known"]
    lines += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for target, counts in summary["targets"].items():
        cells = [str(counts["verdicts"].get(v, 0)) for v in verdicts]
        lines.append(f"| {text(target)} | {counts['results']} | " + " | ".join(cells)
                     + f" | {counts['undocumented']} | {counts['known']} |")
    lines += ["", "## Divergences by cause", ""]
    if not summary["causes"]:
        return "\n".join(lines + ["No divergences.", ""])
    lines += ["Undocumented causes first, the most rows first, as report.md orders them. A cause is the spec choice "
              "whose alternative reproduces what the framework did, a named fault pattern, the rule a verdict "
              "states, or `unexplained`; **documented** rows are those the framework's profile documents.", "",
              "| # | cause | verdict | results | undocumented | documented | known |",
              "|---:|---|---|---:|---:|---:|---:|"]
    for i, c in enumerate(summary["causes"], start=1):
        lines.append(f"| {i} | {text(c['cause'])} | {text(c['verdict'])} | {c['results']} | {c['undocumented']} | "
                     f"{c['documented']} | {c['known']} |")
    lines += ["", "One example of each cause (its first undocumented row, else its first row), and the command that "
                  "prints its reproducer:", ""]
    runs = Runs(manifests)
    for i, c in enumerate(summary["causes"], start=1):
        r = tally.group_example[(c["cause"], c["verdict"])]
        lines.append(f"{i}. {text(c['cause'])} ({text(c['verdict'])}): case {code(r.case_id)}, "
                     f"{text(r.api)} on {text(r.device)}" + ("" if r.mode == EAGER else f" in mode {text(r.mode)}")
                     + f", {text(r.part)}: {code(repro_command(r, runs.of(r)))}")
    return "\n".join(lines + [""])


def _defects(defects: Sequence[dict[str, Any]], by_id: dict[str, Any]) -> list[str]:
    """The page's lead: each undocumented defect once, then one line for the accepted and the unsupported."""
    undocumented = [d for d in defects if d["status"] == "undocumented"]
    lines = [f"## {len(undocumented)} undocumented defect{'' if len(undocumented) == 1 else 's'}", ""]
    if undocumented:
        lines += ["| defect | what it does | rows | where it shows | upstream |", "|---|---|---:|---|---|"]
        for d in undocumented:
            where = "; ".join(", ".join(d[key]) for key in ("apis", "modes", "parts", "dtypes"))
            where = "; ".join(filter(None, [by_id[d["id"]].shown_on(), where]))  # on some runtimes of its release
            upstream = f"{text(d['upstream']['url'])} ({text(d['upstream']['state'])})" if d["upstream"] else "none listed"
            lines.append(f"| {code(d['id'])} | {text(d['title'])} | {d['rows']} | {text(where)} | {upstream} |")
        lines += ["", "The command that prints each one's reproducer, of its example (summary.json's `reproduce`):", ""]
        lines += [f"- {code(d['id'])}: {code(d['reproduce'])}" for d in undocumented if d.get("reproduce")]
        lines.append("")
    for status, said in (("known", "{} accepted by a known-findings file"), ("documented", "{} documented by the "
                         "profile"), ("unsupported", "API {} not offered")):
        found = [d for d in defects if d["status"] == status]
        if found:
            bases = sorted({basis for d in found if d.get("basis") for basis in d["basis"].split(", ")})
            rows = sum(d["rows"] for d in found)
            noun = ("part" if status == "unsupported" else "defect") + ("" if len(found) == 1 else "s")
            lines.append(f"- {len(found)} {said.format(noun)} ({rows} row{'' if rows == 1 else 's'})"
                         + (f"; basis: {text(', '.join(bases))}" if bases else ""))
    return lines + ([""] if lines[-1] else [])


def render_index(names: Sequence[str], tallies: dict[str, Tally], by_framework: dict[str, list[dict[str, Any]]],
                 given: Sequence[str], commit: str | None) -> str:
    lines = ["# Findings of a matrix run", "", _generated(given, commit), "",
             "One page per framework: its run's provenance, its results by target and its divergences by cause. "
             "The counts are the run's own, so they cannot drift from it; to bring them up to date, run the matrix "
             "(`tox -m conformance`) and generate the pages again from its run directories.", "",
             "| framework | version | results | divergences | undocumented | documented | known | finished |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for name in names:
        tally, manifests = tallies.get(name, Tally()), by_framework.get(name, [])
        divergent = sum(tally.group_sizes.values())
        undocumented, known = sum(tally.undocumented.values()), sum(tally.known.values())
        # each release once, in the runs' order: an eager run and a modes run of one release are one version
        versions = "; ".join(dict.fromkeys(text(m.get("framework_version") or m.get("status") or "-")
                                           for m in manifests)) or "-"
        finished = ", ".join(sorted({text(m.get("finished", "-")) for m in manifests})) or "-"
        lines.append(f"| [{text(name)}]({page_name(name)}) | {versions} | {tally.total} | {divergent} | "
                     f"{undocumented} | {divergent - undocumented - known} | {known} | {finished} |")
    return "\n".join(lines + [""])


def page_name(framework: str) -> str:
    """A framework's page: its name where that is a plain lowercase word, else a safe name made from it (a name
    from a run directory never becomes a path)."""
    return f"{framework}.md" if FRAMEWORK_NAME.fullmatch(framework) else safe_file_name([framework], ".md")


def _generated(given: Sequence[str], commit: str | None) -> str:
    command = " ".join([COMMAND, "RUN_DIR...", "--out", "docs/findings"] + (["--commit", commit] if commit else []))
    return (f"Generated by {code(command)} from the run directories {', '.join(code(g) for g in given)} (each "
            "run's version and time are in its framework page's provenance); do not edit it by hand, generate it "
            "again.")


def _provenance(manifests: Sequence[dict[str, Any]], commit: str | None) -> list[str]:
    if not manifests:
        return ["No run manifest (run.json) was found for this framework.", ""]
    out = ["| | " + " | ".join(f"run {i}" for i in range(1, len(manifests) + 1)) + " |",
           "|---|" + "---|" * len(manifests)]
    for key, label in _PROVENANCE:
        values = [m.get(key) if key != "commit" else (m.get("commit") or commit or "not recorded") for m in manifests]
        values = [v if v is not None else "-" for v in values]
        out.append(f"| {label} | " + " | ".join(text(v) for v in values) + " |")
    targets = ["; ".join(str(t) for t in m.get("targets") or []) or "-" for m in manifests]
    out.append("| targets | " + " | ".join(text(t) for t in targets) + " |")
    return out + [""]


def _shown_dir(run_dir: str | Path) -> str:
    """A run directory as the page names it: its last component only (the machine's own paths stay off the
    page, so the pages do not change with where the runs were copied)."""
    return Path(run_dir).name or str(run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the documentation site's findings pages, one "
                                     "per framework, from the run directories of a matrix run.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run's --out directory, or a merged report's")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the pages go, e.g. docs/findings")
    parser.add_argument("--commit", metavar="SHA", help="the harness commit the runs were made at, for runs whose "
                        "run.json does not record one")
    args = parser.parse_args(argv)
    try:
        if args.commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", args.commit):
            raise UsageError(f"{args.commit!r} is not a commit hash", where="--commit",
                             fix="pass the hash of the commit the runs were made at (7 to 40 hex digits)")
        written = write_findings(args.run_dirs, args.out, args.commit)
    except ConformanceError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2
    except WriteFailed as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 3
    print(f"wrote {len(written)} pages into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
