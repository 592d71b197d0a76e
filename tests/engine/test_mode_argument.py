"""The mode is an argument (issue 42, item 5): the run hands each call's mode to the adapter, no adapter keeps a
current mode as state, one place checks a mode's name, and an eager-only adapter (a port) keeps the signatures it
was written with."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from conformance.adapters.base import MODE_METHODS, Adapter, Api, in_mode
from conformance.core.errors import UsageError
from conformance.core.model import EAGER
from conformance.core.specload import load_spec
from conformance.reference.forward import expected_forward
from conformance.run.selection import check_modes
from conformance.run.worker import observe_call
from tests.faults.adapters import ModalAdapter
from tests.helpers import make_case

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"


def test_a_method_that_ignores_the_mode_is_refused_a_call_in_a_mode_and_serves_eager():
    """A mode-blind `run` would make eager calls under a mode's name, rows that claim a compiled answer: a call in a
    mode is refused, naming the fix. The same class still serves eager calls: a port that copies a framework's
    adapter with modes and overrides `run` for eager use (tests/e2e/test_port_like.py) keeps working."""
    class Blind(ModalAdapter):
        def run(self, case, api, device, part):
            return super().run(case, api, device, part)

    adapter = Blind()
    case = make_case([-1.0], [0.5], reduction="sum", dtype="float64", case_id="fault-shift")
    api = adapter.apis[0]
    assert in_mode(adapter.run, EAGER, case, api, "cpu", "forward").value is not None
    with pytest.raises(TypeError, match=r"Blind.run takes no `mode`, so it cannot make a call in mode 'shifted'; "
                                        r"add `mode: str = EAGER`"):
        in_mode(adapter.run, "shifted", case, api, "cpu", "forward")
    row = observe_call(adapter, case, api.name, "cpu", "shifted", "forward")  # as the worker makes the call
    assert row.exception_type == "AdapterError" and "takes no `mode`" in row.exception_message, row


def test_no_adapter_keeps_a_current_mode():
    """Neither the base nor any framework's file reads or sets `self.mode`: the mode reaches every method that
    needs it as an argument, so a walk of the code follows it from the worker's task to the framework's call."""
    assert not hasattr(Adapter, "mode")
    found = []
    for path in sorted(ADAPTERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "mode" and isinstance(node.value, ast.Name) \
                    and node.value.id == "self":
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found
    assert set(MODE_METHODS) <= set(vars(Adapter)), "every method the run calls in a mode has a default"


def test_the_mode_reaches_the_call_and_the_reproducer():
    """The planted-shift adapter answers otherwise in `shifted` only, and writes the mode into its script."""
    adapter = ModalAdapter()
    case = make_case([-1.0], [0.5], reduction="sum", dtype="float64", case_id="fault-shift")
    api = adapter.apis[0]
    eager, shifted = (adapter.run(case, api, "cpu", "forward", mode) for mode in (EAGER, "shifted"))
    assert shifted.value == eager.value + 1.0
    assert adapter.repro_source(case, api, "cpu", "forward", "shifted").startswith("# mode: shifted")
    assert adapter.unsupported_part(api, "grad_input", "forward-only").startswith("mode forward-only has no gradients")
    assert adapter.unsupported_part(api, "forward", "forward-only") is None


def test_a_mode_the_adapter_does_not_declare_is_refused():
    """A name from outside is refused where the run's targets are chosen (`check_modes`, every surface); inside, the
    base's `run`, `unsupported_part` and `repro_script` refuse one the adapter does not declare (`declared_mode`),
    so an adapter's own branches on the mode's name never meet a name of no mode."""
    with pytest.raises(UsageError, match=r"unknown mode 'inductor' for framework 'eager-port'"):
        check_modes("eager-port", ["eager", "inductor"], EagerPort().mode_names())
    port, modal = EagerPort(), ModalAdapter()
    case = make_case([-1.0], [0.5], reduction="sum", dtype="float64")
    for call in (lambda: port.run(case, port.apis[0], "cpu", "forward", "inductor"),
                 lambda: modal.unsupported_part(modal.apis[0], "forward", "inductor"),
                 lambda: modal.repro_script(case, modal.apis[0], "cpu", "forward", ("a", "b"),
                                            expected_forward(case, load_spec()), mode="inductor")):
        with pytest.raises(ValueError, match=r"has no mode 'inductor' \(one of \['eager'"):
            call()


class EagerPort(Adapter):
    """A port written against the eager signatures: no `mode` anywhere."""

    name = "eager-port"
    apis = (Api("port.kl_div", grads=("input",)),)
    known_devices = ("cpu",)

    def load(self):
        pass

    def version(self):
        return "1"

    def devices(self):
        return ("cpu",)

    def build(self, case, device):
        return case.input, case.target

    def invoke(self, case, api, inputs):
        x, t = inputs
        return np.asarray(np.sum(t * (np.log(t) - x)))

    def to_numpy(self, result):
        return np.asarray(result, dtype=np.float64), "float64", np.shape(result)

    def gradient(self, case, api, device, part):
        return -case.target

    def is_no_kernel(self, exc):
        return False


def test_an_eager_only_port_keeps_the_signatures_it_was_written_with():
    port = EagerPort()
    case = make_case([-1.0, -2.0], [0.25, 0.75], reduction="sum", dtype="float64")
    api = port.apis[0]
    forward = in_mode(port.run, EAGER, case, api, "cpu", "forward")
    assert forward.value == pytest.approx(np.sum(case.target * (np.log(case.target) - case.input)))
    gradient = port.run(case, api, "cpu", "grad_input")
    assert np.array_equal(gradient.value, -case.target)
