"""Test options: `--framework NAME` selects the real framework the adapter tests run on."""

from __future__ import annotations

import importlib.util
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--framework", action="append", default=[],
                     help="run adapter and end-to-end tests on this framework (repeatable); it must be installed")


def pytest_configure(config):
    from conformance.adapters.registry import known_adapters

    for name in config.getoption("--framework"):
        if name not in known_adapters():
            raise pytest.UsageError(f"--framework {name!r}: unknown; use one of {sorted(known_adapters())}")
        if importlib.util.find_spec(name) is None:
            # asking for a framework that is not installed is an error, not a skip
            raise pytest.UsageError(f"--framework {name!r}: the framework is not installed in this environment")


def pytest_generate_tests(metafunc):
    if "framework" in metafunc.fixturenames:
        names = metafunc.config.getoption("--framework")
        metafunc.parametrize("framework", names or [pytest.param(None, marks=pytest.mark.skip(
            reason="adapter tests need --framework NAME (tox -e tests-torch passes it)"))])


@pytest.fixture(scope="session")
def spec():
    from conformance.specload import load_spec

    return load_spec()


@pytest.fixture(scope="session", autouse=True)
def reference_cache_dir(tmp_path_factory):
    """CLI runs in tests keep their reference cache in the session's temporary directory, not ~/.cache."""
    from conformance.refcache import ENV_DIR

    saved = os.environ.get(ENV_DIR)
    os.environ[ENV_DIR] = str(tmp_path_factory.mktemp("kl-cache"))
    yield os.environ[ENV_DIR]
    if saved is None:
        os.environ.pop(ENV_DIR, None)
    else:
        os.environ[ENV_DIR] = saved
