"""What a run asked for and did not check, read from its manifest (run.json): the modes it could not run here
(`modes_not_run`), the APIs its framework's installed release lacks (`apis_not_run`), and the harness's own
options that release could not take (`notes`). Every report names them, so that a page without rows for them
is not read as a clean bill; each renderer escapes the text its own way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True, order=True)
class Gap:
    framework: str
    what: str  # "mode", "API", or "note" for an option the release could not take
    name: str  # the mode or API; empty for a note
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
