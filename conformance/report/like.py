"""A port judged like a framework (`--like`, `--like-run`): which of its findings that framework's profile
documents, and, given a recorded run of that framework, which it shares with the framework's observed
behaviour and which are its own.

A port's divergence is documented by the framework's profile when its documented_by names one of that
profile's deviations ("<framework>:<id>", as the run's --like or the port profile's extends: gave it). It is
shared when the recorded run has a divergence of the same case on the API the port's API mirrors, on the same
device and part, with the same verdict and cause, and an observation that agrees within the port's bound (the
same exception type for a raise; for values, the previews details.jsonl keeps). Reads rows and details only.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from conformance.core.model import Result
from conformance.core.results import DETAIL_KEYS, iter_details, iter_results
from conformance.core.text import terminal_line

LISTED = 50  # own undocumented findings listed in report.md


class LikeMarks:
    """Marks a port's rows as they go by (`add`); `finish` compares them with the recorded run."""

    def __init__(self, framework: str, like_run: str | Path | None = None,
                 mirrors: dict[str, dict[str, str]] | None = None) -> None:
        self.framework, self.like_run = framework, Path(like_run) if like_run is not None else None
        self.mirrors = mirrors or {}  # port framework -> {its API: the API of `framework` it mirrors}
        self.counts = {"divergences": 0, "documented_by_like": 0, "undocumented": 0}
        self._candidates: dict[tuple, tuple[Result, bool]] = {}
        self.own_undocumented: list[Result] = []
        self.marks: dict[tuple, str] = {}  # a port row's key -> "shared" or "own"

    def add(self, row: Result) -> None:
        if row.framework == self.framework or not row.verdict.is_divergence:
            return
        self.counts["divergences"] += 1
        self.counts["documented_by_like"] += any(d.startswith(self.framework + ":") for d in row.documented_by)
        self.counts["undocumented"] += not row.is_accepted
        if self.like_run is not None:
            self._candidates[row.key] = (row, not row.is_accepted)

    def mirrored(self, row: Result) -> tuple[str, str, str, str, str]:
        """The call of the framework it is judged like that a port's row mirrors: (case, api, device, mode, part)."""
        return (row.case_id, self.mirrors.get(row.framework, {}).get(row.api, row.api), row.device, row.mode,
                row.part)

    def finish(self, port_dirs: Sequence[Path]) -> None:
        """Compare the port's divergences with the recorded run's (nothing to do without one)."""
        if self.like_run is None:
            return
        theirs = {r.call: r for r in iter_results(self.like_run)
                  if r.framework == self.framework and r.verdict.is_divergence}
        alike = {key: theirs[self.mirrored(row)] for key, (row, _) in self._candidates.items()
                 if self.mirrored(row) in theirs and (theirs[self.mirrored(row)].verdict, theirs[self.mirrored(row)]
                                                     .cause) == (row.verdict, row.cause)}
        details = _details(port_dirs, {row.key for key, (row, _) in self._candidates.items() if key in alike})
        their_details = _details([self.like_run], {r.key for r in alike.values()})
        for key, (row, undocumented) in self._candidates.items():
            other = alike.get(key)
            same = other is not None and _same_observation(details.get(key), their_details.get(other.key))
            mark = "shared" if same else "own"
            self.marks[key] = mark
            self.counts[mark] = self.counts.get(mark, 0) + 1
            self.counts[f"{mark}_undocumented"] = self.counts.get(f"{mark}_undocumented", 0) + undocumented
            if mark == "own" and undocumented and len(self.own_undocumented) < LISTED:
                self.own_undocumented.append(row)
        for mark in ("shared", "own"):
            self.counts.setdefault(mark, 0)
            self.counts.setdefault(f"{mark}_undocumented", 0)

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
                        f"{c['own']} its own ({c['own_undocumented']} undocumented)."]
            if self.own_undocumented:
                out += ["", "Its own undocumented divergences" + (f" (the first {LISTED})" if
                                                                   c["own_undocumented"] > LISTED else "") + ":", "",
                        "| case | api | device | part | verdict | cause |", "|---|---|---|---|---|---|"]
                cells = ((r.case_id, r.api, r.device, r.part, r.verdict.value, r.cause) for r in self.own_undocumented)
                out += ["| " + " | ".join(_md(v) for v in row) + " |" for row in cells]
        return out

    def html(self) -> str:
        text = "\n".join(line for line in self.markdown()[2:] if line and not line.startswith("|"))
        return (f"<h2>Judged like {html.escape(self.framework)}</h2>\n"
                + "".join(f"<p>{html.escape(line)}</p>\n" for line in text.split("\n")))


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
    (compared on what details.jsonl keeps of each). Without the details of both, verdict and cause decide."""
    if ours is None or theirs is None:
        return True
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
