"""The adapter registry validates adapters when loaded, as pluggy validates plugins."""

from __future__ import annotations

import sys

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


MODULES = {
    "kl_port_needs_a_dependency": "import kl_conformance_no_such_dependency\n",
    "kl_port_raises_on_import": "raise RuntimeError('the port cannot find its shared library')\n",
    "kl_port_wrong_signature": "def kl_div(a, b):\n    return a - b\n\nTOLERANCE = 1e-6\n",
}


@pytest.fixture
def port_modules(tmp_path, monkeypatch):
    for name, source in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name, words, not_words", [
    # the module exists and its own import fails: its exception and what to install or fix, not the path
    ("kl_port_needs_a_dependency:Adapter",
     "importing module 'kl_port_needs_a_dependency' failed: ModuleNotFoundError: No module named "
     "'kl_conformance_no_such_dependency'", "check the module path"),
    ("kl_port_raises_on_import:Adapter", "importing module 'kl_port_raises_on_import' failed: RuntimeError: the port "
                                         "cannot find its shared library", "check the module path"),
    # the module does not exist: the path is what to check
    ("kl_port_not_there:Adapter", "no module named 'kl_port_not_there'", "install what"),
    ("kl_port_needs_a_dependency.sub:Adapter", "importing module 'kl_port_needs_a_dependency.sub' failed",
     "check the module path"),
    # the module imports, the name is wrong
    ("kl_port_wrong_signature:Missing", "module 'kl_port_wrong_signature' has no 'Missing'", "install what"),
    ("kl_port_wrong_signature:kl_div", "kl_port_wrong_signature: kl_div: kl_div takes kl_div(a, b), not torch's "
                                       "kl_div(input, target, reduction='mean', log_target=False)", "install what"),
    ("kl_port_wrong_signature:TOLERANCE", "is a float, neither an Adapter class nor a function", "install what"),
])
def test_a_framework_that_cannot_be_loaded_says_why_in_one_line(port_modules, name, words, not_words):
    """An adapter's module whose own import fails was told to "check the module path and class name" (and one
    that raised anything but ImportError escaped with a traceback): the fixes differ, so do the messages."""
    with pytest.raises(UsageError) as info:
        get_adapter(name)
    text = str(info.value)
    assert words in text and not_words not in text and "\n" not in text and "Fix: " in text


def test_the_cli_refuses_a_module_whose_import_fails_in_one_line_and_writes_nothing(port_modules, tmp_path, capsys):
    from conformance.cli import main

    out = tmp_path / "out"
    assert main(["run", "--framework", "kl_port_raises_on_import:kl_div", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kl-conformance: --framework: importing module 'kl_port_raises_on_import' failed")
    assert "\n" not in err and "install what kl_port_raises_on_import imports, or fix the module" in err
    assert not out.exists()
