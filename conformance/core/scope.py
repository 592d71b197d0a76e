"""What a run or a merge of runs selected, read back from each run.json's `selection` record.

The gates need it to judge only what was asked: a baseline row outside the selection was not checked (never
"gone" or "fixed"), and a known-findings entry is stale only when the whole suite it names was run. `run` and
`report` read the same record, so both decide the same. Reads manifests only.
"""

from __future__ import annotations

import fnmatch
import json

from dataclasses import dataclass, field
from typing import Any, Sequence

from conformance.core.model import EAGER, PARTS

NARROWING = ("--only", "--shard", "--seed", "--part", "--api", "--device", "--mode", "--reduction", "--log-target",
             "--dtype", "--family")
_GLOB = set("*?[")


@dataclass
class _RunSelection:
    """One run's selection: what made it narrower than the whole suite, and the parts and targets it ran."""

    narrowed_by: frozenset[str]
    shard: str | None = None
    seed: Any = None
    parts: frozenset[str] | None = None  # None: every part
    apis: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()
    targets: frozenset[tuple[str, str, str]] | None = None  # (api, device, mode) run; None: not recorded
    modes: frozenset[str] = frozenset({EAGER})  # the modes run (those asked, less those not run here)
    draw: str = ""  # everything the selection records but its cells (shard, parts, APIs, devices) and narrowing
    whole: frozenset[tuple[str, str, str]] | None = None  # (api, device, mode) a run without --api or --device made

    def narrowing_for(self, part: str | None, api: str | None, device: str | None,
                      mode: str = EAGER) -> frozenset[str]:
        """The narrowing options that cut into what an entry pinned to `part`, `api`, `device`, `mode` speaks
        about. An entry of one mode is cut by --mode only where that mode was not run (it then concerns no row
        of it); an entry of a glob over modes always is: run.json does not say which modes the adapter offers,
        so no run is known to have made every mode the glob names, and such an entry is never stale."""
        kept = set(self.narrowed_by)
        for option, pinned, chosen in (("--part", part, self.parts or ()), ("--api", api, self.apis),
                                       ("--device", device, self.devices)):
            if pinned is not None and not (_GLOB & set(pinned)) and pinned in chosen:
                kept.discard(option)
        if _GLOB & set(mode):
            kept.add("--mode")
        elif mode in self.modes:
            kept.discard("--mode")
        return frozenset(kept)


@dataclass
class Scope:
    """The selections of the runs in a report, by the framework name the rows carry."""

    runs: dict[str, list[_RunSelection]] = field(default_factory=dict)

    @classmethod
    def of(cls, manifests: Sequence[dict[str, Any]]) -> "Scope":
        scope = cls()
        for m in manifests:
            framework = row_framework(m)
            sel = m.get("selection") if isinstance(m.get("selection"), dict) else {}
            if isinstance(sel.get("narrowed_by"), list):
                narrowed = frozenset(map(str, sel["narrowed_by"]))
            else:  # a run.json older than the record: what it says
                narrowed = frozenset(o for o, k in (("--only", "only"), ("--shard", "shard")) if sel.get(k))
            parts = sel.get("parts") or None
            targets = None
            if isinstance(m.get("targets"), list):
                targets = frozenset(target_call(str(t)) for t in m["targets"] if str(t).count("/") in (2, 3))
            not_run = m.get("modes_not_run") if isinstance(m.get("modes_not_run"), dict) else {}
            modes = frozenset(map(str, m.get("modes") or sel.get("modes") or [EAGER])) - set(map(str, not_run))
            if not_run:  # a mode asked for and not run here: the run selected less than it was asked
                narrowed |= {"--mode"}
            apis = frozenset(sel.get("apis") or ())
            missing = m.get("apis_not_run") if isinstance(m.get("apis_not_run"), dict) else {}
            if missing:  # APIs the installed release lacks: as if --api had named the others
                narrowed |= {"--api"}
                apis = (apis or frozenset(api for api, _, _ in targets or ())) - set(map(str, missing))
            whole = frozenset(target_call(str(t)) for t in m["whole_targets"] if str(t).count("/") in (2, 3)) \
                if isinstance(m.get("whole_targets"), list) else None
            scope.runs.setdefault(framework, []).append(_RunSelection(
                narrowed, sel.get("shard"), sel.get("seed"), frozenset(parts) if parts else None,
                apis, frozenset(sel.get("devices") or ()), targets, modes,
                # one release's draw: cells run on two releases are not one run of either
                _draw(sel, _CELL_FIELDS) + "\n" + str(m.get("framework_version")), whole))
        return scope

    def selects(self, framework: str, api: str, device: str, part: str, mode: str = EAGER) -> bool:
        """Some run of the report selected this target and part (whether it selected the case is the caller's):
        ran it, or, not narrowed by --device, ran its API and mode on the devices present. A run asks for every
        device unless --device names some: a device gone from the machine is not what the run left out."""
        return any((r.parts is None or part in r.parts) and (
            r.targets is None or (api, device, mode) in r.targets
            or ("--device" not in r.narrowed_by and any((a, m) == (api, mode) for a, _, m in r.targets)))
            for r in self.runs.get(framework, ()))

    def found_device(self, framework: str, device: str) -> bool:
        """Some run of the framework ran a call on `device` (or recorded no targets to tell)."""
        return any(r.targets is None or any(d == device for _, d, _ in r.targets) for r in self.runs.get(framework, ()))

    def narrowing(self, framework: str, part: str | None = None, api: str | None = None,
                  device: str | None = None, mode: str = EAGER) -> tuple[str, ...]:
        """The options by which the runs of `framework` selected less than the whole suite, for an entry pinned
        to `part`, `api`, `device` and `mode` (empty: the whole suite ran). Runs of one draw that together ran
        every cell (shard, part, target), merged, are whole (_cells_cover)."""
        runs = self.runs.get(framework, ())
        cuts = [r.narrowing_for(part, api, device, mode) for r in runs]
        if not runs or any(not c for c in cuts):
            return ()
        if _cells_cover([(r, c) for r, c in zip(runs, cuts) if c <= _CELLS], api, device, mode):
            return ()
        if all("--shard" in c for c in cuts) and _shards_cover([r.shard for r in runs], {r.seed for r in runs}):
            unsharded = [c - {"--shard"} for c in cuts]  # the shards are the whole of their selection: not what cut it
            cuts = unsharded if all(unsharded) else cuts
        return tuple(o for o in NARROWING if any(o in c for c in cuts))


def target_call(text: str) -> tuple[str, str, str]:
    """(api, device, mode) of a run.json target, "framework/api/device" (eager) or "framework/api/device/mode"."""
    _, api, device, *mode = text.split("/")
    return (api, device, mode[0] if mode else EAGER)


def row_framework(manifest: dict[str, Any]) -> str:
    """The framework name a run's rows carry (the adapter's name; `--framework` may be module:Class)."""
    sel = manifest.get("selection")
    if isinstance(sel, dict) and isinstance(sel.get("adapter"), str):
        return sel["adapter"]
    return str(manifest.get("framework", "?"))


def _shard(text: Any) -> tuple[int, int] | None:
    """(K, N) of a recorded shard "K/N"; None for no shard or one that does not read so."""
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        return None
    return k, n


_CELLS = frozenset({"--shard", "--part", "--api", "--device"})
_CELL_FIELDS = ("shard", "parts", "apis", "devices")  # the selection's record of them, apart from the draw


def _cells_cover(runs: list[tuple[_RunSelection, frozenset[str]]], api: str | None, device: str | None,
                 mode: str) -> bool:
    """Some draw's runs, each cut by no more than --shard, --part, --api and --device, together ran every
    (shard, part, API, device) cell of what an entry pinned to `api`, `device` (globs) and `mode` speaks about: the
    forward and the gradients run as two jobs, each API or device in a job of its own, or each shard's parts split
    again, merged. A run not cut by --part (for the entry at hand) holds every part; one not cut by --shard, every
    shard; one cut by neither --api nor --device, every target it would make (run.json's `whole_targets`: every
    API of the adapter on every device present). A run that does not record those targets covers no target
    cell."""
    by_draw: dict[str, list[tuple[_RunSelection, frozenset[str]]]] = {}
    for run, cut in runs:
        by_draw.setdefault(run.draw, []).append((run, cut))
    for group in by_draw.values():
        shards = {_shard(r.shard) for r, c in group if "--shard" in c}
        if None in shards:
            continue
        counts = {n for _, n in shards}
        if len(counts) > 1:
            continue
        n = counts.pop() if counts else 1
        targeted = any({"--api", "--device"} & c for _, c in group)
        if targeted and any(r.whole is None or r.targets is None for r, _ in group):
            continue
        speaks = (lambda t: t[2] == mode and (api is None or fnmatch.fnmatchcase(t[0], api))
                  and (device is None or fnmatch.fnmatchcase(t[1], device)))
        wanted = {t for r, _ in group for t in r.whole or ()} if targeted else {None}
        wanted = {t for t in wanted if t is None or speaks(t)}

        def made(r: _RunSelection, c: frozenset[str]):
            return ((r.targets if {"--api", "--device"} & c else r.whole) or ()) if targeted else (None,)
        held = {(k, part, target) for r, c in group
                for k in ([_shard(r.shard)[0]] if "--shard" in c else range(1, n + 1))
                for part in (r.parts or PARTS if "--part" in c else PARTS)
                for target in made(r, c)}
        if wanted and held >= {(k, part, t) for k in range(1, n + 1) for part in PARTS for t in wanted}:
            return True
    return False


def _draw(selection: dict[str, Any], apart: Sequence[str]) -> str:
    """The selection record without `apart`, the narrowing, the known-findings file (which marks rows, selects
    none), the memory budget and the time limit (gated apart, as refused or timed-out calls): what runs of one
    draw share."""
    return json.dumps({key: value for key, value in selection.items()
                       if key not in (*apart, "narrowed_by", "known", "memory_budget_mb", "timeout_s")},
                      sort_keys=True, default=str)


def _shards_cover(shards: list, seeds: set) -> bool:
    """The shards K/N of one N, one seed, every K from 1 to N present."""
    pairs = {_shard(s) for s in shards}
    if None in pairs:
        return False
    counts = {n for _, n in pairs}
    return len(seeds) == 1 and len(counts) == 1 and {k for k, _ in pairs} == set(range(1, counts.pop() + 1))


def missing_shards(manifests: Sequence[dict[str, Any]]) -> list[str]:
    """One line per draw two or more of whose shards K/N a merge holds, and others not (by framework, and by
    everything its selection records but the shard): the cases of the absent ones were not checked. A merge of
    shards is gated as the whole it stands for ("gate on the merge, not on the shards"); one shard, reported
    alone, is gated as its `run --shard` gates it."""
    held: dict[tuple[str, str, int], set[int]] = {}
    for m in manifests:
        sel = m.get("selection") if isinstance(m.get("selection"), dict) else {}
        shard = _shard(sel.get("shard"))
        if shard is None:
            continue
        k, n = shard
        held.setdefault((row_framework(m), _draw(sel, ("shard",)), n), set()).add(k)
    lines = []
    for (framework, _, n), present in sorted(held.items()):
        absent = sorted(set(range(1, n + 1)) - present)
        if absent and len(present) > 1:
            lines.append(f"{framework}: shard{'s' if len(absent) > 1 else ''} {', '.join(f'{k}/{n}' for k in absent)}"
                         f" of its run {'are' if len(absent) > 1 else 'is'} not here (it holds "
                         f"{', '.join(f'{k}/{n}' for k in sorted(present))}): the cases of "
                         f"{'those' if len(absent) > 1 else 'that'} shard{'s' if len(absent) > 1 else ''} were not "
                         "checked")
    return lines
