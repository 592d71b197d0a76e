"""A folder a generator fills with files of its own (the documentation's findings pages, `repro --all`'s
reproducers), and the record of the files it wrote there (RECORD_FILE).

A generator writes again only into a folder of its own: before anything is written, a folder holding a file its
record does not name (a page written by hand, another tool's output) is refused, and so is a run directory or a
folder inside one. Each file goes to a temporary file beside it and is renamed into place, so a full disk leaves
no half file. A file recorded before and not written again is removed; nothing else ever is.

Owns the record and the checks on such a folder; knows nothing of what the files hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conformance.core.errors import UsageError
from conformance.core.atomicfile import write_atomic
from conformance.core.manifest import MANIFEST_FILE
from conformance.core.results import RESULTS_FILE
from conformance.core.rundirs import RUNS_FILE

RECORD_FILE = ".kl-conformance-written"
RUN_FILES = (MANIFEST_FILE, RUNS_FILE, RESULTS_FILE)  # a folder holding one is a run's (or a merged report's)


class WriteFailed(Exception):
    """A file could not be written into the folder (a full disk, a quota, a file size limit): one line, and the
    command ends with exit 3. Every file there is whole: the one being written never replaced its old self."""


class GeneratedFolder:
    """The folder `path` as `command` fills it: `check` it before anything is written, `write` the files (each
    recorded before it is written), then `finish` (the files of an earlier command not written again are removed).

    `option` is the command-line option that named the folder, `usual` the folder it usually is (for the fix)."""

    def __init__(self, path: str | Path, command: str, option: str = "--out", usual: str | None = None) -> None:
        self.path = Path(path)
        self.command, self.option, self.usual = command, option, usual
        self._before: list[str] = []  # what the record named before this command
        self._recorded: set[str] = set()  # what the record on disk names now
        self._written: list[str] = []

    def check(self) -> None:
        """Refuse, before anything is written, a folder this command cannot fill.

        Raises
        ------
        UsageError
            when the path is a file, cannot be made or written, is or lies inside a run directory, or holds a
            file this command's record there does not name.
        """
        out, where = self.path, self.option
        if out.exists() and not out.is_dir():
            raise UsageError("exists and is not a directory", file=str(out), where=where,
                             fix=f"choose a directory path for {where}")
        existing = out if out.is_dir() else next(p for p in out.absolute().parents if p.exists())
        if not existing.is_dir():
            raise UsageError(f"cannot make the folder ({existing} is not a directory)", file=str(out), where=where,
                             fix=f"choose a directory path for {where}")
        for folder in (existing.resolve(), *existing.resolve().parents):
            held = next((name for name in RUN_FILES if (folder / name).is_file()), None)
            if held is not None:
                inside = "is a run directory" if folder == out.resolve() else f"is inside the run directory {folder}"
                raise UsageError(f"{inside} (it holds {held}); {self.command} never writes into a run",
                                 file=str(out), where=where, fix=self._fix("a folder outside any run"))
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"cannot write to the folder ({existing} is not writable)", file=str(out), where=where,
                             fix="choose a folder you can write to")
        if out.is_dir():
            self._before = self._read_record()
            self._recorded = set(self._before)
            foreign = [name for name in self._entries() if not self._is_ours(name)]
            if foreign:
                raise UsageError(f"holds {foreign[0]!r}" + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                                 + f", which {self.command} did not write (its record there, {RECORD_FILE}, names "
                                   "the files it wrote)", file=str(out), where=where,
                                 fix=self._fix("a new or empty folder") + ", or move those files out of it")

    def write(self, files: dict[str, str]) -> list[Path]:
        """Write each (file name, text) atomically, each recorded before it is written (a command cut short
        leaves no file of its own unrecorded); return their paths.

        Raises
        ------
        WriteFailed
            on any error of the file system (a full disk): one line naming the file and the error.
        """
        assert all(_is_plain(name) for name in files), list(files)
        new = [name for name in files if name not in self._recorded]
        written, name = [], RECORD_FILE
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if new:
                self._record([*self._before, *self._written, *new])
            for name, text in files.items():
                write_atomic(self.path / name, text)
                self._written.append(name)
                written.append(self.path / name)
        except OSError as exc:
            raise self._failed(name, exc) from None
        return written

    def finish(self) -> None:
        """Remove the files an earlier command recorded here and this one did not write again (with what a
        killed command left half-written), and record exactly what this one wrote."""
        if not self.path.is_dir():
            return  # nothing written, and nothing there before
        kept, name = set(self._written), RECORD_FILE
        try:
            for name in self._entries():
                entry = self.path / name
                stale = name in self._before and name not in kept and not entry.is_dir()
                if stale or (name.startswith(".") and name != RECORD_FILE and self._is_ours(name)):
                    entry.unlink()
            name = RECORD_FILE
            self._record(self._written)
        except OSError as exc:
            raise self._failed(name, exc) from None

    def _entries(self) -> list[str]:
        try:
            return sorted(entry.name for entry in self.path.iterdir())
        except OSError as exc:
            raise UsageError(f"cannot read the folder ({exc.strerror})", file=str(self.path), where=self.option,
                             fix="choose a folder you can read and write") from None

    def _is_ours(self, name: str) -> bool:
        """The record itself, a file it names, or a temporary file one of those left (a killed command)."""
        if name == RECORD_FILE or (name in self._recorded and not (self.path / name).is_dir()):
            return True
        return any(name.startswith(f".{own}.") for own in (RECORD_FILE, *self._recorded))

    def _read_record(self) -> list[str]:
        """The files this command's record names; another command's record, or a damaged one, is no record."""
        try:
            record = json.loads((self.path / RECORD_FILE).read_bytes())
        except (OSError, ValueError):
            return []
        if not isinstance(record, dict) or record.get("command") != self.command:
            return []
        names = record.get("written")
        return [n for n in names if isinstance(n, str) and _is_plain(n)] if isinstance(names, list) else []

    def _record(self, names: list[str]) -> None:
        names = sorted(set(names))
        write_atomic(self.path / RECORD_FILE, json.dumps({"command": self.command, "written": names}, indent=1) + "\n")
        self._recorded = set(names)

    def _fix(self, choice: str) -> str:
        return f"choose {choice} for {self.option}" + (f" ({self.usual})" if self.usual else "")

    def _failed(self, name: str, exc: OSError) -> WriteFailed:
        return WriteFailed(f"{self.path}: {self.option}: cannot write {name} ({exc.strerror or exc}); every file there is whole, none half-written. Fix: free "
                             f"some space or choose another {self.option}, and run the command again")


def _is_plain(name: str) -> bool:
    """A file name directly inside the folder, never hidden (a name from a record is data: never a path)."""
    return bool(name) and not name.startswith(".") and not any(c in name for c in "/\\\0")
