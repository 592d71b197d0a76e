"""One pass over result rows gathering everything the reports show.

Memory grows with the number of divergences listed and the error ratios sampled,
not with the number of results. Reads rows only.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Iterable, NamedTuple

from conformance.core.model import EAGER, PARTS, Result, Spec, Verdict
from conformance.report.defects import Defects, spec_of

VERDICT_ORDER = [v.value for v in Verdict]
LISTED_PER_GROUP = 500  # divergences listed per cause group; the rest are counted and found in results.jsonl
RATIO_SAMPLES = 20_000  # error/bound ratios kept per (framework, dtype) for the plots
LISTED_IN_PAGE = 2000  # divergences rendered in report.html; all are in results.jsonl


def target_label(r: Result, released: frozenset[str] = frozenset()) -> str:
    """"framework / api / device", then " / mode" where the mode is not eager (an eager-only report reads as
    before modes existed), then " / part" where the part is not the forward one. A framework of `released` (the
    report holds two releases of it or more) is named with its release: "torch 1.13.1 / ..."."""
    return where_label(r, released) + ("" if r.part == "forward" else f" / {r.part}")


def where_label(r: Result, released: frozenset[str] = frozenset()) -> str:
    """The framework (with its release where `released` names it), API, device and (where not eager) mode of a
    row, without its part (what a cause section lists as targets)."""
    return f"{framework_label(r, released)} / {r.api} / {r.device}" + ("" if r.mode == EAGER else f" / {r.mode}")


def framework_label(r: Result, released: frozenset[str] = frozenset()) -> str:
    """The row's framework, and its release after a space where the report holds several releases of it."""
    return f"{r.framework} {release_text(r.framework_version)}" if r.framework in released else r.framework


def release_text(version: str) -> str:
    """A release as one piece of a label: on one line, without " / " (a framework's version is text from outside;
    optax's names its JAX: "0.2.8 (jax 0.12.0.1, jaxlib 0.12.0.1, x64)")."""
    return " ".join(str(version).split()).replace(" / ", "/") or "-"


# what a cause group counts of its rows, beside their targets: each a Result field shown in report.md's section
SPANS = ("part", "dtype", "reduction", "log_target", "family")


def split_label(label: str) -> dict[str, str]:
    """Inverse of `target_label`: the framework, api, device, mode and part of a label (a piece after the device
    that is not a part is the mode; no mode is named a part, adapters/declaration.py `Mode`), and `release` where the
    label names one."""
    pieces = label.split(" / ")
    rest = pieces[3:]
    part = rest.pop() if rest and rest[-1] in PARTS else "forward"
    framework, _, release = pieces[0].partition(" ")
    return {"framework": framework, **({"release": release} if release else {}), "api": pieces[1],
            "device": pieces[2], "mode": rest[0] if rest else EAGER, "part": part}


def join_framework(pieces: dict[str, str]) -> str:
    """The framework piece of a label split by `split_label`: the framework, with its release where it has one."""
    return pieces["framework"] + (f" {pieces['release']}" if pieces.get("release") else "")


SEEN_MESSAGE = 400  # characters of a row's message kept to show what changed between releases


class Seen(NamedTuple):
    """What a row of a framework with several releases in the report found: what its release is compared by."""

    verdict: str
    cause: str
    message: str
    dtype: str


class Tally:
    """Everything a report shows, gathered in one pass over the rows: memory grows with the
    number of divergences listed, not with the number of results."""

    def __init__(self, rows: Iterable[Result] = (), released: frozenset[str] = frozenset()) -> None:
        self.total = 0
        # the frameworks whose labels name a release (writer: rundirs.released), and their rows by release and call
        # (what "Changed between releases" compares): memory grows with the rows of those frameworks only
        self.released = released
        self.by_release: dict[str, dict[str, dict[tuple, Seen]]] = defaultdict(lambda: defaultdict(dict))
        self.by_target: dict[str, Counter] = defaultdict(Counter)
        self.by_family: dict[tuple, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
        self.group_sizes: Counter = Counter()
        self.group_targets: dict[tuple[str, str], set] = defaultdict(set)
        # per cause group: how many rows are undocumented, documented and known; what its rows span (targets
        # without the part, then SPANS, then the rules touched); the APIs of its undocumented rows; its example
        self.group_undocumented: Counter = Counter()
        self.group_documented: Counter = Counter()
        self.group_known: Counter = Counter()
        self.group_spans: dict[tuple[str, str], dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.group_undocumented_apis: dict[tuple[str, str], Counter] = defaultdict(Counter)
        self.group_example: dict[tuple[str, str], Result] = {}
        self.missing_warnings: Counter = Counter()
        self.undocumented: Counter = Counter()  # divergences neither documented nor known: what --strict fails on
        self.known: Counter = Counter()  # divergences a known-findings file accepts and no profile documents
        self.fallback: Counter = Counter()  # calls of a mode that ran eagerly instead: the mode was not checked
        self.refused: Counter = Counter()  # calls the harness kept from running (Result.refused): not checked
        self.refused_reason: dict[str, str] = {}  # per framework, the first such call's reason
        # a port's undocumented divergences judged with --like-run (fallback rows left out), by mark ("shared",
        # "own") and target: what --fail-on-own fails on
        self.undocumented_like: dict[str, Counter] = {"own": Counter(), "shared": Counter()}
        self.modes: Counter = Counter()  # rows per mode
        self.accepted_cells: Counter = Counter()
        self.ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.listed_in_page: list[Result] = []
        self.spec_hashes: set[str] = set()
        self._labels: dict[tuple[str, str, str, str, str, str], str] = {}
        self.defects = Defects()  # each distinct behaviour once: what the reports open with
        for r in rows:
            self.add(r)

    def add(self, r: Result) -> None:
        """Count one more row (rows come in results.jsonl's order: the first ones are those listed)."""
        self.total += 1
        self.spec_hashes.add(r.spec_hash)
        self.defects.add(r)
        self.modes[r.mode] += 1
        where = (r.framework, r.framework_version, r.api, r.device, r.mode, r.part)
        target = self._labels.get(where)
        if target is None:
            target = self._labels[where] = target_label(r, self.released)
        if r.framework in self.released:
            self.by_release[r.framework][r.framework_version][r.call] = \
                Seen(r.verdict.value, r.cause, r.message[:SEEN_MESSAGE], r.dtype)
        self.by_target[target][r.verdict.value] += 1
        if r.refused:
            self.refused[target] += 1
            self.refused_reason.setdefault(r.framework, r.message)
        self.by_family[(r.family, r.reduction, int(r.log_target))][target][r.verdict.value] += 1
        for warning_id in r.missing_warnings:
            self.missing_warnings[(target, warning_id)] += 1
        if r.max_abs_err is not None and r.bound and math.isfinite(r.max_abs_err) and math.isfinite(r.bound):
            ratios = self.ratios[(r.framework, r.dtype)]
            if len(ratios) < RATIO_SAMPLES:
                ratios.append(max(r.max_abs_err / r.bound, 1e-12))
        if r.verdict.is_divergence:
            if len(self.listed_in_page) < LISTED_IN_PAGE:
                self.listed_in_page.append(r)
            self.undocumented[target] += not r.is_accepted
            self.known[target] += bool(r.known_by) and not r.documented
            self.fallback[target] += not r.verdict.is_checked  # a divergence of a call not checked: no finding
            if r.like in self.undocumented_like and not r.is_accepted and r.verdict.is_finding:
                self.undocumented_like[r.like][target] += 1
            self.accepted_cells[((r.family, r.reduction, int(r.log_target)), target)] += r.is_accepted
            key = (r.cause or "unknown", r.verdict.value)
            self.group_sizes[key] += 1
            self.group_targets[key].add(target)
            if len(self.groups[key]) < LISTED_PER_GROUP:
                self.groups[key].append(r)
            self._span(key, r)

    def _span(self, key: tuple[str, str], r: Result) -> None:
        """Count what one divergent row adds to its cause group's section and the terminal's short summary."""
        undocumented = not r.is_accepted
        self.group_undocumented[key] += undocumented
        self.group_documented[key] += r.documented
        self.group_known[key] += bool(r.known_by) and not r.documented
        spans = self.group_spans[key]
        spans["target"][where_label(r, self.released)] += 1
        for name in SPANS:
            value = getattr(r, name)
            spans[name][str(int(value)) if isinstance(value, bool) else str(value)] += 1
        for rule in getattr(r, "rules", ()):
            spans["rules"][rule] += 1
        if undocumented:
            self.group_undocumented_apis[key][r.api] += 1
        # the worked example: the group's first undocumented row, else its first row
        if key not in self.group_example or (undocumented and self.group_example[key].is_accepted):
            self.group_example[key] = r

    @property
    def refused_by_framework(self) -> Counter:
        """The calls the harness kept from running, per framework."""
        counts: Counter = Counter()
        for label, n in self.refused.items():
            counts[split_label(label)["framework"]] += n
        return counts

    def spec(self) -> Spec | None:
        """The shipped spec where the rows were judged by it: its words title the defects."""
        return spec_of(min(self.spec_hashes)) if self.spec_hashes else None

    def ordered_groups(self) -> list[tuple[str, str]]:
        """The cause groups as the reports show them: those with undocumented rows first, most of those first,
        then the largest."""
        return sorted(self.group_sizes, key=lambda k: (not self.group_undocumented[k], -self.group_undocumented[k],
                                                       -self.group_sizes[k], k))


