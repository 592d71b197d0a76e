"""Files written whole or not at all: into a temporary file beside the target, then renamed into place, so that no
reader (a report, a resumed run, a CI job reading a baseline) ever sees one half-written, whatever stops the writer.

Writes files only; imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Stream lines into a temporary file beside `path`, then rename it into place; memory stays flat."""
    with AtomicLines(path) as f:
        for line in lines:
            f.write(line)


class AtomicLines:
    """A file written piece by piece into a temporary file beside `path`, and renamed into place when the
    `with` block ends without an error (else removed): no reader ever sees it half-written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd, self._tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; the file is a report like the others
            self._file = os.fdopen(fd, "w", encoding="utf-8")
        except BaseException:
            # a Ctrl-C inside fdopen may come after its file object took the descriptor (and closed it, dropped):
            # closing it again must not turn the interruption into an OSError, nor keep the temporary file
            with contextlib.suppress(OSError):
                os.close(fd)
            Path(self._tmp).unlink(missing_ok=True)
            raise

    def write(self, text: str) -> None:
        self._file.write(text)

    def __enter__(self) -> "AtomicLines":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self._file.close()
            if exc_type is None:
                os.replace(self._tmp, self.path)
        finally:
            Path(self._tmp).unlink(missing_ok=True)  # gone already once renamed


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place: no reader sees it half-written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600; the file is a report like the others
            f.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone already once renamed


def _umask() -> int:
    """The process's umask (reading it means setting it; the parent is single-threaded)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place."""
    write_lines_atomic(path, (text,))
