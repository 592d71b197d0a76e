"""An on-disk cache of expectations, shared by runs, frameworks and processes.

The reference is deterministic, so an expectation computed once for a case can serve
every later run: the other frameworks of a matrix, and the next CI run. An entry is
keyed by everything the result depends on: the reference's own source code, NumPy's
version and long double, the spec (its hash, so each alternative spec of an explanation
has its own entries), the part, and the case's content (parameters, dtypes and the
bytes of its values; not its id, which a user file may reuse). A hit is therefore
exactly what the reference would compute, and any change misses.

One SQLite file per reference build: opening the cache removes the files of other
builds, so it does not grow with every edit. Concurrent runs (tox -p) share it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import pickle
import sqlite3
from pathlib import Path

import numpy as np

from conformance.model import Case, Expected, Spec

# Past this many elements a case's expectation is not stored: its framework calls cost
# more than its reference, and the file would grow with the array.
MAX_CACHED_ELEMENTS = 1 << 16
COMMIT_EVERY = 512
ENV_DIR = "KL_CACHE_DIR"
# The modules whose code decides an expectation (their source is part of the cache key).
REFERENCE_MODULES = ("conformance.model", "conformance.tolerance", "conformance.specload",
                     "conformance.reference.forward", "conformance.reference.grad",
                     "conformance.reference.rounding", "conformance.refcache")


def default_cache_dir() -> Path:
    """$KL_CACHE_DIR, else $XDG_CACHE_HOME/kl-conformance, else ~/.cache/kl-conformance."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kl-conformance"


@functools.lru_cache(maxsize=1)
def reference_build() -> str:
    """A digest of what the reference's results depend on besides its inputs: its code and NumPy."""
    digest = hashlib.blake2b(digest_size=8)
    for module in REFERENCE_MODULES:
        digest.update(Path(importlib.util.find_spec(module).origin).read_bytes())
    digest.update(f"{np.__version__} {np.finfo(np.longdouble)!r}".encode())
    return digest.hexdigest()


def case_key(case: Case, spec: Spec, part: str) -> bytes:
    """The key of one expectation: the spec, the part and everything of the case the reference reads."""
    digest = hashlib.blake2b(digest_size=20)
    p = case.params
    digest.update(repr((spec.hash, part, p.reduction, p.log_target, p.size_average, p.reduce,
                        case.dtype.input, case.dtype.target, case.input.shape, case.target.shape)).encode())
    for values in (case.input, case.target):
        digest.update(np.ascontiguousarray(values, dtype=np.float64).view(np.uint8))
    return digest.digest()


class ReferenceCache:
    """Expectations by `case_key`, in `directory`/reference-<build>.sqlite.

    Never raises on a cache problem: a cache that cannot be opened or written is
    simply not used (the run computes every reference), and says so in `problem`.
    """

    def __init__(self, directory: Path) -> None:
        self.problem: str | None = None
        self.hits = self.misses = 0
        self._pending: list[tuple[bytes, bytes]] = []
        self._db: sqlite3.Connection | None = None
        build = reference_build()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for old in directory.glob("reference-*.sqlite*"):
                if not old.name.startswith(f"reference-{build}.sqlite"):
                    old.unlink(missing_ok=True)
            self._db = sqlite3.connect(directory / f"reference-{build}.sqlite", timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS expected (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
        except (OSError, sqlite3.Error) as exc:
            self._disable(f"reference cache in {directory} not used: {exc}")

    def get(self, case: Case, spec: Spec, part: str) -> Expected | None:
        if self._db is None or _too_big(case):
            return None
        try:
            row = self._db.execute("SELECT value FROM expected WHERE key = ?", (case_key(case, spec, part),)).fetchone()
        except sqlite3.Error as exc:
            self._disable(f"reference cache not used: {exc}")
            return None
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return pickle.loads(row[0])

    def put(self, case: Case, spec: Spec, part: str, expected: Expected) -> None:
        if self._db is None or _too_big(case):
            return
        self._pending.append((case_key(case, spec, part), pickle.dumps(expected, protocol=pickle.HIGHEST_PROTOCOL)))
        if len(self._pending) >= COMMIT_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the pending entries in one transaction."""
        if self._db is None or not self._pending:
            return
        try:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR IGNORE INTO expected VALUES (?, ?)", self._pending)
        except sqlite3.Error as exc:
            self._disable(f"reference cache not written: {exc}")
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _disable(self, reason: str) -> None:
        self.problem = reason
        if self._db is not None:
            self._db.close()
        self._db = None


def _too_big(case: Case) -> bool:
    return case.input.size + case.target.size > MAX_CACHED_ELEMENTS
