"""An on-disk cache of expectations, shared by runs, frameworks and processes.

The reference is deterministic, so an expectation computed once for a case can serve every later run: the other
frameworks of a matrix, and the next CI run. An entry is keyed by everything the result depends on (cachekey.py),
so a hit is exactly what the reference would compute, and any change misses.

Beside the expectations, each build keeps the explanations derived from them: the spec
choices a diverging observation behaves as, and the profile deviations that document it.
They are functions of the case, the spec, the observation (and the profile's deviations)
and the code that derives them (the case judge and what it imports), which their key holds; a rerun of the
same framework reads them instead of the alternative expectations they would read.

Entries are a JSON header plus raw array bytes, deflated, never pickles (cacheentry.py), in one SQLite file per
reference build (cachebuilds.py). Each is sealed under a secret key (cacheseal.py): an entry that is not sealed
under this run's key is computed again, and stored sealed under it. Against a key that has leaked, a random sample
of the expectations a run reads (the first one, and one in VERIFY_ONE_IN after it, drawn unpredictably) is
computed again by the case judge and compared byte for byte; a mismatch drops every entry of the build, says so
in one line on stderr, and the run goes on without the cache. A key that cannot be used, or a lock file that
another process holds too long, leaves the cache unused, said in one line on stderr.

Stores and returns what the reference computed; never computes an expectation itself, and never
unpickles.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import struct
import sys
import zlib
from pathlib import Path

from conformance.core.case import Case
from conformance.core.model import Expected, Spec
from conformance.judge.cachebuilds import MAX_CACHE_BYTES, LockTimeout, hold, lock_timeout_s, remove_unused_builds
from conformance.judge.cacheentry import decode, encode, pack, unpack
from conformance.judge.cachekey import case_key, content_digest, explain_build, reference_build
from conformance.judge.cacheseal import ENV_SECRET, MAC_BYTES, SecretRefused, load_secret, mac, seal, secret_path

# Past this many elements a case's expectation is not stored: its framework calls cost
# more than its reference, and the file would grow with the array.
MAX_CACHED_ELEMENTS = 1 << 16
COMMIT_EVERY = 512
ENV_DIR = "KL_CACHE_DIR"
# Expectations read from the cache that the case judge computes again and compares (besides the first of a run).
VERIFY_ONE_IN = 16


def default_cache_dir() -> Path:
    """$KL_CACHE_DIR, else $XDG_CACHE_HOME/kl-conformance, else ~/.cache/kl-conformance."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kl-conformance"


class ReferenceCache:
    """Expectations by `case_key`, in `directory`/reference-<build>.sqlite.

    Never raises on a cache problem: a cache that cannot be opened or written, or whose key cannot be used, is
    simply not used (the run computes every reference), and says so in `problem`. Entries not sealed under this
    run's key are misses, counted in `untrusted`.
    """

    def __init__(self, directory: Path) -> None:
        self._problem: str | None = None
        self.untrusted = 0
        self.hits = self.misses = 0
        self.full = False
        self._pending: list[tuple[bytes, bytes]] = []
        self._pending_explained: list[tuple[bytes, bytes]] = []
        self.explained_hits = self.explained_misses = 0
        self._last_case: Case | None = None
        self._last_content = b""
        self._db: sqlite3.Connection | None = None
        self._lock = None
        self.verify_reads: dict[str, int] = {}
        self.dropped = False
        self._secret = b""
        build = reference_build()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._secret = load_secret(directory)
            self._lock = hold(directory / f"reference-{build}.lock", lock_timeout_s())
            remove_unused_builds(directory, keep=build)
            self.path = directory / f"reference-{build}.sqlite"
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS expected (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS explained (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
        except (LockTimeout, SecretRefused) as exc:
            self._disable(f"reference cache in {directory} not used: {exc}")
            print(f"kl-conformance: warning: {self.problem}", file=sys.stderr, flush=True)
        except (OSError, sqlite3.Error) as exc:
            self._disable(f"reference cache in {directory} not used: {exc}")

    @property
    def problem(self) -> str | None:
        """What kept the cache from serving (run.json's reference_cache.problem), and how many entries it did not
        trust; None where nothing did."""
        n = self.untrusted
        untrusted = (f"{n} {'entry' if n == 1 else 'entries'} not sealed under this run's key computed again and "
                     "sealed under it") if n else None
        return "; ".join(p for p in (self._problem, untrusted) if p) or None

    @problem.setter
    def problem(self, value: str | None) -> None:
        self._problem = value

    def _content(self, case: Case) -> bytes:
        """The case's content_digest, hashed once for the many expectations (parts, dialects, the alternative
        specs of explanations) asked of the same case object in a row."""
        if self._last_case is not case:
            self._last_case, self._last_content = case, content_digest(case)
        return self._last_content

    def get(self, case: Case, spec: Spec, part: str, dialect: str = "canonical") -> Expected | None:
        if self._db is None or _too_big(case):
            return None
        key = case_key(self._content(case), spec, part, dialect)
        stored = self._read("expected", key)
        if stored is None:
            self.misses += self._db is not None
            return None
        stored = self._unseal("expected", key, stored)
        if stored is None:
            self.misses += 1
            return None
        try:
            found = decode(unpack(stored))
        except (ValueError, TypeError, KeyError, struct.error, zlib.error) as exc:  # a damaged entry is a miss
            self.problem = f"a damaged reference cache entry was recomputed: {exc}"
            self.misses += 1
            return None
        self.hits += 1
        return found

    def put(self, case: Case, spec: Spec, part: str, expected: Expected, dialect: str = "canonical") -> None:
        if self._db is None or self.full or _too_big(case):
            return
        key = case_key(self._content(case), spec, part, dialect)
        self._pending.append((key, seal(self._secret, "expected", key, pack(encode(expected)))))
        if len(self._pending) >= COMMIT_EVERY:
            self.flush()

    def explanation_key(self, case: Case, spec: Spec, part: str, dialect: str, observed: bytes) -> bytes | None:
        """The key of an explanation: the explaining code, the expectation's key and `observed` (what of the
        observation the explanation reads, encoded by the caller); None where the case is not stored."""
        if self._db is None or _too_big(case):
            return None
        return hashlib.blake2b(explain_build() + case_key(self._content(case), spec, part, dialect) + observed,
                               digest_size=20).digest()

    def get_explanation(self, key: bytes) -> bytes | None:
        """The explanation stored under `key` (explanation_key), as the caller encoded it, or None."""
        if self._db is None:
            return None
        stored = self._read("explained", key)
        if stored is not None:
            stored = self._unseal("explained", key, stored)
        if stored is None:
            self.explained_misses += 1
            return None
        self.explained_hits += 1
        return stored

    def should_verify(self, table: str = "expected") -> bool:
        """Whether the case judge should compute what it just read from `table` again and compare (verify): the
        first entry of each table read by this cache, then one in VERIFY_ONE_IN, drawn so that nobody can
        predict which."""
        self.verify_reads[table] = self.verify_reads.get(table, 0) + 1
        return self.verify_reads[table] == 1 or secrets.randbelow(VERIFY_ONE_IN) == 0

    def verify(self, found: Expected | bytes, computed: Expected | bytes) -> bool:
        """Whether an expectation (or an encoded explanation) read from the cache is the one computed again; on a
        mismatch the whole cache is dropped (someone or something changed an entry and sealed it again)."""
        same = found == computed if isinstance(found, bytes) else encode(found) == encode(computed)
        if same:
            return True
        self.drop(f"{'an explanation' if isinstance(found, bytes) else 'an expectation'} read from it differs from "
                  "the one computed again")
        return False

    def _unseal(self, table: str, key: bytes, stored: bytes) -> bytes | None:
        """The entry's bytes where it is sealed under this run's key, else None: the caller computes it again and
        stores it sealed under this key. Such an entry was damaged, edited, or written under another key (another
        user's, a CI job's without the secret): nothing tells them apart, and none is trusted."""
        body = stored[MAC_BYTES:]
        if hmac.compare_digest(stored[:MAC_BYTES], mac(self._secret, table, key, body)):
            return body
        self.untrusted += 1
        if self.untrusted == 1:
            print(f"kl-conformance: warning: reference cache {self.path}: entries not sealed under this run's key "
                  f"(${ENV_SECRET}, else {secret_path()}) are computed again and sealed under it", file=sys.stderr,
                  flush=True)
        return None

    def drop(self, reason: str) -> None:
        """Remove every entry of this build and go on without the cache, saying why in one line on stderr."""
        where = getattr(self, "path", "the reference cache")
        try:
            if self._db is not None:
                with self._db:
                    self._db.execute("BEGIN")
                    self._db.execute("DELETE FROM expected")
                    self._db.execute("DELETE FROM explained")
            done = "every entry removed"
        except sqlite3.Error as exc:
            done = f"its entries could not be removed ({exc}); delete the file"
        self._pending.clear()
        self._pending_explained.clear()
        self.dropped = True
        self._disable(f"reference cache {where} dropped: {reason}; {done}, and this run computes every "
                      f"expectation (whoever changed it held the key: keep ${ENV_SECRET} and the key file from "
                      "jobs you do not trust)")
        print(f"kl-conformance: warning: {self.problem}", file=sys.stderr, flush=True)

    def _read(self, table: str, key: bytes) -> bytes | None:
        """The value stored under `key` in `table`, or None; a database error disables the cache."""
        try:
            row = self._db.execute(f"SELECT value FROM {table} WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            self._disable(f"reference cache not used: {exc}")
            return None
        return None if row is None else row[0]

    def put_explanation(self, key: bytes, value: bytes) -> None:
        if self._db is None or self.full:
            return
        self._pending_explained.append((key, seal(self._secret, "explained", key, value)))
        if len(self._pending_explained) >= COMMIT_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the pending entries in one transaction."""
        if self._db is None or not (self._pending or self._pending_explained):
            return
        try:
            with self._db:
                self._db.execute("BEGIN")
                # REPLACE: an entry computed again because it was not sealed under this key is sealed anew
                self._db.executemany("INSERT OR REPLACE INTO expected VALUES (?, ?)", self._pending)
                self._db.executemany("INSERT OR REPLACE INTO explained VALUES (?, ?)", self._pending_explained)
        except sqlite3.Error as exc:
            self._disable(f"reference cache not written: {exc}")
        self._pending.clear()
        self._pending_explained.clear()
        if sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*")) > MAX_CACHE_BYTES:
            self.full = True
            self.problem = f"reference cache full ({MAX_CACHE_BYTES // 2**20} MB): later expectations not stored"

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock is not None:
            self._lock.close()  # releases the shared lock
            self._lock = None

    def _disable(self, reason: str) -> None:
        self.problem = reason
        if self._db is not None:
            self._db.close()
        self._db = None


def _too_big(case: Case) -> bool:
    return case.input.size + case.target.size > MAX_CACHED_ELEMENTS
