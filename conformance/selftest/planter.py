"""Plants a variant's fault into the framework's answers: into the control run's, or in a worker as they come.

A `Planter` builds, for each answer, the Call a variant reads, and records each row the variant plants into
(fault.record). A variant whose fault is the worker's own end (a crash, a hang) is planted in a real worker,
through a planted adapter: a subclass of the framework's own (planted_adapter_class) that the worker loads by
the name `conformance.selftest:Planted__<framework>__<variant>` (the package's __getattr__ makes it), and
that makes its Planter at its first call, from the spec the parent names in ENV_SPEC.

Changes only what a framework returned; never changes the judge or the reference it tests.
"""

from __future__ import annotations

import os

from conformance.adapters.base import in_mode
from conformance.adapters.registry import get_adapter
from conformance.core.case import Case
from conformance.core.model import EAGER, Observation, Spec
from conformance.core.specload import load_spec
from conformance.judge.profiles import DeviationLedger, apply_deviations
from conformance.selftest.fault import Call, Variant, accepted, expectation, is_fault, record
from conformance.selftest.variants import VARIANTS

ENV_SPEC = "KL_SELFTEST_SPEC"  # the spec a worker's variant loads


def planted_adapter_class(framework: str, variant_name: str) -> type:
    """A subclass of `framework`'s adapter that plants `variant_name`'s fault into its answers."""
    base = type(get_adapter(framework))
    variant = VARIANTS[variant_name]()

    class Planted(base):
        def run(self, case, api, device, part, mode=EAGER):
            observed = in_mode(super().run, mode, case, api, device, part)
            return _plant(self, variant, case, api, part, mode, observed)

    Planted.__name__ = Planted.__qualname__ = class_name(framework, variant_name)
    return Planted


def class_name(framework: str, variant_name: str) -> str:
    return f"Planted__{framework}__{variant_name}"


class Planter:
    """Builds, for one answer of the framework, the Call a variant reads, and plants a variant's fault into it.
    One per spec and profile set: it keeps the specs it derives from them (the API's deviations applied)."""

    def __init__(self, spec: Spec, ledger: DeviationLedger):
        self.spec, self.ledger = spec, ledger
        self._deviated: dict[tuple[str, ...], Spec] = {}

    def call(self, case: Case, api, part: str, mode: str, observed: Observation) -> Call | None:
        """What a variant may read of `api`'s answer `observed`; None where nothing ran (nothing to plant)."""
        if observed.unsupported is not None:
            return None
        declared = self.ledger.by_api.get(api.name, ())
        deviated = None
        if declared:
            key = tuple(d.id for d in declared)
            if key not in self._deviated:
                self._deviated[key] = apply_deviations(self.spec, list(declared))
            deviated = expectation(case, self._deviated[key], part, api.dialect)
        expected = expectation(case, self.spec, part, api.dialect)
        return Call(case, api.name, part, observed, expected, deviated, self.spec,
                    frozenset(path for d in declared for path in d.set), api.dialect,
                    bool(accepted(observed, expected)), mode)

    def plant(self, variant: Variant, call: Call | None) -> Observation | None:
        """The variant's faulty answer for `call`, its row recorded; None where the variant plants no fault."""
        if call is None:
            return None
        planted = variant.plant(call)
        if planted is None or not is_fault(planted, call):
            return None
        record(call, variant.name, variant.rule(call), clean=call.conforms)
        return planted


_WORKER: dict = {}  # the worker's Planter, made at its first call


def _plant(adapter, variant: Variant, case: Case, api, part: str, mode: str, observed: Observation) -> Observation:
    """In a worker: `observed`, or the variant's fault planted into it."""
    planter = _WORKER.get("planter")
    if planter is None:
        spec = load_spec(os.environ.get(ENV_SPEC) or None)
        ledger = DeviationLedger(spec, adapter.name, [a.name for a in adapter.apis])
        planter = _WORKER["planter"] = Planter(spec, ledger)
    planted = planter.plant(variant, planter.call(case, api, part, mode, observed))
    return observed if planted is None else planted
