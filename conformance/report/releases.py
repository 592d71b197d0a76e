"""What changed between two releases of one framework in a merged report: each call (case, API, device, mode,
part) of the older release against the same call of the next newer one.

A call is `new` where the older release passed and the newer diverges, `fixed` the reverse, `changed` where
both diverge but by another verdict or cause, and `lost` where the older release judged it and the newer has no
row for it or cannot express it (unsupported). A call only the newer release judges is counted as `gained`.
Reads what a Tally gathered; never a framework or the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.core.model import EAGER, Verdict
from conformance.core.rundirs import release_order
from conformance.report.tally import Seen, Tally

KINDS = ("new", "fixed", "changed", "lost")
KIND_TEXT = {"new": "new (pass, now a divergence)", "fixed": "fixed (a divergence, now a pass)",
             "changed": "changed (a divergence, now another verdict or cause)",
             "lost": "lost (judged before, now without a row or unsupported)"}

Call = tuple[str, str, str, str, str]  # Result.call: (case_id, api, device, mode, part)


@dataclass
class ReleasePair:
    """One framework's two consecutive releases (by version) and the calls that changed between them, by kind, in
    the order of their calls."""

    framework: str
    older: str
    newer: str
    calls: dict[str, list[tuple[Call, Seen, Seen | None]]] = field(default_factory=lambda: {k: [] for k in KINDS})
    gained: int = 0
    compared: int = 0  # calls both releases judged

    def counts(self) -> dict[str, int]:
        return {kind: len(self.calls[kind]) for kind in KINDS}


def _judged(seen: Seen | None) -> bool:
    return seen is not None and Verdict(seen.verdict).is_judged


def _diverges(seen: Seen) -> bool:
    return Verdict(seen.verdict).is_divergence


def release_pairs(tally: Tally) -> list[ReleasePair]:
    """Every framework's consecutive releases in the report, oldest first, with what changed between them."""
    pairs = []
    for framework in sorted(tally.by_release):
        by_release = tally.by_release[framework]
        order = sorted(by_release, key=release_order)
        for older, newer in zip(order, order[1:]):
            pair = ReleasePair(framework, older, newer)
            before, after = by_release[older], by_release[newer]
            for call in sorted(set(before) | set(after)):
                old, now = before.get(call), after.get(call)
                if not _judged(old):
                    pair.gained += _judged(now)
                    continue
                if not _judged(now):
                    pair.calls["lost"].append((call, old, now))
                    continue
                pair.compared += 1
                kind = ("new" if _diverges(now) else None) if not _diverges(old) else \
                    "fixed" if not _diverges(now) else \
                    "changed" if (old.verdict, old.cause) != (now.verdict, now.cause) else None
                if kind is not None:
                    pair.calls[kind].append((call, old, now))
            pairs.append(pair)
    return pairs


def call_text(call: Call) -> str:
    """A call without its case id, as the reports name one: "api / device", the mode where it is not eager, then
    the part."""
    _, api, device, mode, part = call
    return " / ".join([api, device, *([] if mode == EAGER else [mode]), part])


def seen_text(seen: Seen | None) -> str:
    """What a release found for a call: its verdict, and its cause where it diverged."""
    if seen is None:
        return "no row"
    return seen.verdict + (f" ({seen.cause})" if Verdict(seen.verdict).is_divergence and seen.cause else "")


def summary_json(pairs: list[ReleasePair]) -> list[dict[str, Any]]:
    """summary.json's `releases`: per framework and consecutive releases, the counts and each kind's first call."""
    out = []
    for p in pairs:
        examples = {kind: {"case_id": calls[0][0][0], "call": call_text(calls[0][0]), "older": seen_text(calls[0][1]),
                           "newer": seen_text(calls[0][2])}
                    for kind, calls in p.calls.items() if calls}
        out.append({"framework": p.framework, "older": p.older, "newer": p.newer, **p.counts(),
                    "gained": p.gained, "compared": p.compared, "examples": examples})
    return out
