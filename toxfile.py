"""tox inline plugin: let tox find interpreters that pyenv installed but left off PATH, give the label
conformance-full its whole mode suite, pass a SIGTERM to tox on to the command it is running, and merge what
finished when a matrix is stopped.

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

A matrix stopped that way never reaches its merge (tox cancels the environments still to come, the report among
them), so the stopped environment merges what finished itself: when its commands were stopped (tox's exit code -1
for the set, or a run's own 130 or 143), the command of the environment that `depends` on it (`report` for the
conformance labels, `releases-report` for `releases`) runs with the stopped environment's own kl-conformance. A
framework whose run is missing shows as not run, an interrupted one with the rows it wrote.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import threading

from tox.plugin import impl

INTERRUPTED = (130, 143, -signal.SIGINT, -signal.SIGTERM)  # the run's exit: Ctrl-C or SIGTERM (docs: Exit codes)
UNFINISHED = -1  # tox's exit code of a command set it stopped (on Ctrl-C), whose last outcome it never records
_STATE: list = []  # tox's state, once its configuration is read (tox_add_core_config)


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
    _STATE[:] = [state]
    if FULL_LABEL in (getattr(state.conf.options, "labels", None) or ()):
        os.environ[MODE_SUITE] = "modes"


@impl
def tox_after_run_commands(tox_env, exit_code, outcomes) -> None:
    """Where this environment's run was interrupted, the merge that depends on it, run now (the module's
    docstring)."""
    stopped = exit_code == UNFINISHED or any(getattr(o, "exit_code", None) in INTERRUPTED for o in outcomes)
    if not _STATE or not stopped:
        return
    state, name = _STATE[0], tox_env.conf.name
    merges = [m for m in state.envs.iter(only_active=True) if name in _depends(state, m)]
    if not merges:
        return
    kl_conformance = os.path.join(str(tox_env.env_bin_dir()), "kl-conformance")
    for merge in merges:
        for command in state.envs[merge].conf["commands"]:
            args = list(command.args)
            if args[:1] != ["kl-conformance"]:
                continue
            print(f"{name} was interrupted: merging what finished ({merge}'s command, with {name}'s kl-conformance)",
                  file=sys.stderr, flush=True)
            subprocess.run([kl_conformance, *args[1:]], check=False)


def _depends(state, env: str) -> list[str]:
    try:
        return [str(d) for d in state.envs[env].conf["depends"]]
    except Exception:  # an environment whose configuration cannot be read merges nothing
        return []
