"""The loaded adapter of the framework under test, for the contract and the framework-specific test files."""

from __future__ import annotations

import pytest

from tests.helpers import load_adapter


@pytest.fixture(scope="session")
def loaded_adapters():
    """Adapters loaded once per session, by name: loading R torch starts an R process (seconds)."""
    loaded = {}
    yield loaded
    for adapter in loaded.values():
        getattr(adapter, "close", lambda: None)()  # an adapter with a process of its own (R torch) ends it


@pytest.fixture(autouse=True)
def only_under_its_framework(request):
    """A module that names its FRAMEWORK runs only in that framework's tests, whether or not a test asks for
    the loaded adapter (a test may drive the CLI with `--framework paddle` itself)."""
    name = getattr(request.module, "FRAMEWORK", None)
    if name is not None and name not in request.config.getoption("--framework"):
        pytest.skip(f"{name}-specific tests")


@pytest.fixture
def framework_adapter(framework, request, loaded_adapters):
    """The adapter named by the test module's FRAMEWORK, loaded; other frameworks' runs skip the module."""
    name = request.module.FRAMEWORK
    if framework != name:
        pytest.skip(f"{name}-specific tests")
    return load_adapter(loaded_adapters, name)
