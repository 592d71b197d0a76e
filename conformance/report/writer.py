"""Writes the reports of one or more run directories, including runs made on other machines.

Reads only results.jsonl and run.json files; merging N runs gives the same report
as one run that produced all of their rows.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from conformance.core.errors import UsageError
from conformance.core.known import KnownFindings
from conformance.core.model import EAGER, Result
from conformance.core.atomicfile import AtomicLines, write_atomic, write_lines_atomic
from conformance.core.details import DETAILS_FILE, detail_matcher, iter_details
from conformance.core.results import RESULTS_FILE
from conformance.core.rundirs import (DIVERGENCES_FILE, REPORT_FILE, REPORT_FILES, RUNS_FILE, iter_rows, load_manifests,
                                      released)
from conformance.core.scope import Scope
from conformance.report.baseline import BaselineComparison, BaselineDiff, render_baseline_markdown
from conformance.report.defects import Defects
from conformance.report.drafts import write_drafts
from conformance.report.gate import Decision, Gates, damaged_decision, decide, junit_view
from conformance.report.html import render_html
from conformance.report.junit import JunitWriter
from conformance.report.like import LikeMarks, summary_json
from conformance.report.markdown import render_divergences, render_markdown, wanted_details
from conformance.report.runrecord import damaged
from conformance.report.reprocommand import Runs
from conformance.report.summary import divergence_counts, render_summary, short_summary
from conformance.report.tally import Tally




@dataclass
class Written:
    """What a report wrote: the path of report.md, the comparison with the baseline (if one was given), how
    many results it reports, the gates' decision (exit code and lines; junit.xml agrees with it), and the lines
    that end the command's output (report.summary.short_summary: the undocumented causes and the counts)."""

    report: Path
    baseline: BaselineDiff | None = None
    results: int = 0
    decision: Decision = dataclass_field(default_factory=Decision)
    summary: list[str] = dataclass_field(default_factory=list)
    counts: str = ""
    defects: Defects | None = None  # the rows' defects, as the reports show them: a run's drafts reuse them


def write_report(out_dir: Path, run_dirs: Sequence[str | Path], allow_missing: bool = False,
                 baseline: str | Path | None = None, known: KnownFindings | None = None,
                 fed: "ReportFeed | None" = None, gates: Gates = Gates(), drafts: bool = True,
                 like: LikeMarks | None = None, shared_drafts: bool = False) -> Written:
    """Write report.md, report.html, junit.xml and summary.json for the run directories into `out_dir`.

    One pass over the rows gathers what the Markdown, HTML and summary show (and, with `known`, a
    KnownFindings, how each of its entries fared; with `baseline`, how each row compares) and writes
    junit.xml (one element per row, as the `gates` see it). Each file is written atomically. `fed` is that
    pass already made, as a run wrote its rows into `out_dir` (its own report): then no row is read back.
    With `drafts`, the issue drafts too (a run writes them itself once its reproducers exist, to quote them).
    `like` marks a port's findings (report/like.py; a fed pass brings its own); with `shared_drafts`, the drafts
    of the defects a port shares with the recorded run are written too (drafts.write_drafts).
    """
    present, manifests = load_manifests(run_dirs, allow_missing)
    if fed is None:
        rows = iter_rows(present)
        if like is not None and like.marking:  # the rows as marked (a run has written its marks already)
            like.prepare(present)
            rows = (like.mark(row) for row in rows)
        fed = _fed(ReportFeed(out_dir, known, baseline, gates, like, released(manifests)), rows)
    tally, diff, decision = fed.finish(manifests)
    if fed.like is not None:
        fed.like.finish(present)
    return _write_reports(out_dir, tally, present, manifests, diff, known, decision, drafts, fed.like,
                          shared_drafts)


class ReportFeed:
    """The report's one pass over the rows (the tally, junit.xml, and with `known` how each of its entries
    fared), a row at a time: `add` each row in results.jsonl's order. A run feeds it as it writes its rows,
    so its own report reads none of them back. junit.xml's parts wait in a temporary directory beside it,
    created with the first row (the run's directory is prepared only then). With `baseline`, each row is
    compared as it comes, so junit.xml shows it as the `gates` judge it. `released` names the frameworks the rows
    hold two releases or more of (rundirs.released): their targets and tests are named with the release."""

    def __init__(self, out_dir: Path, known: KnownFindings | None = None, baseline: str | Path | None = None,
                 gates: Gates = Gates(), like: LikeMarks | None = None,
                 released: frozenset[str] = frozenset()) -> None:
        self.out_dir, self.known, self.gates, self.like = out_dir, known, gates, like
        self.released = released
        self._tally = Tally(released=released)
        self._junit: JunitWriter | None = None
        self._baseline = BaselineComparison(baseline) if baseline is not None else None
        if known is not None:
            known.start_audit()

    def add(self, row: Result) -> None:
        kind = self._baseline.add(row) if self._baseline is not None else None
        self._writer().add(row, junit_view(self.gates, row, kind))
        if self.known is not None:
            self.known.audit_row(row)
        if self.like is not None:
            self.like.add(row)
        self._tally.add(row)

    def finish(self, manifests: Sequence[dict[str, Any]], broken: Sequence[str] = (), merged: bool = False
               ) -> tuple[Tally, BaselineDiff | None, Decision]:
        """Judge the runs' selection (`manifests`), decide the gates, and write junit.xml with each failed
        gate as a failing test (with no row, a document of that alone); the tally for the other reports.
        `broken`: lines of runs found damaged before their rows were cut to some modes (gate.damaged); `merged`: a
        report's merge, gated as a whole (gate.decide)."""
        scope = Scope.of(manifests)
        try:
            diff = self._baseline.finish(scope) if self._baseline is not None else None
        except BaseException:
            self.discard()
            raise
        if self.known is not None:
            self.known.judge_scope(scope)
        decision = damaged_decision(self.gates, list(broken)) if broken else \
            decide(self.gates, self._tally, manifests, diff, self.known, merged=merged)
        writer = self._writer()
        writer.add_gate(decision.named())
        writer.close()
        self._junit = None
        return self._tally, diff, decision

    def _writer(self) -> JunitWriter:
        if self._junit is None:
            self._junit = JunitWriter(self.out_dir / "junit.xml", self.released)
        return self._junit

    def discard(self) -> None:
        """Drop junit.xml's parts (the run ended on an error: nothing is reported from here)."""
        if self._junit is not None:
            self._junit.close(write=False)
            self._junit = None


def _fed(feed: "ReportFeed", rows: Iterator[Result]) -> "ReportFeed":
    """The one pass over the rows read from disk: the tally, and junit.xml written as the rows go by."""
    try:
        for row in rows:
            feed.add(row)
    except BaseException:
        feed.discard()
        raise
    return feed


def _write_reports(out_dir: Path, tally: Tally, present: Sequence[Path], manifests: list[dict[str, Any]],
                   diff: BaselineDiff | None, known: KnownFindings | None, decision: Decision, drafts: bool = True,
                   like: LikeMarks | None = None, shared_drafts: bool = False) -> Written:
    """Everything written from the tally: summary.json, report.html (with the details of `present`),
    divergences.md, report.md (with the details of its worked examples) and, with a baseline, baseline.json."""
    summary = render_summary(tally, manifests, decision.to_json(), shared_drafts)
    write_atomic(out_dir / "summary.json", summary_json(summary, like))
    pick, examples, wanted = _example_picker(tally)  # report.md's worked examples, as the page reads the details
    details = (d for run_dir in present for d in iter_details(run_dir))
    page = render_html(tally, manifests, _feeding(pick, details))
    if like is not None:  # the port's marks, before the page's end
        head, end, tail = page.rpartition("</body>")
        page = head + like.html() + end + tail if end else page + like.html()
    write_atomic(out_dir / "report.html", page)
    if diff is not None:
        write_atomic(out_dir / "baseline.json", diff.to_json())
    write_atomic(out_dir / DIVERGENCES_FILE,
                 render_divergences(tally, manifests, render_baseline_markdown(diff) if diff is not None else ()))
    markdown = render_markdown(tally, manifests, known.audit() if known is not None else None,
                               examples=examples if len(examples) == wanted else _examples(tally, present),
                               baseline=render_baseline_markdown(diff, listed=10) if diff is not None else ())
    if like is not None:
        markdown = markdown.rstrip("\n") + "\n" + "\n".join(like.markdown()) + "\n"
    path = out_dir / REPORT_FILE
    write_atomic(path, markdown)
    if drafts:
        write_drafts(out_dir, present, manifests, known, shared=shared_drafts)
    lines = short_summary(tally, Runs(manifests)) + ([like.terminal_line()] if like is not None else [])
    return Written(path, diff, tally.total, decision, lines, divergence_counts(tally), tally.defects)


def _example_picker(tally: Tally) -> tuple[Callable[[dict[str, Any]], None], dict[tuple, dict[str, Any]], int]:
    """(pick, found, wanted): `pick` keeps in `found` each detail that is one of report.md's `wanted` worked
    examples, the first of each."""
    wanted = wanted_details(tally)
    match = detail_matcher(wanted) if wanted else None
    found: dict[tuple, dict[str, Any]] = {}

    def pick(d: dict[str, Any]) -> None:
        key = match(d) if match is not None else None
        if key is not None and key not in found:
            found[key] = d
    return pick, found, len(wanted)


def _examples(tally: Tally, present: Sequence[Path]) -> dict[tuple, dict[str, Any]]:
    """The details of report.md's worked examples, read from details.jsonl until each is found."""
    pick, found, wanted = _example_picker(tally)
    for d in (d for run_dir in present for d in iter_details(run_dir)) if wanted else ():
        pick(d)
        if len(found) == wanted:
            break
    return found


def _feeding(consume: Callable[[Result], Any], rows: Iterator[Result]) -> Iterator[Result]:
    """The rows, each also given to `consume` as it goes by: several outputs share one read of the rows."""
    for row in rows:
        consume(row)
        yield row


def merge_runs(run_dirs: Sequence[str | Path], out_dir: Path, allow_missing: bool = False,
               baseline: str | Path | None = None, known: KnownFindings | None = None, gates: Gates = Gates(),
               like: LikeMarks | None = None, modes: Sequence[str] = (), shared_drafts: bool = False) -> Written:
    """Merge run directories into `out_dir`: results.jsonl (with `known`, its rows' known_by set by that
    file), details.jsonl, runs.json and the reports. `out_dir` must not be one of the runs. With `modes`
    (`report --mode`), the rows of the other modes are left out, and runs.json records each run as selecting
    those modes only (a baseline's rows of the other modes are then not checked, and a known entry of them is
    not stale); one line of the decision's notes says what was left out.

    The merged rows are written in the same pass that tallies them and writes junit.xml, so the runs'
    rows are read once here (`report` has read them once before, to check they can be merged)."""
    check_out_outside(out_dir, [("one of the runs to merge", run) for run in run_dirs])
    present, manifests = load_manifests(run_dirs, allow_missing)
    left_out: Counter = Counter()
    whole, held = manifests, {}  # the runs as they ran, and every row of them by framework and verdict
    if modes:
        manifests = [scoped_manifest(m, modes) for m in manifests]
    # runs.json first: it records what the merge writes here (`written`), so that a later --force removes
    # those files and nothing else, even after a merge cut short
    written = [RESULTS_FILE, DETAILS_FILE, RUNS_FILE, *REPORT_FILES, *(["baseline.json"] if baseline else [])]
    write_atomic(out_dir / RUNS_FILE, json.dumps({"runs": manifests, "written": sorted(written)}, indent=2,
                                                 sort_keys=True) + "\n")
    rows = iter_rows(present)
    if like is not None and like.marking:  # the marks first: the merged rows carry them
        like.prepare(present)
        rows = (like.mark(row) for row in rows)
    if modes:
        rows = _in_modes(rows, set(modes), left_out, held)
    rows = (known.mark(r) for r in rows) if known is not None else rows
    with AtomicLines(out_dir / RESULTS_FILE) as results:
        feed = _fed(ReportFeed(out_dir, known, baseline, gates, like, released(manifests)),
                    _feeding(lambda row: results.write(row.to_json() + "\n"), rows))
    write_lines_atomic(out_dir / DETAILS_FILE, (json.dumps(d) + "\n" for p in present for d in iter_details(p)
                                                if not modes or d.get("mode", EAGER) in modes))
    _, merged = load_manifests([out_dir])  # as a later `report` of this directory reads them
    # a run is damaged or whole as it ran, whatever modes are kept here: the cut is checked on every row
    tally, diff, decision = feed.finish(merged, damaged(whole, held) if modes else (), merged=True)
    if left_out:
        decision.notes.append(f"--mode {', '.join(dict.fromkeys(modes))}: {sum(left_out.values())} results of "
                              f"the modes {', '.join(sorted(left_out))} left out of this report")
    if like is not None:
        like.finish([out_dir])
    return _write_reports(out_dir, tally, [out_dir], merged, diff, known, decision, like=like,
                          shared_drafts=shared_drafts)


def check_out_outside(out_dir: str | Path, inputs: Sequence[tuple[str, str | Path]]) -> None:
    """Refuse an --out that is one of the report's input directories or lies inside one (a merge would write
    its results beside a run's, or inside it, where a later report of that run would read them back).

    `inputs` are (what the input is, its path), e.g. ("one of the runs to merge", "runs/torch").

    Raises
    ------
    UsageError
        naming --out and the input it is, or lies inside.
    """
    out = Path(out_dir).resolve()
    for what, given in inputs:
        source = Path(given).resolve()
        if source == out or source in out.parents:
            raise UsageError("the output directory is " + (what if source == out else f"inside {given}, {what}"),
                             file=str(out_dir), where="--out",
                             fix="write into a directory outside every run the command reads")


def check_modes(manifests: Sequence[dict[str, Any]], modes: Sequence[str]) -> None:
    """Every mode `report --mode` names is one a run asked for (a run.json older than modes ran eager).

    Raises
    ------
    UsageError
        naming the mode and the modes the runs hold.
    """
    held = sorted({str(m) for manifest in manifests for m in manifest.get("modes") or [EAGER]})
    for mode in modes:
        if mode not in held:
            raise UsageError(f"no run here was made in mode {mode!r}", where="--mode",
                             fix=f"name one of the modes the runs hold: {held}")


def scoped_manifest(manifest: dict[str, Any], modes: Sequence[str]) -> dict[str, Any]:
    """A run's manifest as a report scoped to `modes` records it: its targets, modes and modes not run of those
    modes only, and --mode among the options that narrowed its selection where a mode was left out."""
    kept = dict(manifest)
    asked = [str(m) for m in manifest.get("modes") or [EAGER]]
    kept["modes"] = [m for m in asked if m in modes]
    if isinstance(manifest.get("targets"), list):
        kept["targets"] = [t for t in manifest["targets"] if _target_mode(str(t)) in modes]
    if isinstance(manifest.get("modes_not_run"), dict):
        kept["modes_not_run"] = {m: why for m, why in manifest["modes_not_run"].items() if m in modes}
        if not kept["modes_not_run"]:
            del kept["modes_not_run"]
    selection = manifest.get("selection")
    if set(asked) - set(modes):  # its counts are of every mode: no claim on the rows kept (gate.damaged)
        kept.pop("counts", None)
        kept.pop("cases", None)
    if isinstance(selection, dict) and set(asked) - set(modes):
        kept["selection"] = {**selection, "modes": kept["modes"],
                             "narrowed_by": sorted({*map(str, selection.get("narrowed_by") or ()), "--mode"})}
    return kept


def _target_mode(target: str) -> str:
    """The mode of a run.json target: framework/api/device (eager) or framework/api/device/mode."""
    pieces = target.split("/")
    return pieces[3] if len(pieces) > 3 else EAGER


def _in_modes(rows: Iterator[Result], modes: set[str], left_out: Counter,
              held: dict[str, Counter]) -> Iterator[Result]:
    """The rows of `modes`; the others counted by mode in `left_out`; every row by framework and verdict in `held`."""
    for row in rows:
        held.setdefault(row.framework, Counter())[row.verdict.value] += 1
        if row.mode in modes:
            yield row
        else:
            left_out[row.mode] += 1
