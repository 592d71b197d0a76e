"""The gate variants: broken builds whose runs every CI gate asked of them must fail.

They plant no wrong value: they prove that the gates fail closed. One framework cannot be imported (a real
worker fails to load it, as it fails to load an uninstalled framework), another lost the kernels of one dtype
(the control's answers, replayed, but each call of that dtype says "no kernel"); each gate is then asked of the
variant's run, against the control run as baseline, and must fail (--strict and --known with exit 3 for the
framework not imported, --fail-on-new with exit 1 or 3 for both).

Asks the gates of runs it makes; never changes a gate, the judge or the reference it tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Sequence

from conformance.adapters.registry import get_adapter
from conformance.core.case import Case
from conformance.core.known import KnownFindings
from conformance.core.model import FLOAT_FORMATS, Observation, Spec
from conformance.core.results import iter_results
from conformance.report.gate import EXIT_GATE, EXIT_INCOMPLETE, Gates
from conformance.report.selftest import VariantReport
from conformance.report.writer import write_report
from conformance.run.runner import RunOptions, run_conformance
from conformance.selftest.planter import class_name
from conformance.selftest.replay import RecordingPool, ReplayPool


class GateVariant:
    """A broken build that the gates must fail: `gates` maps each gate asked to the exit codes it must give."""

    name: ClassVar[str]
    fault: ClassVar[str]
    gates: ClassVar[dict[str, tuple[int, ...]]]


class NotImportable(GateVariant):
    name, fault = "gate_not_importable", "the framework cannot be imported: every gate must fail"
    gates = {"--strict": (EXIT_INCOMPLETE,), "--fail-on-new": (EXIT_GATE, EXIT_INCOMPLETE),
             "--known": (EXIT_INCOMPLETE,)}


class LostDtype(GateVariant):
    name, fault = "gate_lost_dtype", "every call of one dtype says 'no kernel': --fail-on-new must fail"
    # --strict and --known judge a run alone: unsupported calls are no divergence; only a baseline shows the loss
    gates = {"--fail-on-new": (EXIT_GATE, EXIT_INCOMPLETE)}


GATE_VARIANTS: dict[str, type[GateVariant]] = {v.name: v for v in (NotImportable, LostDtype)}


def unimportable_adapter_class(framework: str) -> type:
    """A subclass of `framework`'s adapter that cannot be imported (the gate variant gate_not_importable: the
    one broken build that needs a worker, to fail in it as an uninstalled framework does)."""
    base = type(get_adapter(framework))

    class Broken(base):
        def load(self):
            from conformance.adapters.base import FrameworkUnavailable

            raise FrameworkUnavailable(f"planted by the self-test: cannot import {framework}")

    Broken.__name__ = Broken.__qualname__ = class_name(framework, NotImportable.name)
    return Broken


def run_gate_variant(spec: Spec, framework: str, variant: type[GateVariant], cases: Sequence[Case], out_dir: Path,
                     options: RunOptions, control: RecordingPool) -> VariantReport:
    """Run the broken build, then ask each gate of its run with the control run as baseline; a gate that passes
    (or exits otherwise than it must) fails the variant. Each gate's report is kept in <variant>.gates/."""
    report = VariantReport(variant.name, variant.fault)
    if variant is LostDtype:
        # a dtype the control judged somewhere, so that losing it loses coverage
        judged = {r.case_id for r in iter_results(out_dir / "control") if r.verdict.is_judged}
        present = {str(c.dtype) for c in cases if c.id in judged}
        lost = next((d for d in FLOAT_FORMATS if d in present), None)
        if lost is None:
            report.not_applicable = "the control judged no case of a floating dtype"
            return report
        report.fault = report.fault.replace("one dtype", lost)
        no_kernel = Observation(unsupported=f"no kernel for this device: planted by the self-test: the {lost} "
                                            "kernels are lost")
        # the control's answers, but every call of the lost dtype says it has no kernel
        run_conformance(spec, framework, cases, out_dir / variant.name, options, pool=ReplayPool(
            control, range(len(cases)), lambda index, call, observed: no_kernel if str(cases[index].dtype) == lost
            else observed))
    else:  # a build that cannot be imported: a real worker fails to load it (the package names it)
        run_conformance(spec, f"{__package__}:{class_name(framework, variant.name)}", cases, out_dir / variant.name,
                        options)
    for gate, expected in variant.gates.items():
        gates = Gates(strict=gate == "--strict", fail_on_new=gate == "--fail-on-new", known=gate == "--known")
        known = KnownFindings([], "(no entries)", "") if gates.known else None
        gate_dir = out_dir / f"{variant.name}.gates" / gate.strip("-")
        gate_dir.mkdir(parents=True, exist_ok=True)
        written = write_report(gate_dir, [out_dir / variant.name], known=known, gates=gates,
                               baseline=out_dir / "control" if gates.fail_on_new else None)
        code = written.decision.code
        report.planted += 1
        report.verdicts[f"{gate} exit {code}"] = 1
        if code in expected:
            report.flagged += 1
        else:
            report.missed.append(f"{gate} exited {code}, not {' or '.join(map(str, expected))}: "
                                 + ("; ".join(written.decision.lines) or "the gate passed"))
    return report
