"""NumPy stand-ins with a mode beside eager, for the tests of reports and gates on modes: the mode's call is the
same NumPy code (an honest "compiled" path), one stand-in says its mode's calls ran eagerly (fallback), and one
offers a mode this machine cannot run."""

from __future__ import annotations

from conformance.adapters.base import Mode, call_observed
from conformance.core.model import EAGER, Observation
from tests.faults.adapters import NumpyAdapter, PlantedBugsAdapter


class ModedAdapter(NumpyAdapter):
    """Honest in both modes: `traced` makes the same NumPy call."""

    name = "numpy-moded"
    modes = (Mode("traced", "the same NumPy call, standing in for a compiled one"),)

    def run(self, case, api, device, part, mode=EAGER):
        return super().run(case, api, device, part)  # the same NumPy call in either mode

    def misbehave(self, case):
        return self.run_plain(case)

    def run_plain(self, case):
        return call_observed(lambda: self.compute(case), lambda v: (v, "float64", v.shape))


class CountedLoadsModedAdapter(ModedAdapter):
    """ModedAdapter, each worker that loads it appending a line to the file named by $KL_TEST_LOADS."""

    def load(self) -> None:
        import os

        with open(os.environ["KL_TEST_LOADS"], "a") as mark:
            mark.write("loaded\n")


class FallbackModeAdapter(ModedAdapter):
    """In mode `traced`, the calls of the cases whose id holds "fault" ran eagerly instead (as Dynamo does past
    its recompile limit): their rows are `fallback`. Eager is honest everywhere."""

    def run(self, case, api, device, part, mode=EAGER):
        if mode != EAGER and "fault" in case.id:
            return Observation(fallback="the stand-in's counters show no compiled call")
        return self.run_plain(case)


class UnusableModeAdapter(ModedAdapter):
    """Offers a second mode, `absent`, whose package is not installed here."""

    modes = (*ModedAdapter.modes, Mode("absent", "a mode whose package is missing"))

    def mode_unavailable(self, mode):
        return "the stand-in's compiler is not installed" if mode == "absent" else None


class PlantedInModeAdapter(PlantedBugsAdapter):
    """tests/faults/adapters.py's planted bugs, the same in eager and in `traced` (a compiled path that
    reproduces eager's bugs): what documents or accepts each mode's rows is then the profile's or the known
    file's `mode:` alone."""

    name = "numpy-moded"
    modes = ModedAdapter.modes

    def run(self, case, api, device, part, mode=EAGER):
        return super().run(case, api, device, part)  # the same planted bugs in either mode
