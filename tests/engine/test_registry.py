"""The adapter registry validates adapters when loaded, as pluggy validates plugins."""

from __future__ import annotations

import pytest

from conformance.adapters.base import Adapter, Api
from conformance.adapters.registry import get_adapter, validate_adapter
from conformance.core.errors import UsageError


def test_builtin_adapter_loads_without_importing_its_framework():
    import sys

    adapter = get_adapter("torch")
    assert adapter.name == "torch" and [a.name for a in adapter.apis] == [
        "torch.nn.functional.kl_div", "torch.nn.KLDivLoss"]
    assert adapter.torch is None  # load() not called yet
    assert "conformance.adapters.torch" in sys.modules


class _NoRun(Adapter):
    name, known_devices = "x", ("cpu",)
    apis = (Api("x.kl_div"),)

    def load(self): ...
    def version(self): return "0"
    def devices(self): return ("cpu",)


class _Duplicate(_NoRun):
    apis = (Api("x.kl_div"), Api("x.kl_div"))

    def run(self, case, api, device, part): ...


@pytest.mark.parametrize("cls, words", [
    (_NoRun, "does not implement build() (or run())"),
    (_Duplicate, "duplicate API names ['x.kl_div']"),
    (int, "is not a subclass"),
])
def test_invalid_adapters_are_rejected(cls, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        validate_adapter(cls, source="tests")
