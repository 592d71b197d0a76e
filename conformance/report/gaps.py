"""What a run asked for and did not check, read from its manifest (run.json): the modes it could not run here
(`modes_not_run`), the APIs its framework's installed release lacks (`apis_not_run`), and the harness's own
options that release could not take (`notes`); and from its rows, the calls the harness refused to make (the
memory budget). Every report names them, so that a page without rows for them is not read as a clean bill; each
renderer escapes the text its own way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from conformance.core.model import REFUSED


@dataclass(frozen=True, order=True)
class Gap:
    framework: str
    what: str  # "mode", "API", "note" for an option the release could not take, or "refused"
    name: str  # the mode or API; empty for a note; the count of results refused
    why: str


def mode_gaps(manifests: Sequence[dict[str, Any]]) -> list[Gap]:
    """Each mode a run asked for and could not run here, sorted."""
    return sorted(Gap(str(m.get("framework", "?")), "mode", str(mode), str(why)) for m in manifests
                  if isinstance(m.get("modes_not_run"), dict) for mode, why in m["modes_not_run"].items())


def release_gaps(manifests: Sequence[dict[str, Any]]) -> list[Gap]:
    """Once per run, each API its release lacks, then each note; a framework not run at all says why once, in
    its status, not here."""
    apis = [Gap(str(m.get("framework", "?")), "API", str(api), str(why)) for m in manifests
            if isinstance(m.get("apis_not_run"), dict) and m.get("status") != "not_run"
            for api, why in m["apis_not_run"].items()]
    notes = [Gap(str(m.get("framework", "?")), "note", "", str(note)) for m in manifests
             if isinstance(m.get("notes"), list) for note in m["notes"]]
    return apis + notes


def refused_gaps(refused: Mapping[str, int], reasons: Mapping[str, str]) -> list[Gap]:
    """Per framework, the results whose calls the harness refused to make (Tally.refused_by_framework), with the
    first one's reason: they hold no answer of the framework's."""
    return [Gap(framework, "refused", f"{n} results", reasons[framework].removeprefix(REFUSED))
            for framework, n in sorted(refused.items()) if n]


def refused_line(gap: Gap) -> str:
    """A refused gap in words, the same in every report and the gate's line (each escapes it its own way)."""
    return f"{gap.framework}: {gap.name} not checked, their calls refused by the harness ({gap.why})"
