"""run.json's record of a run as it goes: the provenance and profile digest it states, the files it wrote, the
output stages done (STAGES), and how a run that could not finish ended and why (`failed`, `interrupted`).

Owns the exceptions that end a run early (RunFailed, Terminated) and the one-line reasons run.json gives for
them. Reads and rewrites run.json through the core's manifest functions; decides nothing about what a run does,
never calls the worker or the judge, and never imports a framework or the reports.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from conformance.core.errors import ConformanceError
from conformance.core.manifest import MANIFEST_FILE, manifest_text, read_manifest, write_manifest
from conformance.judge.profiles import default_profiles_dir

# The output stages of a run, in order, as run.json's `stages` records them once each is done: --resume redoes
# every stage not recorded (a run.json older than the record redoes them all). `rows` is the runner's; the
# others are the command's (runcommand.py).
STAGES = ("rows", "reports", "reproducers", "drafts")


class RunFailed(Exception):
    """The run could not go on (no memory, a full disk, a file it cannot write): run.json says `failed` and
    why, and every case judged before stays in results.jsonl for --resume. Its text is one line."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread (cli.py installs the handler), so that the run ends as on Ctrl-C:
    its worker stopped, its temporary files removed, run.json `interrupted`."""


def interruption(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


def failure_reason(exc: BaseException, case_id: str | None = None) -> str:
    """One line on why a run could not go on: no memory, a full disk, a file it cannot write."""
    at = f" at case {case_id!r}" if case_id else ""
    if isinstance(exc, MemoryError):
        return f"out of memory{at}; lower --memory-budget-mb or free memory, and continue with --resume"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the device{at}" + (f" ({exc.filename})" if exc.filename else "")
                + "; free some and continue with --resume")
    return f"{type(exc).__name__}{at}: {exc}".splitlines()[0][:500]


def record_end(out: Path, status: str, reason: str) -> bool:
    """Record in run.json that the run ended before its end (`failed`, `interrupted`) and why; False when even
    that cannot be written (a full disk: run.json is then rewritten in place, which needs no new space)."""
    try:
        manifest = read_manifest(out)
    except (ConformanceError, OSError):
        return False
    if not manifest:
        return False
    manifest.update(status=status, reason=reason, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    try:
        write_manifest(out, manifest)
        return True
    except OSError:
        pass
    try:  # the atomic write needs room for a second copy; in place it needs about none
        data = manifest_text(manifest).encode()
        fd = os.open(out / MANIFEST_FILE, os.O_WRONLY)
        try:
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def add_written(out: Path, names: Sequence[str]) -> None:
    """Add files (and "dir/" entries) the command wrote into `out` to run.json's `written` record."""
    if not names:
        return
    manifest = read_manifest(out)
    if manifest:
        manifest["written"] = sorted(set(manifest.get("written", [])) | set(names))
        write_manifest(out, manifest)


def record_stage(out: Path, stage: str) -> None:
    """Record in run.json that an output stage (STAGES) is done: --resume does not redo it."""
    assert stage in STAGES, stage
    manifest = read_manifest(out)
    if manifest and stage not in manifest.get("stages", []):
        manifest["stages"] = [s for s in STAGES if s in {*manifest.get("stages", []), stage}]
        write_manifest(out, manifest)


def profiles_digest(profiles_dir: Path | None, carried: Path | dict | None = None, like: str | None = None) -> str:
    """A digest of the deviation profiles (every .yaml file of the directory, name and bytes; the adapter's own
    profile; the framework of --like): --resume refuses another profile set, whose documented flags would
    differ."""
    directory = profiles_dir or default_profiles_dir()
    digest = hashlib.sha256()
    if carried is not None or like is not None:
        try:
            own = carried.read_bytes() if isinstance(carried, Path) else json.dumps(carried, sort_keys=True).encode()
        except OSError:
            own = b""
        digest.update(b"carried\0" + own + b"\0like\0" + str(like).encode() + b"\0")
    try:
        files = sorted(p for p in Path(directory).iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError:
        files = []
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def provenance() -> dict[str, str]:
    """Versions every result carries, so reports from different machines can be compared."""
    return {"python_version": platform.python_version(), "numpy_version": np.__version__,
            "platform": platform.platform(), "executable": sys.executable}
