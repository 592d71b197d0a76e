"""The reference cache's builds on disk, one SQLite file per reference build, side by side: each held open under a
shared lock, and removed when idle or over size.

The environments of a matrix run different NumPy versions (torch's NumPy 2, OneFlow's NumPy 1, whose float64 log
differs in the last bit of some bounds), and each keeps its own build. A build is removed when nobody has opened
it for MAX_IDLE_S, or, oldest first, while all builds together pass MAX_TOTAL_BYTES; never while a process holds
it open (each open cache holds a shared lock on its build's lock file, and removal needs the exclusive lock).
Concurrent runs (tox -p) share a build. A lock file held by another process is waited for at most
$KL_CACHE_LOCK_TIMEOUT_S seconds.

Locks and removes builds' files; never reads or writes an entry.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): builds of other environments are then never removed
    fcntl = None

# Past this size on disk no more entries are written. The default suite needs far less; an exhaustive
# suite with several samples would otherwise grow the file without a useful limit.
MAX_CACHE_BYTES = 512 * 2**20
# Builds of other reference versions or NumPy versions: removed when unused this long, or,
# oldest first, while all builds together pass this size.
MAX_IDLE_S = 30 * 86400
MAX_TOTAL_BYTES = 2 * MAX_CACHE_BYTES
# How long a lock file another process holds is waited for before the run goes on without the cache.
ENV_LOCK_TIMEOUT = "KL_CACHE_LOCK_TIMEOUT_S"
DEFAULT_LOCK_TIMEOUT_S = 60.0


class LockTimeout(OSError):
    """Another process held the cache's lock file past the time a run waits for it."""


def lock_timeout_s() -> float:
    """$KL_CACHE_LOCK_TIMEOUT_S, else DEFAULT_LOCK_TIMEOUT_S (a value that is not a number counts as unset)."""
    try:
        value = float(os.environ.get(ENV_LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT_S))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S
    return value if value >= 0 else DEFAULT_LOCK_TIMEOUT_S


def hold(lock_path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
    """Open `lock_path` with a shared lock held (the build is in use) and mark it used now; None without flock.
    LockTimeout where another process holds it exclusively for more than `timeout_s`."""
    if fcntl is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        handle = open(lock_path, "a")
        try:
            _lock_shared(handle, deadline, lock_path)  # waits only while another process holds it exclusively
        except BaseException:
            handle.close()
            raise
        try:
            if os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino:
                os.utime(lock_path)
                return handle
        except FileNotFoundError:
            pass
        handle.close()  # the build was removed while we waited: lock the file that stands there now


def _lock_shared(handle, deadline: float, lock_path: Path) -> None:
    """A shared flock on `handle`, tried again until `deadline` (monotonic seconds), then LockTimeout."""
    pause = 0.01
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"another process holds its lock file {lock_path}; the run goes on without "
                                  f"the cache (wait longer with ${ENV_LOCK_TIMEOUT})") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def remove_unused_builds(directory: Path, keep: str, now: float | None = None) -> list[str]:
    """Remove the files of builds other than `keep` that are idle past MAX_IDLE_S, then, oldest first,
    while all builds together pass MAX_TOTAL_BYTES; skip any build a process holds open. Returns the removed builds."""
    if fcntl is None:
        return []
    now = time.time() if now is None else now
    builds: dict[str, list[Path]] = {}
    for path in directory.glob("reference-*"):
        builds.setdefault(path.name[len("reference-"):].split(".")[0], []).append(path)
    stats = {b: [p.stat() for p in files if p.exists()] for b, files in builds.items()}
    total = sum(st.st_size for sts in stats.values() for st in sts)
    removed = []
    for build in sorted((b for b in builds if b != keep and stats[b]), key=lambda b: max(st.st_mtime for st in stats[b])):
        size = sum(st.st_size for st in stats[build])
        if now - max(st.st_mtime for st in stats[build]) <= MAX_IDLE_S and total <= MAX_TOTAL_BYTES:
            continue
        if _remove_unless_open(directory / f"reference-{build}.lock", builds[build]):
            total -= size
            removed.append(build)
    return removed


def _remove_unless_open(lock_path: Path, files: list[Path]) -> bool:
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a run has this build open
            return False
        for path in sorted(files, key=lambda p: p.suffix == ".lock"):  # the lock file last
            path.unlink(missing_ok=True)
        lock_path.unlink(missing_ok=True)
    return True
