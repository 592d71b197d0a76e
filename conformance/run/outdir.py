"""The output directory of `run` and `report`: checked before anything is written, cleared only on --force.

A directory that already holds files is refused unless the user says what to do with
them: `--resume` continues the run there, `--force` removes what the harness wrote
there before (results, details, reports, repro/, cases/, baseline.json), so no stale
file sits beside new results. Files the harness did not write are left alone.

Owns the checks on the output directory; writes no results or reports, and never imports a framework.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from conformance.core.errors import UsageError
from conformance.core.results import DETAILS_FILE, MANIFEST_FILE, RESULTS_FILE
from conformance.core.rundirs import REPORT_FILE, RUNS_FILE

HARNESS_FILES = (RESULTS_FILE, DETAILS_FILE, MANIFEST_FILE, RUNS_FILE, REPORT_FILE, "report.html", "junit.xml",
                 "summary.json", "baseline.json")
HARNESS_DIRS = ("repro", "cases")
# temporary files of atomic writes and of the writability test, left behind by a killed process
TEMP_PREFIXES = (".write-test-", ".junit-") + tuple(f".{name}." for name in HARNESS_FILES)


def check_out_dir(path: str | Path, *, resume: bool = False, force: bool = False) -> Path:
    """Refuse an --out that cannot be used, before anything is written or created.

    Raises
    ------
    UsageError
        when the path is a file, is not writable, or is a non-empty directory without
        --resume or --force.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError("exists and is not a directory", file=str(out), where="--out",
                         fix="choose a directory path for --out")
    if out.is_dir():
        try:
            entries = sorted(entry.name for entry in out.iterdir())
        except OSError as exc:
            raise UsageError(f"cannot read the output directory ({exc.strerror})", file=str(out), where="--out",
                             fix="choose a directory you can read and write") from None
        if entries and not (resume or force):
            raise UsageError(f"the output directory is not empty (it holds {entries[0]!r}"
                             + (f" and {len(entries) - 1} more" if len(entries) > 1 else "") + ")",
                             file=str(out), where="--out",
                             fix="pass --force to replace what an earlier run wrote there, --resume to continue "
                                 "that run, or choose another directory")
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


def prepare_out_dir(path: str | Path, *, force: bool = False) -> Path:
    """Create the output directory (on --force, first remove what the harness wrote there) and prove it
    writable. Called only once every input has been checked."""
    out = Path(path)
    try:
        if force and out.is_dir():
            clear_harness_files(out)
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to the output directory ({exc.strerror})", file=str(out), where="--out",
                         fix="choose a directory you can write to") from None
    return out


def clear_temporary_files(out: Path) -> None:
    """Remove what a killed process left half-written (TEMP_PREFIXES): a resumed run starts clean of it."""
    for entry in out.iterdir():
        if entry.name.startswith(TEMP_PREFIXES):
            _remove(entry)


def clear_harness_files(out: Path) -> None:
    """Remove every file and directory the harness writes into a run or report directory."""
    for entry in out.iterdir():
        if entry.name in HARNESS_DIRS and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.name in HARNESS_FILES or entry.name.startswith(TEMP_PREFIXES):
            _remove(entry)


def _remove(entry: Path) -> None:
    """A directory with its contents (never through a link), or a file or link."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
