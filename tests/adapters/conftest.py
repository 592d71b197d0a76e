"""The loaded adapter of the framework under test, for the framework-specific test files."""

from __future__ import annotations

import pytest

from conformance.adapters.registry import get_adapter


@pytest.fixture
def framework_adapter(framework, request):
    """The adapter named by the test module's FRAMEWORK, loaded; other frameworks' runs skip the module."""
    name = request.module.FRAMEWORK
    if framework != name:
        pytest.skip(f"{name}-specific tests")
    adapter = get_adapter(name)
    adapter.load()
    return adapter
