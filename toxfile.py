"""tox inline plugin: let tox find interpreters that pyenv installed but left off PATH, give the label
conformance-full its whole mode suite, and pass a SIGTERM to tox on to the command it is running.

The OneFlow environment needs CPython 3.10 (OneFlow 0.9.0 has wheels for 3.8-3.10 only), and
the optax environment CPython 3.12 (jax and jaxlib 0.11 and later require it). Where such a
`python3.X` is not on PATH but pyenv has one, its folder is appended to PATH for tox's
interpreter discovery, after every existing entry, so `python3` is unchanged.

`tox -m conformance-full` runs the conformance environments with every mode over the whole mode suite instead of its
slice: for that label, KL_MODE_SUITE is set to `modes`, which each environment's mode run reads (tox.ini: `--suite
{env:KL_MODE_SUITE:mode-slice}`). One set of environments serves both labels: environments of their own for the
full run would install every framework twice, and one environment under two names is rebuilt at each switch.

tox stops its running commands on Ctrl-C (SIGINT to each, then SIGTERM, then SIGKILL, each after a timeout), but
a SIGTERM ended tox alone and left its `kl-conformance run` going, unseen, holding its output directory. tox now
takes a SIGTERM as it takes Ctrl-C, so the run it started ends as an interrupted run (run.json says so, and
`--resume` continues it).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import threading

from tox.plugin import impl


def _append_pyenv_interpreters() -> None:
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    path = os.environ.get("PATH", "").split(os.pathsep)
    for minor in ("3.10", "3.12"):
        if _runs(shutil.which(f"python{minor}")):  # a pyenv shim is on PATH but may refuse to run
            continue
        for folder in sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin")), reverse=True):
            if os.path.exists(os.path.join(folder, f"python{minor}")) and folder not in path:
                path.append(folder)
                break
    os.environ["PATH"] = os.pathsep.join(path)


def _runs(executable: str | None) -> bool:
    if not executable:
        return False
    try:
        return subprocess.run([executable, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _sigterm_as_ctrl_c() -> None:
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupted)


FULL_LABEL = "conformance-full"  # the label whose mode runs take the whole mode suite
MODE_SUITE = "KL_MODE_SUITE"


@impl
def tox_add_option(parser) -> None:  # the earliest hook tox calls: before any interpreter is looked up
    _append_pyenv_interpreters()
    _sigterm_as_ctrl_c()


@impl
def tox_add_core_config(state) -> None:  # once, with the command line parsed, before any environment (pluggy
    # passes a hook only the arguments it names)
    if FULL_LABEL in (getattr(state.conf.options, "labels", None) or ()):
        os.environ[MODE_SUITE] = "modes"
