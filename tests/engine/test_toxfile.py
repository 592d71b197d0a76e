"""The tox plugin (toxfile.py): a SIGTERM to tox reaches the command it is running. Without it tox ended alone and
its `kl-conformance run` went on unseen, holding its output directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tox")

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = "import os, pathlib, time; pathlib.Path('child.pid').write_text(str(os.getpid())); time.sleep(600)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child that has exited but that nobody has reaped yet is no longer running
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def _tox_until_its_command_sleeps(project: Path, envs: str) -> subprocess.Popen:
    """tox running `envs` in `project` (its toxfile.py and tox.ini written), returned once the command that runs
    SLEEPER has written its pid and reached its sleep."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOX_")}
    tox = subprocess.Popen([sys.executable, "-m", "tox", "-e", envs, "--workdir", str(project / ".tox")],
                           cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_file = project / "child.pid"
    deadline = time.monotonic() + 300  # a bound on a hang (tox makes a virtual environment first), not a timing
    while not pid_file.exists():
        assert tox.poll() is None, f"tox ended before its command started:\n{tox.stdout.read()}"
        assert time.monotonic() < deadline, "tox never started its command"
        time.sleep(0.1)
    time.sleep(0.5)  # the pid is written as the command starts: let it reach its sleep
    return tox


def test_a_sigterm_to_tox_ends_the_command_it_runs(tmp_path):
    shutil.copy(ROOT / "toxfile.py", tmp_path / "toxfile.py")
    (tmp_path / "tox.ini").write_text(f'[testenv:sleepy]\nskip_install = true\npackage = skip\n'
                                      f'commands = python -c "{SLEEPER}"\n')
    tox = _tox_until_its_command_sleeps(tmp_path, "sleepy")
    child = int((tmp_path / "child.pid").read_text())
    tox.send_signal(signal.SIGTERM)
    output, _ = tox.communicate(timeout=120)
    try:
        deadline = time.monotonic() + 60
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), f"tox's command outlived tox:\n{output}"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
    assert tox.returncode != 0


@pytest.mark.parametrize("label, suite", [("conformance", "mode-slice"), ("conformance-full", "modes")])
def test_the_full_label_runs_the_same_environments_over_the_whole_mode_suite(label, suite):
    """`tox -m conformance` runs each framework's modes on the mode slice, `tox -m conformance-full` the same
    environments (not a second set, which would install every framework twice) over the whole mode suite."""
    env = {k: v for k, v in os.environ.items() if k != "KL_MODE_SUITE"}
    shown = subprocess.run([sys.executable, "-m", "tox", "config", "-m", label, "-k", "commands"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    mode_runs = [line for line in shown.stdout.splitlines() if "--mode " in line]
    assert len(mode_runs) == 9, shown.stdout  # every framework with modes; R torch has none
    assert all(f"--suite {suite} " in line for line in mode_runs), shown.stdout
    listed = subprocess.run([sys.executable, "-m", "tox", "config", "-m", label, "-k", "env_name"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120).stdout
    assert "full" not in listed.replace(label, ""), listed


# A framework environment's kl-conformance, a stand-in in its bin folder that writes down what it was asked; the
# environment's command then sleeps until tox is stopped. Real tox, real signals; the stand-in is for the harness's
# own command, whose merge of partial runs the report tests cover.
STAND_IN = """import pathlib, stat, sys
script = pathlib.Path(sys.executable).parent / "kl-conformance"
script.write_text('#!/bin/sh\\necho "$@" > asked.txt\\n')
script.chmod(script.stat().st_mode | stat.S_IEXEC)
"""
MERGE_INI = """[testenv]
skip_install = true
package = skip
interrupt_timeout = 5
[testenv:framework]
commands_pre = python stand_in.py
commands = python -c "{sleeper}"
[testenv:later]
commands = python -c "print('never reached')"
[testenv:report]
depends = framework, later
commands = kl-conformance report --allow-missing --force reports/framework reports/later --out reports/all
"""


def test_a_stopped_matrix_merges_what_finished(tmp_path):
    """Stopping tox cancels the environments still to come, its merge among them: the stopped environment runs the
    merge that depends on it itself, with its own kl-conformance and the merge's own arguments."""
    shutil.copy(ROOT / "toxfile.py", tmp_path / "toxfile.py")
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    (tmp_path / "tox.ini").write_text(MERGE_INI.format(sleeper=SLEEPER))
    tox = _tox_until_its_command_sleeps(tmp_path, "framework,later,report")
    tox.send_signal(signal.SIGTERM)
    output, _ = tox.communicate(timeout=120)
    asked = tmp_path / "asked.txt"
    assert asked.exists(), f"no merge was run:\n{output}"
    assert asked.read_text().split() == ["report", "--allow-missing", "--force", "reports/framework", "reports/later",
                                         "--out", "reports/all"]
    assert "framework was interrupted: merging what finished (report's command" in output
    assert "never reached" not in output and tox.returncode != 0
