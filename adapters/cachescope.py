"""A scope of a compiled-artifact cache under the harness's cache directory: a folder named by a prefix and a hash
of everything its entries depend on beyond their own keys (the machine, the versions), marked each time a run opens
it, emptied when it passes its bound, and removed once no run has opened it for MAX_IDLE_S.

JAX's executables (adapters/jaxcache.py) and torch's exported ONNX models (adapters/onnxcache.py) each keep one.
A cache only saves time, so a folder that cannot be written is answered with no cache, never with an error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

MAX_IDLE_S = 30 * 86400


def open_scope(directory: Path | None, prefix: str, depends_on: str, max_bytes: int) -> Path | None:
    """The scope of `directory` for what `depends_on` says, created and marked used, emptied if past `max_bytes`,
    with other idle scopes of `prefix` removed; None without a directory or where it cannot be written."""
    if directory is None:
        return None
    scope = Path(directory) / f"{prefix}{hashlib.blake2b(depends_on.encode(), digest_size=8).hexdigest()}"
    try:
        scope.mkdir(parents=True, exist_ok=True)
        os.utime(scope)  # marks the scope used, for remove_idle_scopes
        empty_if_over(scope, max_bytes)
    except OSError:
        return None
    remove_idle_scopes(Path(directory), keep=scope, prefix=prefix)
    return scope


def empty_if_over(scope: Path, limit: int) -> bool:
    """Remove every entry of `scope` when together they pass `limit` bytes; whether it did."""
    entries = [e for e in os.scandir(scope) if e.is_file(follow_symlinks=False)]
    if sum(e.stat(follow_symlinks=False).st_size for e in entries) <= limit:
        return False
    for entry in entries:
        Path(entry.path).unlink(missing_ok=True)
    return True


def remove_idle_scopes(directory: Path, keep: Path, prefix: str, now: float | None = None) -> list[str]:
    """Remove the scopes of `prefix` for other hosts or versions that no run has used for MAX_IDLE_S; their
    names."""
    now = time.time() if now is None else now
    removed = []
    for scope in directory.glob(prefix + "*"):
        try:
            idle = scope != keep and scope.is_dir() and now - scope.stat().st_mtime > MAX_IDLE_S
        except OSError:
            continue
        if idle:
            shutil.rmtree(scope, ignore_errors=True)
            removed.append(scope.name)
    return removed
