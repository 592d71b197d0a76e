"""A port judged like a framework (`--like`, `--like-run`): which of its findings that framework's profile
documents, and, given a recorded run of that framework, which it shares with the framework's observed
behaviour and which are its own.

A port's divergence is documented by the framework's profile when its documented_by names one of that
profile's deviations ("<framework>:<id>", as the run's --like or the port profile's extends: gave it). It is
shared when the recorded run has a divergence of the same case on the API the port's API mirrors, on the same
device and part, with the same verdict and cause, and an observation that agrees within the port's bound (the
same exception type for a raise; for values, the previews details.jsonl keeps). Each such row carries its mark
(`like`: shared or own); a run's results.jsonl is written again with them once all its rows are there. Reads
rows and details; never a framework or the reference.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from conformance.core.model import Result
from conformance.core.atomicfile import write_lines_atomic
from conformance.core.details import DETAIL_KEYS, iter_details
from conformance.core.results import RESULTS_FILE, iter_results
from conformance.core.rundirs import iter_rows
from conformance.core.text import terminal_line


MARKS = ("shared", "own")


class LikeMarks:
    """Marks a port's rows: `add` each row (adding a row again is harmless), then `finish` compares the
    divergences with the recorded run once; `mark` gives a row carrying its mark (`like`)."""

    def __init__(self, framework: str, like_run: str | Path | None = None,
                 mirrors: dict[str, dict[str, str]] | None = None) -> None:
        self.framework, self.like_run = framework, Path(like_run) if like_run is not None else None
        self.mirrors = mirrors or {}  # port framework -> {its API: the API of `framework` it mirrors}
        self.counts: dict[str, int] = {}
        self._candidates: dict[tuple, Result] = {}  # a port's divergent row's key -> the row, in the rows' order
        self.marks: dict[tuple, str] = {}  # a port row's key -> "shared" or "own"

    @property
    def marking(self) -> bool:
        """Whether rows are marked shared or own (a recorded run was given)."""
        return self.like_run is not None

    def add(self, row: Result) -> None:
        if row.framework != self.framework and row.verdict.is_divergence:
            self._candidates[row.key] = row

    def keep(self, rows: Iterable[Result]) -> None:
        """Take the marks rows carry as their run gave them: the rows of a run whose details are gone (an API
        run without an output directory), which could not be compared again."""
        self.marks.update((row.key, row.like) for row in rows if row.like in MARKS and row.framework != self.framework)

    def mirrored(self, row: Result) -> tuple[str, str, str, str, str]:
        """The call of the framework it is judged like that a port's row mirrors: (case, api, device, mode, part)."""
        return (row.case_id, self.mirrors.get(row.framework, {}).get(row.api, row.api), row.device, row.mode,
                row.part)

    def finish(self, port_dirs: Sequence[Path]) -> None:
        """Count the port's divergences, and compare those not marked yet with the recorded run's (with one)."""
        rows = self._candidates.values()
        self.counts = {"divergences": len(rows),
                       "documented_by_like": sum(any(d.startswith(self.framework + ":") for d in r.documented_by)
                                                 for r in rows),
                       "undocumented": sum(not r.is_accepted for r in rows)}
        if self.like_run is None:
            return
        self._compare(port_dirs, [r for key, r in self._candidates.items() if key not in self.marks])
        for mark in MARKS:
            self.counts[mark] = sum(self.marks[key] == mark for key in self._candidates)
            self.counts[f"{mark}_undocumented"] = sum(self.marks[key] == mark and not r.is_accepted
                                                      for key, r in self._candidates.items())

    def _compare(self, port_dirs: Sequence[Path], rows: Sequence[Result]) -> None:
        if not rows:
            return
        theirs = {r.call: r for r in iter_results(self.like_run)
                  if r.framework == self.framework and r.verdict.is_divergence}
        alike = {row.key: theirs[self.mirrored(row)] for row in rows if self.mirrored(row) in theirs
                 and (theirs[self.mirrored(row)].verdict, theirs[self.mirrored(row)].cause) == (row.verdict, row.cause)}
        details = _details(port_dirs, set(alike))
        their_details = _details([self.like_run], {r.key for r in alike.values()})
        for row in rows:
            other = alike.get(row.key)
            same = other is not None and _same_observation(details.get(row.key), their_details.get(other.key))
            self.marks[row.key] = "shared" if same else "own"

    def mark(self, row: Result) -> Result:
        """The row as results.jsonl keeps it: with its mark where `finish` gave it one, else as it came."""
        mark = self.marks.get(row.key)
        return row if mark is None or mark == row.like else replace(row, like=mark)

    def prepare(self, run_dirs: Sequence[Path]) -> None:
        """Mark the divergences of `run_dirs` not marked yet, before a report reads them (one pass over the rows,
        then the details of the divergences alone); `add` and `finish` then count what the report holds."""
        if self.like_run is not None:
            self._compare(run_dirs, [row for row in iter_rows(run_dirs) if row.framework != self.framework
                                     and row.verdict.is_divergence and row.key not in self.marks])

    def write_marks(self, run_dir: Path) -> None:
        """Mark a run's rows and write its results.jsonl again, whole, with each divergent row's mark: a run's
        rows are written as judged, the marks once every row is there (so a resumed run's are marked too)."""
        if self.like_run is None or not (run_dir / RESULTS_FILE).is_file():
            return
        self.prepare([run_dir])
        write_lines_atomic(run_dir / RESULTS_FILE, (self.mark(row).to_json() + "\n" for row in iter_results(run_dir)))

    def own(self) -> list[Result]:
        """Every row that is the port's own, undocumented first, in the rows' order."""
        own = [r for key, r in self._candidates.items() if self.marks.get(key) == "own"]
        return sorted(own, key=lambda r: r.is_accepted)

    def summary(self) -> dict[str, Any]:
        """summary.json's `like` object."""
        return {"framework": self.framework, "like_run": str(self.like_run) if self.like_run else None,
                **self.counts}

    def terminal_line(self) -> str:
        """One line for the end of `run` and `report`: what the framework's profile documents, shared and own."""
        c = self.counts
        line = f"LIKE {terminal_line(self.framework)}: {c['documented_by_like']} of {c['divergences']} divergences " \
               f"documented by its profile"
        if self.like_run is not None:
            line += f"; {c['shared']} shared with its recorded run, {c['own']} the port's own " \
                    f"({c['own_undocumented']} undocumented)"
        return line

    def markdown(self) -> list[str]:
        c = self.counts
        out = ["", f"## Judged like {_md(self.framework)}", "",
               f"The port's divergences are judged against the spec as amended by {_md(self.framework)}'s profile "
               f"(`--like`): {c['divergences']} divergences, {c['documented_by_like']} of them documented by that "
               f"profile, {c['undocumented']} undocumented."]
        if self.like_run is not None:
            out += ["", f"Compared with the recorded run of {_md(self.framework)} (`--like-run`): {c['shared']} "
                        f"divergences the port shares with it ({c['shared_undocumented']} undocumented), "
                        f"{c['own']} its own ({c['own_undocumented']} undocumented). Each divergent row of "
                        f"results.jsonl says which (`like`)."]
            own = self.own()
            if own:
                out += ["", "Its own divergences, undocumented first:", "",
                        "| case | api | device | mode | part | verdict | cause | accepted |",
                        "|---|---|---|---|---|---|---|---|"]
                cells = ((r.case_id, r.api, r.device, r.mode, r.part, r.verdict.value, r.cause, _accepted(r))
                         for r in own)
                out += ["| " + " | ".join(_md(v) for v in row) + " |" for row in cells]
        return out

    def html(self) -> str:
        text = "\n".join(line for line in self.markdown()[2:] if line and not line.startswith("|"))
        page = (f"<h2 id='like'>Judged like {html.escape(self.framework)}</h2>\n"
                + "".join(f"<p>{html.escape(line)}</p>\n" for line in text.split("\n")))
        own = self.own() if self.like_run is not None else []
        if own:
            head = "".join(f"<th>{h}</th>" for h in ("case", "api", "device", "mode", "part", "verdict", "cause",
                                                       "accepted"))
            cells = ("".join(f"<td>{html.escape(terminal_line(str(v)))}</td>" for v in
                             (r.case_id, r.api, r.device, r.mode, r.part, r.verdict.value, r.cause, _accepted(r)))
                     for r in own)
            page += (f"<table class='own'><tr>{head}</tr>\n" + "".join(f"<tr>{c}</tr>\n" for c in cells)
                     + "</table>\n")
        return page


def _accepted(r: Result) -> str:
    """Whether a row is accepted, and by what: `no`, `documented` or `known`."""
    return "documented" if r.documented else ("known" if r.known_by else "no")


def _md(text: str) -> str:
    """Text from rows in a Markdown table cell or sentence: one plain line, no markup."""
    return "".join("\\" + c if c in "\\`*_[]<>|#" else c for c in terminal_line(str(text)))


def _details(run_dirs: Iterable[Path], wanted: set[tuple]) -> dict[tuple, dict[str, Any]]:
    found: dict[tuple, dict[str, Any]] = {}
    if not wanted:
        return found
    for run_dir in run_dirs:
        for d in iter_details(run_dir):
            key = tuple(d[k] for k in DETAIL_KEYS)  # Result.key's order
            if key in wanted:
                found.setdefault(key, d)
    return found


def _same_observation(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> bool:
    """Whether two divergences' details show the same observation: the same exception type, or values of one
    shape whose NaN and infinity pattern is the same and whose finite values agree within the port's bound
    (compared on what details.jsonl keeps of each). Without the details of either, nothing shows the observation
    is the same: not the same (the divergence is the port's own, and --fail-on-own fails closed)."""
    if ours is None or theirs is None:
        return False
    raised = [(d.get("raised") or "").split(":")[0] for d in (ours, theirs)]
    if raised[0] or raised[1]:
        return raised[0] == raised[1]
    got, other = ours.get("got"), theirs.get("got")
    if got is None or other is None:
        return got is other
    if got.get("shape") != other.get("shape") or len(got["values"]) != len(other["values"]):
        return False
    bounds = (ours.get("bound") or {}).get("values") or [0.0] * len(got["values"])
    for i, (a, b) in enumerate(zip(got["values"], other["values"])):
        if isinstance(a, str) or isinstance(b, str):  # non-finite ("nan", "inf", "-inf"): the same one
            if a != b:
                return False
        elif not abs(a - b) <= _bound(bounds[i] if i < len(bounds) else 0.0):
            return False
    return True


def _bound(value: Any) -> float:
    """An element's bound from details.jsonl: "inf" is no limit; "nan" (where the spec expects NaN) asks for the
    same value."""
    bound = float(value)
    return 0.0 if math.isnan(bound) else bound


def mirrors_of(manifests: Sequence[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each port run's mirrored APIs, as its run.json recorded them."""
    out: dict[str, dict[str, str]] = {}
    for m in manifests:
        adapter = (m.get("selection") or {}).get("adapter") or m.get("framework")
        if isinstance(m.get("mirrors"), dict) and isinstance(adapter, str):
            out[adapter] = {str(k): str(v) for k, v in m["mirrors"].items()}
    return out


def summary_json(text: str, like: "LikeMarks | None") -> str:
    """summary.json's text with the `like` object added."""
    if like is None:
        return text
    return json.dumps({**json.loads(text), "like": like.summary()}, indent=2, sort_keys=True) + "\n"
