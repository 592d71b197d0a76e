"""Runs the self-test: the control run, then each variant over the cases it planted into (run_selftest).

The framework is called once per call, by the control run, through a worker that keeps its answers
(replay.RecordingPool). A variant that plants a wrong answer replays them with its fault planted, through the
whole run as `kl-conformance run` makes it; a crash or a hang runs a real worker through the planted adapter;
a gate variant asks each gate of its broken build's run (gates.py). count.py then counts each variant's rows.
What the self-test proves is the package's docstring (conformance/selftest/__init__.py).

Plants faults only in what a framework returned; never changes the judge or the reference it tests.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from conformance.adapters.registry import get_adapter
from conformance.core.case import Case
from conformance.core.manifest import read_manifest
from conformance.core.model import EAGER, Spec
from conformance.core.results import iter_results
from conformance.judge.profiles import DeviationLedger
from conformance.report.selftest import VariantReport
from conformance.run.runner import RunOptions, run_conformance
from conformance.selftest.count import count_variant
from conformance.selftest.fault import ENV_LOG, Call, Variant
from conformance.selftest.gates import GATE_VARIANTS, run_gate_variant
from conformance.selftest.planter import ENV_SPEC, Planter, class_name
from conformance.selftest.replay import RecordingPool, ReplayPool
from conformance.selftest.variants import VARIANTS

HANG_TIMEOUT_S = 5.0  # the per-case limit for the variant that hangs
# the same in a compiled mode, where an honest case may first compile (on a loaded machine, for longer than
# HANG_TIMEOUT_S): only the planted hang may time out
HANG_TIMEOUT_COMPILED_S = 30.0


class NotRun(Exception):
    """The framework could not be loaded: the self-test proved nothing, which is not a pass."""


def run_selftest(spec: Spec, framework: str, cases: Sequence[Case], out_dir: Path,
                 variants: Iterable[str] = (), options: RunOptions = RunOptions(),
                 progress: Callable[[str], None] | None = None) -> tuple[dict, list[VariantReport]]:
    """Run the unwrapped adapter (the control) and each planted variant over `cases`; count, per variant,
    the rows it changed and how many of them were flagged (neither pass nor documented).

    The framework is called once per call, by the control run. A variant that plants a wrong answer replays
    the control's answers with its fault planted into them (in this process: the fault depends only on the
    answer and the expectations), through the whole run (judge, rows, details) as `run` does, over the cases it
    planted into (in the others every answer, and so every row, would be the control's). A variant whose
    fault is the worker's own death (a crash, a hang) runs a real worker over the cases it plants into, each
    with the case after it (an honest case in flight when the worker dies). Every row a variant did not plant
    into must keep the control's verdict and cause.

    Returns the control run's verdict counts and one report per variant.
    """
    adapter = get_adapter(framework)  # out_dir is made by the control run, once the devices are known
    os.environ[ENV_SPEC] = str(spec.source)
    recorder = RecordingPool(framework, timeout_s=options.timeout_s, compile_cache_dir=options.cache_dir)
    try:
        control = run_conformance(spec, framework, cases, out_dir / "control", options, pool=recorder)
    finally:
        recorder.close()
    if control.not_run:
        raise NotRun(f"{framework} did not run, so nothing was planted: {control.not_run}")
    not_run = read_manifest(out_dir / "control").get("modes_not_run") or {}
    if not_run:  # a mode that cannot run here plants nothing: the self-test through it proved nothing
        mode, why = next(iter(not_run.items()))
        raise NotRun(f"mode {mode} of {framework} cannot run here, so nothing was planted through it: {why}")
    modes = tuple(dict.fromkeys(options.modes)) or (EAGER,)
    control_rows = {row.call: row for row in iter_results(out_dir / "control")}
    reports = []
    ledger = DeviationLedger(spec, adapter.name, [a.name for a in adapter.apis], options.profiles_dir,
                             carried=adapter.carried_profile())  # the profile the run reads
    planter = Planter(spec, ledger)
    calls = None  # each answer of the control run, with what a variant reads of it: made once, for every variant

    for name in (variants or [*VARIANTS, *GATE_VARIANTS]):
        if name in GATE_VARIANTS:
            if progress is not None:
                progress(name)
            reports.append(run_gate_variant(spec, framework, GATE_VARIANTS[name], cases, out_dir, options, recorder))
            continue
        variant = VARIANTS[name]()
        reason = variant.not_applicable(adapter, ledger)
        if reason is not None:
            reports.append(VariantReport(name, variant.fault, not_applicable=reason))
            continue
        if progress is not None:
            progress(name)
        log = out_dir / f"{name}.planted.jsonl"
        log.unlink(missing_ok=True)
        os.environ[ENV_LOG] = str(log)
        try:
            if variant.in_worker:
                ran = _with_next(cases, variant)
                hang_limit = HANG_TIMEOUT_S if modes == (EAGER,) else HANG_TIMEOUT_COMPILED_S
                # the package names the planted adapter the worker loads
                run_conformance(spec, f"{__package__}:{class_name(framework, name)}", ran, out_dir / name,
                                replace(options, timeout_s=hang_limit if name == "hang" else options.timeout_s))
            else:
                # planted before the run, which then holds exactly the cases planted into: in any other case every
                # answer is the control's, and so would every row be
                calls = _calls(recorder, planter, adapter) if calls is None else calls
                planted = {(index, call): fault for index, call, c in calls
                           if (fault := planter.plant(variant, c)) is not None}
                reason = variant.not_reached([c for _, _, c in calls]) if not planted else None
                if reason is not None:
                    reports.append(VariantReport(name, variant.fault, not_applicable=reason))
                    continue
                indices = sorted({index for index, _ in planted})
                ran = [cases[i] for i in indices]
                run_conformance(spec, framework, ran, out_dir / name, options, pool=ReplayPool(
                    recorder, indices, lambda index, call, observed: planted.get((index, call), observed)))
        finally:
            os.environ.pop(ENV_LOG, None)
        reports.append(count_variant(VARIANTS[name], log, out_dir / name, adapter, ran, spec, modes, control_rows,
                                     ledger))
    return dict(control.counts), reports


def _calls(control: RecordingPool, planter: Planter, adapter) -> list[tuple[int, tuple[str, str, str, str], Call]]:
    """Each answer of the control run: its case's place in the run, the call, and what a variant reads of it."""
    return [(index, call, planter.call(outcome.task.case, adapter.api(call[0]), call[3], call[2], observed))
            for index, outcome in sorted(control.outcomes.items()) for call, observed in outcome.observations.items()]


def _with_next(cases: Sequence[Case], variant: Variant) -> list[Case]:
    """The cases `variant` plants into, each with the case after it (which must come back as the control's)."""
    keep = set()
    for i, case in enumerate(cases):
        if variant.plants_into(case):
            keep |= {i, i + 1}
    return [case for i, case in enumerate(cases) if i in keep]


