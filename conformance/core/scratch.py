"""Scratch folders in the system's temporary directory that a killed process cannot leak for long.

A process that dies by SIGKILL removes nothing it made. So each scratch folder records the process that owns it
(its pid and that process's start time, which a reused pid does not share), and making a folder removes the
folders of the same kind whose owner is gone. Folders of other users, without an owner record, or whose owner
still runs are left alone. Never removes anything outside the temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

OWNER_FILE = ".kl-owner"


def make_scratch(prefix: str) -> Path:
    """A new folder `<tmp>/<prefix>XXXX`, owned by this process; first removes the `prefix` folders whose owner
    has died (sweep_stale)."""
    sweep_stale(prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / OWNER_FILE).write_text(f"{os.getpid()} {_started(os.getpid())}\n", encoding="utf-8")
    return path


def sweep_stale(prefix: str) -> list[Path]:
    """Removes the `<tmp>/<prefix>*` folders of this user whose owner process is gone; returns them."""
    removed = []
    for entry in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.geteuid():
                continue
            pid_text, started = (entry / OWNER_FILE).read_text(encoding="utf-8").split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue  # not made by make_scratch, or being made now: not ours to judge
        if not _is_running(pid, started):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _started(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (Linux's /proc/PID/stat, field 22); "?" where
    that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces
    except (OSError, IndexError):
        return "?"


def _is_running(pid: int, started: str) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process holds that pid: not known to be gone
    return started == "?" or _started(pid) in (started, "?")
