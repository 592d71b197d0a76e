"""The end-to-end runs the e2e tests read: one default-suite run per session on the --framework given."""

from __future__ import annotations

import pytest

from conformance.cli import main


@pytest.fixture(scope="session")
def default_run(tmp_path_factory, request):
    framework = request.config.getoption("--framework")
    if not framework:
        pytest.skip("end-to-end runs need --framework NAME")
    if framework[0] in request.config.unavailable_frameworks:
        pytest.skip(f"{framework[0]} is not installed here (why: the run's last line)")
    out = tmp_path_factory.mktemp("run")
    assert main(["run", "--framework", framework[0], "--out", str(out), "--no-progress"]) == 0
    return framework[0], out


