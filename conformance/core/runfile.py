"""Reads one file of a run directory the way every reader of a run must: bounded, and refusing what no run
writes (a file that cannot be read, a line or a document too large, another format version), naming the file.

Shared by the readers of results.jsonl (core/results.py), details.jsonl (core/details.py) and run.json
(core/manifest.py); knows none of their fields, and never writes.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterator

from conformance.core.errors import ResultsError
from conformance.core.model import FORMAT_VERSION

MAX_LINE_BYTES = 4 * 2**20  # one line of results.jsonl or details.jsonl: a row's texts are cut far shorter


def is_present(path: Path, directory: bool = False) -> bool:
    """Whether a run's file (a regular file), or with `directory` a run directory, is there. One that cannot be
    followed or read (a symbolic link that loops, a directory without permission), or a file that is not a
    regular one (a FIFO, whose reading would never end), is refused naming it, never taken for absent."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path),
                           fix="pass the run directory itself, or make it readable") from None
    if directory:
        return stat.S_ISDIR(mode)
    if not stat.S_ISREG(mode):
        raise ResultsError("not a regular file", file=str(path), fix="regenerate the run")
    return True


def _os_problem(exc: OSError) -> str:
    return "a symbolic link that loops" if exc.errno == errno.ELOOP else exc.strerror or type(exc).__name__


def numbered_lines(path: Path, fix: str) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of a run's JSON Lines file, each at most MAX_LINE_BYTES; a longer one, or a file that
    cannot be read, names the file (and the line)."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None
    with f:
        number = 0
        while line := _read(f, MAX_LINE_BYTES + 1, path, fix):
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                raise ResultsError(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB, which no run writes",
                                   file=str(path), where=f"line {number}", fix=fix)
            yield number, line


def _read(f, limit: int, path: Path, fix: str) -> bytes:
    try:
        return f.readline(limit)
    except OSError as exc:  # a directory named like the file, a read error
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None


def load_json(text: bytes | str):
    """json.loads, where a document nested deeper than Python's stack is a ValueError like any unreadable one."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_json_file(path: Path, limit: int, what: str, fix: str):
    """The JSON document in `path`, `what` a message calls it (None where there is none): an unreadable,
    unparsable or larger than `limit` one is refused naming the file."""
    if not is_present(path):
        return None
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ResultsError(f"cannot be read ({_os_problem(exc)})", file=str(path), fix=fix) from None
    if len(data) > limit:
        raise ResultsError(f"larger than {limit // 2**20} MiB, which no run writes", file=str(path), fix=fix)
    try:
        return load_json(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultsError(f"unreadable {what} ({exc})", file=str(path), fix=fix) from None


_NONFINITE = ("nan", "inf", "-inf")


def to_float(value: Any) -> float | None:
    """A number of a row or a detail as a float (its non-finite ones written as text), or None where it is none."""
    if type(value) in (int, float):
        return float(value)
    return float(value) if value in _NONFINITE else None


def excerpt(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: its JSON text, ASCII only, cut to `limit`."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit] + "..."


def check_format_version(document: dict[str, Any], shown: str, where: str | None = None) -> None:
    """Refuse a row or manifest of another format version (none written means version 1)."""
    version = document.get("format_version", 1)
    if version != FORMAT_VERSION:
        raise ResultsError(f"written in format version {version!r}; this harness reads version {FORMAT_VERSION}",
                           file=shown, where=where,
                           fix="re-baseline: run the frameworks again with this harness (kl-conformance run ... "
                               "--force, or tox -m conformance), or read it with the harness version that wrote it")
