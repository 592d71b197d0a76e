"""Test options: `--framework NAME` selects the real framework the adapter tests run on."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading

import pytest


def _hear_ctrl_c() -> None:
    """A session started in the background of a shell (`cmd &`, nohup) inherits SIGINT ignored, and so would every
    run the tests start: Python then never raises KeyboardInterrupt, and the tests that press Ctrl-C on a run wait on
    a run that cannot hear it. The session takes Python's own handler back, so that its children start with SIGINT
    at its default and hear it as they do under a terminal."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_hear_ctrl_c()


def pytest_addoption(parser):
    parser.addoption("--framework", action="append", default=[],
                     help="run adapter and end-to-end tests on this framework (repeatable); it must be installed")
    parser.addoption("--allow-unavailable", action="store_true",
                     help="a --framework that cannot be loaded here skips its tests, with one loud line saying so "
                          "(for R torch, which no Python registry can install); otherwise that is an error")


def pytest_configure(config):
    from conformance.adapters.registry import known_adapters

    config.unavailable_frameworks = {}
    for name in config.getoption("--framework"):
        if name not in known_adapters():
            raise pytest.UsageError(f"--framework {name!r}: unknown; use one of {sorted(known_adapters())}")
        reason = _why_unavailable(name)
        if reason is None:
            continue
        if not config.getoption("--allow-unavailable") or name in required_frameworks():
            # asking for a framework that is not installed is an error, not a skip; so is one that
            # scripts/rtorch_env.py built from sources (KL_REQUIRE_FRAMEWORKS) and that still fails to load
            raise pytest.UsageError(f"--framework {name!r}: the framework is not installed in this environment "
                                    f"({reason})")
        config.unavailable_frameworks[name] = reason


def required_frameworks() -> set[str]:
    """Frameworks that must load even under --allow-unavailable (KL_REQUIRE_FRAMEWORKS, comma-separated)."""
    return {name.strip() for name in os.environ.get("KL_REQUIRE_FRAMEWORKS", "").split(",") if name.strip()}


def _why_unavailable(name: str) -> str | None:
    """Why framework `name` cannot run here, or None. A Python framework is found without importing it;
    one outside Python (R torch) is asked through its adapter's load()."""
    if importlib.util.find_spec(name) is not None:
        return None
    from conformance.adapters.base import FrameworkUnavailable
    from conformance.adapters.registry import get_adapter

    adapter = get_adapter(name)
    try:
        adapter.load()
    except FrameworkUnavailable as exc:
        return str(exc)
    getattr(adapter, "close", lambda: None)()
    return None


def pytest_generate_tests(metafunc):
    if "framework" in metafunc.fixturenames:
        names = metafunc.config.getoption("--framework")
        unavailable = metafunc.config.unavailable_frameworks
        metafunc.parametrize("framework", [
            pytest.param(name, marks=pytest.mark.skip(reason=f"{name} is not installed here (why: the run's last line)"))
            if name in unavailable else name for name in names] or [pytest.param(None, marks=pytest.mark.skip(
                reason="adapter tests need --framework NAME (tox -e tests-torch passes it)"))])


def pytest_unconfigure(config):
    """The loud line, after pytest's own summary, for each framework whose tests were skipped."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for name, reason in getattr(config, "unavailable_frameworks", {}).items():
        if reporter is not None:
            reporter.write_sep("!", f"{name} TESTS DID NOT RUN: {reason}", red=True, bold=True)


@pytest.fixture(scope="session")
def spec():
    from conformance.core.specload import load_spec

    return load_spec()


@pytest.fixture(scope="session", autouse=True)
def reference_cache_dir(tmp_path_factory):
    """CLI runs in tests keep their reference cache in the session's temporary directory, not ~/.cache, sealed
    under a key of the session's, not the user's key file in ~/.config."""
    import secrets

    from conformance.judge.cacheseal import ENV_SECRET
    from conformance.judge.refcache import ENV_DIR

    saved = {name: os.environ.get(name) for name in (ENV_DIR, ENV_SECRET)}
    os.environ[ENV_DIR] = str(tmp_path_factory.mktemp("kl-cache"))
    os.environ[ENV_SECRET] = secrets.token_hex(32)
    yield os.environ[ENV_DIR]
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
