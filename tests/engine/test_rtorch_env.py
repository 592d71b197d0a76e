"""scripts/rtorch_env.py: R torch from its source archives, checked, built once and reused; the tests that
then require it. The build itself runs in tox's tests-rtorch (CI gives it ../shared/vendor/rtorch); these
tests check what decides whether it runs, and never start one."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "rtorch_env.py"
VENDOR = ROOT.parent / "shared" / "vendor" / "rtorch"  # where CI's clone finds the archives
PINNED = ROOT / "scripts" / "rtorch-sources.sha256"
SHOW_ENV = [sys.executable, "-c", "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
            "('KL_RTORCH_LIB', 'TORCH_HOME', 'KL_REQUIRE_FRAMEWORKS')}))"]


def _wrapped(command, tmp_path, timeout_s=60, **env):
    """Runs the wrapper around `command` with its cache in tmp_path; a build it starts is ended with it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KL_RTORCH")}
    full_env.update(KL_RTORCH_CACHE=str(tmp_path / "cache"), **env)
    process = subprocess.Popen([sys.executable, str(SCRIPT), *command], env=full_env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the wrapper did not finish in {timeout_s} s (did it start a build?): {err[-2000:]}")
    return process.returncode, out, err


def _pinned_names() -> list[str]:
    return [line.split()[1] for line in PINNED.read_text().splitlines() if line.strip()]


def test_without_sources_the_command_runs_as_it_is(tmp_path):
    code, out, err = _wrapped(SHOW_ENV, tmp_path)
    assert code == 0 and err == ""
    assert json.loads(out) == {"KL_RTORCH_LIB": None, "TORCH_HOME": None, "KL_REQUIRE_FRAMEWORKS": None}
    assert not (tmp_path / "cache").exists()


def test_a_folder_without_the_archives_is_refused_in_one_line(tmp_path):
    (tmp_path / "sources").mkdir()
    code, out, err = _wrapped(SHOW_ENV, tmp_path, KL_RTORCH_SOURCES=str(tmp_path / "sources"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "is missing" in err and _pinned_names()[0] in err
    assert not (tmp_path / "cache").exists()


def test_an_archive_other_than_the_pinned_one_is_refused_before_anything_is_built(tmp_path):
    sources = tmp_path / "sources"
    sources.mkdir()
    for name in _pinned_names():
        (sources / name).write_bytes(b"not the archive " + name.encode())
    code, out, err = _wrapped(SHOW_ENV, tmp_path, KL_RTORCH_SOURCES=str(sources))
    first = _pinned_names()[0]
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert hashlib.sha256(b"not the archive " + first.encode()).hexdigest() in err and "sha256" in err
    assert not (tmp_path / "cache").exists()


def test_an_r_torch_named_by_the_user_is_used_without_a_build(tmp_path):
    code, out, err = _wrapped(SHOW_ENV, tmp_path, KL_RTORCH_SOURCES=str(tmp_path / "absent"),
                              KL_RTORCH_LIB=str(tmp_path / "Rlib"))
    assert code == 0 and json.loads(out)["KL_RTORCH_LIB"] == str(tmp_path / "Rlib")
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(not VENDOR.is_dir(), reason=f"the R torch archives are not at {VENDOR} (CI has them)")
def test_a_finished_build_for_the_same_inputs_is_reused_and_then_required(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import rtorch_env
    finally:
        sys.path.remove(str(SCRIPT.parent))
    key, inputs = rtorch_env.build_key(rtorch_env.verified_archives(VENDOR))
    prefix = tmp_path / "cache" / key
    (prefix / "Rlib" / "torch").mkdir(parents=True)
    (prefix / "Rlib" / "torch" / "DESCRIPTION").write_text("Package: torch\n")
    (prefix / "torch-home" / "lib").mkdir(parents=True)
    (prefix / "torch-home" / "lib" / "liblantern.so").write_bytes(b"")
    (prefix / "ready.json").write_text(json.dumps({"inputs": inputs}))
    code, out, err = _wrapped(SHOW_ENV, tmp_path, KL_RTORCH_SOURCES=str(VENDOR))
    assert code == 0 and "reusing" in err, err
    assert json.loads(out) == {"KL_RTORCH_LIB": str(prefix / "Rlib"), "TORCH_HOME": str(prefix / "torch-home"),
                               "KL_REQUIRE_FRAMEWORKS": "rtorch"}


def test_a_framework_required_by_the_environment_fails_the_session_when_it_cannot_load(tmp_path):
    """--allow-unavailable skips R torch's tests where R torch is missing, but not where it was built for the
    session (KL_REQUIRE_FRAMEWORKS): a build that does not load must fail CI, not print a skip."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KL_RTORCH")}
    env["KL_RSCRIPT"] = str(tmp_path / "no-Rscript")  # R torch cannot load: that is what is under test
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/adapters/test_rtorch.py",
               "--framework", "rtorch", "--allow-unavailable", "-k", "unavailable"]
    skipped = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert skipped.returncode == 0 and "rtorch TESTS DID NOT RUN" in skipped.stdout, skipped.stdout[-2000:]
    required = subprocess.run(command, cwd=ROOT, env=dict(env, KL_REQUIRE_FRAMEWORKS="rtorch"),
                              capture_output=True, text=True)
    assert required.returncode == 4, required.stdout[-2000:] + required.stderr[-2000:]
    assert "--framework 'rtorch': the framework is not installed" in required.stderr
