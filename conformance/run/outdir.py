"""The output directory of `run` and `report`: checked before anything is written, locked while a command
writes there, and cleared on --force of exactly what an earlier command recorded writing there.

A directory that already holds files is refused unless the user says what to do with
them: `--resume` continues the run there, `--force` removes the files an earlier run or
report recorded writing there (the `written` list of its run.json or runs.json), so no
stale file sits beside new results. A directory without such a record is refused on
--force: the harness cannot tell its files from the user's, so it removes nothing. An
input of the same command among the files that would be removed is refused too.

One command writes into one output directory at a time: an exclusive lock (flock) on a
lock file there, held from before the directory is cleared until the command ends.

Owns the checks on the output directory; writes no results or reports, and never imports a framework.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from conformance.core.errors import UsageError

try:
    import fcntl
except ImportError:  # no flock here (Windows): the lock is not taken, as the reference cache's is not
    fcntl = None
from conformance.core.details import DETAILS_FILE
from conformance.core.manifest import MANIFEST_FILE
from conformance.core.results import RESULTS_FILE
from conformance.core.rundirs import ISSUES_DIR, REPORT_FILES, REPRO_DIR, RUNS_FILE

LOCK_FILE = ".kl-conformance.lock"
RUN_FILES = (RESULTS_FILE, DETAILS_FILE, MANIFEST_FILE)
HARNESS_FILES = (RESULTS_FILE, DETAILS_FILE, MANIFEST_FILE, RUNS_FILE, *REPORT_FILES, "baseline.json")
STAGING_PREFIX = ".repro-staging-"
RESUME_FIX = ", --resume to continue that run"  # a surface that continues no run (the API) says the rest alone
# temporary files of atomic writes, of the writability test and of the reproducers being written, left behind
# by a killed process
TEMP_PREFIXES = (".write-test-", ".junit-", STAGING_PREFIX) + tuple(f".{name}." for name in HARNESS_FILES)
# the temporary file of an atomic write into the harness's own folders (a draft, a reproducer): tempfile's name
_ATOMIC_TEMP = re.compile(r"\.[^/]+\.[a-z0-9_]{8}")
# appended to by a run: --resume cuts a last line left half-written (a kill, a full disk)
APPENDED_FILES = (RESULTS_FILE, DETAILS_FILE)


def check_out_dir(path: str | Path, *, resume: bool = False, force: bool = False,
                  inputs: Sequence[tuple[str, str]] = (), record_required: bool = True, locked: bool = False) -> Path:
    """Refuse an --out that cannot be used, before anything is written or created.

    `inputs` are the command's own input files and directories as (option, path): on --force, one among
    the files that would be removed is refused. `record_required=False` lets --force accept a non-empty
    directory without a record (the self-test, which replaces only its own named parts). `locked`: the
    caller holds the directory's lock already.

    Raises
    ------
    UsageError
        when the path is a file, is not writable, is in use by another command, is a non-empty directory
        without --resume or --force, or on --force holds no record of what the harness wrote there, or
        would lose one of the inputs.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError("exists and is not a directory", file=str(out), where="--out",
                         fix="choose a directory path for --out")
    if resume and not out.exists():  # refused before the lock or anything else makes the directory
        raise UsageError("no such directory to resume", file=str(out), where="--resume",
                         fix="pass the --out directory of the run to continue, or leave out --resume to start one")
    if out.is_dir():
        entries = _entries(out)
        if not locked:
            check_not_locked(out)
        if entries and not (resume or force):
            raise UsageError(f"the output directory is not empty (it holds {entries[0]!r}"
                             + (f" and {len(entries) - 1} more" if len(entries) > 1 else "") + ")",
                             file=str(out), where="--out",
                             fix=f"pass --force to replace what an earlier run wrote there{RESUME_FIX}, or choose "
                                 "another directory")
        if entries and force and not resume:
            _check_clearing(out, entries, inputs, record_required)
        writable = out
    else:
        writable = next(p for p in out.absolute().parents if p.exists())
        if not writable.is_dir():
            raise UsageError(f"cannot write to the output directory ({writable} is not a directory)", file=str(out),
                             where="--out", fix="choose a directory path for --out")
    if not os.access(writable, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write to the output directory ({writable} is not writable)", file=str(out),
                         where="--out", fix="choose a directory you can write to")
    return out


def _entries(out: Path) -> list[str]:
    """The directory's entries, but the lock file (left by a killed command, it holds nothing)."""
    try:
        return sorted(entry.name for entry in out.iterdir() if entry.name != LOCK_FILE)
    except OSError as exc:
        raise UsageError(f"cannot read the output directory ({exc.strerror})", file=str(out), where="--out",
                         fix="choose a directory you can read and write") from None


def _check_clearing(out: Path, entries: list[str], inputs: Sequence[tuple[str, str]], record_required: bool) -> None:
    """--force on a non-empty directory: it must hold a record of what the harness wrote, and no input of the
    command may be among what that record would remove."""
    files, _ = recorded(out)
    if not files and record_required:
        raise UsageError(f"--force: the output directory holds {entries[0]!r}"
                         + (f" and {len(entries) - 1} more" if len(entries) > 1 else "")
                         + " but no record (run.json or runs.json) of files a kl-conformance run or report wrote "
                           "there, so nothing in it can be told from your own files",
                         file=str(out), where="--out",
                         fix="choose another (new or empty) directory for --out, or empty this one yourself")
    cleared = {(out / name).resolve() for name in files}
    cleared |= {entry.resolve() for entry in temporary_files(out)} if files else set()
    for option, given in inputs:
        if given is None:
            continue
        target = Path(given).resolve()
        hit = target if target in cleared else next((c for c in sorted(cleared) if target in c.parents), None)
        if hit is not None:
            raise UsageError(f"--force would remove {hit}, which {option} {given} reads", file=str(out),
                             where="--out", fix=f"move the input out of {out} first, or choose another --out")


def recorded(out: Path) -> tuple[list[str], list[str]]:
    """What an earlier run (run.json) or report (runs.json) in `out` recorded writing there: (files,
    directories), relative paths checked to stay inside `out`. A damaged or absent record is no record."""
    names: list[str] = []
    for record_file in (MANIFEST_FILE, RUNS_FILE):
        try:
            document = json.loads((out / record_file).read_bytes())
        except (OSError, ValueError):
            continue
        written = document.get("written") if isinstance(document, dict) else None
        if isinstance(written, list):
            names += [name for name in written if isinstance(name, str)]
    files, dirs = [], []
    for name in dict.fromkeys(names):
        relative = PurePosixPath(name)
        if not name or relative.is_absolute() or ".." in relative.parts or "\x00" in name or name.startswith("\\"):
            continue  # a record is data: it never names anything outside the directory
        if name.endswith("/"):
            dirs.append(str(relative))
        else:
            files.append(str(relative))
    return files, dirs


def check_not_locked(out: Path) -> None:
    """Refuse, reading only, a directory another command holds the lock of."""
    if fcntl is None:
        return
    try:
        fd = os.open(out / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise _in_use(out, fd) from None
    finally:
        os.close(fd)


def _in_use(out: Path, fd: int) -> UsageError:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        holder = ""
    return UsageError("another kl-conformance command is writing into this directory"
                      + (f" (process {holder})" if holder.isdigit() else ""), file=str(out), where="--out",
                      fix="wait until it has finished, or choose another --out")


class OutDirLock:
    """The exclusive lock of one output directory, held from before the directory is cleared until the
    command ends. The lock file holds the holder's process id; it is removed on release. A lock taken on a
    lock file that another holder removed meanwhile is retaken on the current one."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.path: Path | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self, out: Path) -> None:
        if fcntl is None:
            return
        path = out / LOCK_FILE
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                error = _in_use(out, fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else exc
                os.close(fd)
                raise error from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed the file we locked: lock the one there now
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "OutDirLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def prepare_out_dir(path: str | Path, *, force: bool = False, resume: bool = False, lock: OutDirLock | None = None,
                    inputs: Sequence[tuple[str, str]] = (), record_required: bool = True) -> Path:
    """Create the output directory, take its lock (when `lock` is given and not held yet), check it again
    under the lock (another command may have written there since the first check), on --force remove what
    the harness recorded writing there, and prove it writable. Called only once every input has been checked."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if lock is not None and not lock.held:
            lock.acquire(out)
            check_out_dir(out, resume=resume, force=force, inputs=inputs, record_required=record_required,
                          locked=True)
        _refuse_linked_folders(out)
        if force and not resume:
            clear_harness_files(out)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to the output directory ({exc.strerror})", file=str(out), where="--out",
                         fix="choose a directory you can write to") from None
    return out


def _refuse_linked_folders(out: Path) -> None:
    """A folder inside --out that is a symbolic link (repro/, issues/, cases/ made to point elsewhere) would
    have the harness write outside --out: refused, whatever the command."""
    for entry in out.iterdir():
        if entry.is_symlink() and entry.is_dir():
            raise UsageError("a folder in the output directory is a symbolic link: the harness would write "
                             "through it, outside the output directory", file=str(entry), where="--out",
                             fix=f"remove the link {entry.name}, or choose another --out")


def clear_temporary_files(out: Path) -> None:
    """Remove what a killed process left half-written: a resumed run starts clean of it."""
    for entry in temporary_files(out):
        _remove(entry)


def temporary_files(out: Path) -> list[Path]:
    """What a killed process may have left half-written in `out`: the temporary files of its own (TEMP_PREFIXES),
    and those of atomic writes into the harness's folders (a draft, a reproducer), never through a link."""
    found = [entry for entry in out.iterdir() if entry.name.startswith(TEMP_PREFIXES)]
    for folder in (out / REPRO_DIR, out / ISSUES_DIR):
        if folder.is_dir() and not folder.is_symlink():
            found += [entry for entry in folder.iterdir()
                      if _ATOMIC_TEMP.fullmatch(entry.name) and entry.is_file() and not entry.is_symlink()]
    return found


def clear_harness_files(out: Path) -> None:
    """Remove exactly the files an earlier run or report recorded writing into `out` (and its temporary
    files), then the directories it recorded making, where they are empty now. Nothing else: a file the
    harness did not record is the user's."""
    files, dirs = recorded(out)
    if not files and not dirs:
        return
    clear_temporary_files(out)
    root = out.resolve()
    for name in files:
        entry = out / name
        if entry.name == LOCK_FILE or not (entry.is_symlink() or entry.is_file()):
            continue  # a directory where a file was recorded is not what the harness wrote
        if entry.parent.resolve() != root and root not in entry.parent.resolve().parents:
            continue  # through a link out of the directory
        entry.unlink()
    for name in sorted(dirs, key=lambda d: -len(PurePosixPath(d).parts)):
        entry = out / name
        if entry.is_dir() and not entry.is_symlink() and root in entry.resolve().parents:
            try:
                entry.rmdir()
            except OSError:  # it holds files the harness did not record: the user's
                pass


def repair_appended_files(out: Path, names: Iterable[str] = APPENDED_FILES) -> None:
    """Cut a last line left half-written (a killed run, a full disk) off every file a resumed run appends
    to, so that appending starts on a fresh line."""
    for name in names:
        path = out / name
        if not path.is_file():
            continue
        with path.open("r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if not size:
                continue
            f.seek(size - 1)
            if f.read(1) == b"\n":
                continue
            end, step = size, 1 << 16
            while end > 0:  # the last newline, read backwards a block at a time
                start = max(0, end - step)
                f.seek(start)
                block = f.read(end - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    f.truncate(start + newline + 1)
                    break
                end = start
            else:
                f.truncate(0)


def _remove(entry: Path) -> None:
    """A directory with its contents (never through a link), or a file or link."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
