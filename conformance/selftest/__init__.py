"""The planted-bug self-test: the harness proves that it flags every kind of fault a port can have.

A variant plants one kind of fault into what the real framework returned (a value just outside rounding, a
wrong divisor, a lost infinity, a wrong dtype, a raise, a crash, another convention taken silently ...). The
framework answers the suite once, in the control run; each variant's answers (the control's, with its fault
planted) go through the whole harness, exactly as in `kl-conformance run`: judged, written as rows and
details, read back. A crash or a hang is planted in a real worker instead, which it must end. The variant
records which rows it changed and the cause each must be given, and the self-test counts how many of those
rows were flagged, i.e. neither `pass` nor `documented`, and how many were attributed to the rule the fault
breaks (or `unexplained`, for a fault that breaks no rule of its own; a convention the judge names there is
checked against the recorded values); every other row must be the control's.

What a variant plants depends only on the case, the framework's own answer and the reference's
expectations (under the spec, and under the API's declared deviations): never on a verdict. A
planted answer counts only where it is a fault by the spec's comparison rule (spec:
tolerance.comparison), restated in fault.py independently of conformance/judge/compare.py, so a comparator
that lets a wrong answer pass fails the self-test. The gate variants plant no wrong value: they prove that the
CI gates fail closed on a broken build.

The modules: fault.py (what a planted fault is: the call, the variant, the comparison rule), variants.py (the
faults, one small class each), planter.py (plants them, in this process or in a worker), replay.py (the
control run's answers, replayed to a variant's run), gates.py (the gate variants), count.py (what each
variant's run flagged) and command.py (run_selftest, which runs them all). This file only names the planted
adapters a worker loads (`conformance.selftest:Planted__<framework>__<variant>`), importing what makes them
when a worker asks.

Plants faults only in what a framework returned; never changes the judge or the reference it tests.
"""


def __getattr__(name: str):
    """`conformance.selftest:Planted__<framework>__<variant>` names a planted adapter for the worker."""
    if name.startswith("Planted__") and name.count("__") == 2:
        from conformance.selftest.gates import NotImportable, unimportable_adapter_class
        from conformance.selftest.planter import planted_adapter_class
        from conformance.selftest.variants import VARIANTS

        _, framework, variant_name = name.split("__")
        if variant_name in VARIANTS or variant_name == NotImportable.name:
            cls = (planted_adapter_class(framework, variant_name) if variant_name in VARIANTS
                   else unimportable_adapter_class(framework))
            globals()[name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
