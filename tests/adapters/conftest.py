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


@pytest.fixture
def framework_adapter(framework, request, loaded_adapters):
    """The adapter named by the test module's FRAMEWORK, loaded; other frameworks' runs skip the module."""
    name = request.module.FRAMEWORK
    if framework != name:
        pytest.skip(f"{name}-specific tests")
    return load_adapter(loaded_adapters, name)
