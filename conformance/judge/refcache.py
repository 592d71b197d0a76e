"""An on-disk cache of expectations, shared by runs, frameworks and processes.

The reference is deterministic, so an expectation computed once for a case can serve
every later run: the other frameworks of a matrix, and the next CI run. An entry is
keyed by everything the result depends on: the reference's own source code, NumPy's
version and long double, the spec (its hash, so each alternative spec of an explanation
has its own entries), the part, and the case's content (parameters, dtypes and the
bytes of its values; not its id, which a user file may reuse). A hit is therefore
exactly what the reference would compute, and any change misses.

Beside the expectations, each build keeps the explanations derived from them: the spec
choices a diverging observation behaves as, and the profile deviations that document it.
They are functions of the case, the spec, the observation (and the profile's deviations)
and the code that derives them (the case judge and what it imports), which their key holds; a rerun of the
same framework reads them instead of the alternative expectations they would read.

Entries are a JSON header plus raw array bytes, deflated, never pickles: a cache file is
data, and reading it runs no code. One SQLite file per reference build, side by side: the
environments of a matrix run different NumPy versions (torch's NumPy 2, OneFlow's NumPy 1,
whose float64 log differs in the last bit of some bounds), and each keeps its own build.
A build is removed when nobody has opened it for MAX_IDLE_S, or, oldest first, while all
builds together pass MAX_TOTAL_BYTES; never while a process holds it open (each open cache
holds a shared lock on its build's lock file, and removal needs the exclusive lock).
Concurrent runs (tox -p) share a build.

The cache is a trust boundary: whoever can write its directory can change what a run expects. Every entry
is sealed with an HMAC-SHA256, under a secret key that never lives in the cache directory, of the build, its
table, its key and its bytes: $KL_CACHE_KEY (a CI secret), else a file only the user can read
(secret_path(), made on first use). Without the key nobody can seal an entry, with this module's functions or
any other, so an entry that is damaged, edited, sealed under another key or not at all is not trusted: it is
computed again, and stored sealed under this run's key. A key that cannot be used (a key file others can
read, or that lies in the cache directory) leaves the cache unused, said in one line on stderr. Against a key
that has leaked, a random sample of the expectations a run reads (the first one, and one in VERIFY_ONE_IN
after it, drawn unpredictably) is computed again by the case judge and compared byte for byte; a mismatch
drops every entry of the build, says so in one line on stderr, and the run goes on without the cache. A lock
file held by another process is waited for at most $KL_CACHE_LOCK_TIMEOUT_S seconds; then the run goes on
without the cache.

Stores and returns what the reference computed; never computes an expectation itself, and never
unpickles.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import importlib.util
import json
import os
import re
import secrets
import sqlite3
import stat
import struct
import sys
import time
import zlib
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # no flock (Windows): builds of other environments are then never removed
    fcntl = None

from conformance.core.case import Case
from conformance.core.model import Expected, Spec

# Past this many elements a case's expectation is not stored: its framework calls cost
# more than its reference, and the file would grow with the array.
MAX_CACHED_ELEMENTS = 1 << 16
# Past this size on disk no more entries are written. The default suite needs far less; an exhaustive
# suite with several samples would otherwise grow the file without a useful limit.
MAX_CACHE_BYTES = 512 * 2**20
# Builds of other reference versions or NumPy versions: removed when unused this long, or,
# oldest first, while all builds together pass this size.
MAX_IDLE_S = 30 * 86400
MAX_TOTAL_BYTES = 2 * MAX_CACHE_BYTES
COMMIT_EVERY = 512
ENV_DIR = "KL_CACHE_DIR"
# Expectations read from the cache that the case judge computes again and compares (besides the first of a run).
VERIFY_ONE_IN = 16
# How long a lock file another process holds is waited for before the run goes on without the cache.
ENV_LOCK_TIMEOUT = "KL_CACHE_LOCK_TIMEOUT_S"
DEFAULT_LOCK_TIMEOUT_S = 60.0
# The secret key that seals entries: this variable, else the user's own key file (secret_path).
ENV_SECRET = "KL_CACHE_KEY"
# Shorter keys are refused: an entry's bytes are no secret, so a short key could be found by trying keys.
MIN_SECRET_CHARS = 32
_MAC_BYTES = 32
# Where the code that decides a cached answer starts: the reference (and this module's entry format) for an
# expectation; the case judge, which asks for explanations and documentation, for an explanation. The modules
# whose source enters each key are these and every project module they import (code_modules).
REFERENCE_ROOTS = ("conformance.reference.forward", "conformance.reference.grad", "conformance.judge.refcache")
EXPLAIN_ROOTS = ("conformance.judge.casejudge",)


def default_cache_dir() -> Path:
    """$KL_CACHE_DIR, else $XDG_CACHE_HOME/kl-conformance, else ~/.cache/kl-conformance."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kl-conformance"


class SecretRefused(Exception):
    """No usable key to seal the cache's entries with; the message is one line: the problem and its fix."""


def secret_path() -> Path:
    """The user's key file: $XDG_CONFIG_HOME/kl-conformance/cache.key, else ~/.config/kl-conformance/cache.key."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "kl-conformance" / "cache.key"


def load_secret(cache_dir: Path) -> bytes:
    """The key that seals the entries of the cache in `cache_dir`: $KL_CACHE_KEY where it is set and not empty
    (a CI secret a fork's pull request is not given reads as empty), else the user's key file, made on first use.

    Raises
    ------
    SecretRefused
        the key is too short, or the key file is not one only this user can read and write, or it lies in the
        cache directory (whoever writes the cache could then write the key too), or it cannot be made.
    """
    value = os.environ.get(ENV_SECRET, "").strip()
    if value:
        if len(value) < MIN_SECRET_CHARS:
            raise SecretRefused(f"${ENV_SECRET} has {len(value)} characters, fewer than {MIN_SECRET_CHARS}. Fix: "
                                "set it to a long random secret, e.g. python -c 'import secrets; "
                                "print(secrets.token_hex(32))'")
        return value.encode()
    path = secret_path()
    try:
        cache, places = cache_dir.resolve(), (path.parent.resolve(), path.resolve())
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links
        raise SecretRefused(f"key file {path} cannot be resolved ({exc}). Fix: delete it, and a run makes a new "
                            "one") from None
    if any(place == cache or cache in place.parents for place in places):
        raise SecretRefused(f"key file {path} lies in the cache directory {cache_dir}, which others may write. Fix: "
                            f"set $XDG_CONFIG_HOME or $KL_CACHE_DIR so that they do not overlap, or set ${ENV_SECRET}")
    try:
        return _read_secret(path)
    except FileNotFoundError:
        _make_secret(path)
        return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    """The key in `path`, a regular file (not a link) of this user that nobody else may read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:  # made by the caller
        raise
    except OSError as exc:  # ELOOP: a symbolic link, which O_NOFOLLOW refuses to follow
        kind = "a symbolic link" if os.path.islink(path) else f"unreadable ({exc.strerror})"
        raise SecretRefused(f"key file {path} is {kind}. Fix: delete it, and a run makes a new one") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SecretRefused(f"key file {path} is not a regular file. Fix: delete it, and a run makes a new one")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise SecretRefused(f"key file {path} belongs to user id {st.st_uid}, not to this user "
                                f"({os.geteuid()}). Fix: delete it, and a run makes a new one")
        if os.name == "posix" and st.st_mode & 0o077:
            raise SecretRefused(f"key file {path} may be read or written by others (mode "
                                f"{stat.S_IMODE(st.st_mode):o}). Fix: chmod 600 {path}")
        value = handle.read(4096).strip()
    if len(value) < MIN_SECRET_CHARS:
        raise SecretRefused(f"key file {path} holds {len(value)} characters, fewer than {MIN_SECRET_CHARS}. "
                            "Fix: delete it, and a run makes a new one")
    return value


def _make_secret(path: Path) -> None:
    """A new random key in `path`, readable by this user only, written whole before it appears there (runs
    started together each make one; the first to link it into place wins, and all read that one)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink(missing_ok=True)
    except OSError as exc:
        raise SecretRefused(f"key file {path} could not be made ({exc.strerror or exc}). Fix: set ${ENV_SECRET} "
                            "to a long random secret, or $XDG_CONFIG_HOME to a folder this user can write") from None


_IMPORT = re.compile(rb"^[ \t]*import[ \t]+(conformance(?:\.\w+)*)", re.M)
_FROM_IMPORT = re.compile(rb"^[ \t]*from[ \t]+(conformance(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


@functools.lru_cache(maxsize=None)
def code_modules(roots: tuple[str, ...]) -> tuple[str, ...]:
    """`roots` and every project module they import, directly or through others, found by reading their source
    (nothing is imported; an import in a docstring counts too, which can only add a module): the code whose
    edits must change a cache key. Sorted by name."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in found:
            continue
        found.add(module)
        source = _source(module)
        todo += [m.decode() for m in _IMPORT.findall(source)]
        for package, names in _FROM_IMPORT.findall(source):
            # `from package import module` names a module; `from module import name` names the module
            package = package.decode()
            named = (n.split()[0] for n in re.sub(rb"#[^\n]*", b"", names).strip(b"()").decode().split(",") if n.strip())
            submodules = [f"{package}.{n}" for n in named if _is_module(f"{package}.{n}")]
            todo += submodules or [package]
    return tuple(sorted(m for m in found if m != "conformance"))


def _source(module: str) -> bytes:
    return _module_file(module).read_bytes()


def _is_module(name: str) -> bool:
    return _module_file(name) is not None


@functools.lru_cache(maxsize=None)
def _module_file(name: str) -> Path | None:
    """The source file of project module `name`, or None where `name` is no module; found on disk, without
    importing it (its package's own folder may lie elsewhere: pyproject.toml's package-dir)."""
    parts = name.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        folder = _package_folder(".".join(parts[:depth]))
        if folder is not None:
            base = folder.joinpath(*parts[depth:])
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    return path
            return None
    return None


@functools.lru_cache(maxsize=None)
def _package_folder(package: str) -> Path | None:
    """The folder of a package whose subpackages are installed from folders of their own (conformance and
    conformance.reference, cases, adapters, spec), else None."""
    if package != "conformance" and package.count(".") != 1:
        return None
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(locations[0]) if locations else None


@functools.lru_cache(maxsize=1)
def reference_build() -> str:
    """A digest of what the reference's results depend on besides its inputs: its code and NumPy."""
    digest = _source_digest(code_modules(REFERENCE_ROOTS))
    digest.update(f"{np.__version__} {np.finfo(np.longdouble)!r}".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def explain_build() -> bytes:
    """A digest of the code that turns expectations into an explanation (the case judge and what it imports)."""
    return _source_digest(code_modules(EXPLAIN_ROOTS)).digest()


def _source_digest(modules: tuple[str, ...]):
    """A blake2b digest of the modules' names and source files."""
    digest = hashlib.blake2b(digest_size=8)
    for module in modules:
        digest.update(module.encode() + b"\0" + _source(module))
    return digest


def case_key(content: bytes, spec: Spec, part: str, dialect: str = "canonical") -> bytes:
    """The key of one expectation: the spec, the part, the dialect and everything of the case the reference reads
    (`content`, the case's `content_digest`)."""
    return hashlib.blake2b(repr((spec.hash, part, dialect)).encode() + content, digest_size=20).digest()


def content_digest(case: Case) -> bytes:
    """Everything of the case the reference reads: parameters, dtypes, shapes and the values' bytes."""
    digest = hashlib.blake2b(digest_size=20)
    p = case.params
    digest.update(repr((p.reduction, p.log_target, p.size_average, p.reduce, p.prob_input,
                        case.dtype.input, case.dtype.target, case.input.shape, case.target.shape)).encode())
    for values in (case.input, case.target):
        digest.update(np.ascontiguousarray(values, dtype=np.float64).view(np.uint8))
    return digest.digest()


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
            self._lock = _hold(directory / f"reference-{build}.lock", lock_timeout_s())
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
        body = stored[_MAC_BYTES:]
        if hmac.compare_digest(stored[:_MAC_BYTES], mac(self._secret, table, key, body)):
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


class LockTimeout(OSError):
    """Another process held the cache's lock file past the time a run waits for it."""


def lock_timeout_s() -> float:
    """$KL_CACHE_LOCK_TIMEOUT_S, else DEFAULT_LOCK_TIMEOUT_S (a value that is not a number counts as unset)."""
    try:
        value = float(os.environ.get(ENV_LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT_S))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S
    return value if value >= 0 else DEFAULT_LOCK_TIMEOUT_S


def seal(secret: bytes, table: str, key: bytes, body: bytes) -> bytes:
    """`body` behind its mac under `secret`: the stored form of an entry."""
    return mac(secret, table, key, body) + body


def mac(secret: bytes, table: str, key: bytes, body: bytes) -> bytes:
    """An HMAC-SHA256 under `secret` of the reference build, the table, the key and the body: an entry moved to
    another key, build or table, cut short or edited no longer matches it, and without `secret` nobody can make
    one that does. An empty secret (a cache without a usable key) is refused."""
    if not secret:
        raise ValueError("no secret to seal the reference cache's entries with")
    message = reference_build().encode() + b"\0" + table.encode() + b"\0" + key + body
    return hmac.digest(secret, message, "sha256")


def _hold(lock_path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
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


def _too_big(case: Case) -> bool:
    return case.input.size + case.target.size > MAX_CACHED_ELEMENTS


# Entries are deflated with a preset dictionary of what every header repeats (field and rule names):
# a small case's entry shrinks to a fraction of its size, so the exhaustive suite fits the cap.
_RULE_NAMES = ("pointwise.formula", "pointwise.conventions.target_zero", "pointwise.conventions.target_negative",
               "pointwise.conventions.log_target_neg_inf", "pointwise.conventions.nan_propagation",
               "pointwise.conventions.infinities", "gradients.formula", "gradients.conventions.target_zero",
               "gradients.conventions.target_negative", "gradients.conventions.log_target_neg_inf",
               "gradients.conventions.infinite_input", "gradients.conventions.nan_propagation", "dialects.keras.clip",
               "dialects.keras.ratio", "errors.incompatible_shapes", "errors.unknown_reduction", "shapes.broadcasting")
_ZDICT = json.dumps([{"result_dtype": dtype, "shape": [4, 6], "value": ["<f8", [4, 6], 0, 192],
                      "bound": ["<f8", [4, 6], 192, 192], "error_id": None, "error_type": None, "error_match": None,
                      "warnings": [], "rules": [], "rule_map": ["|i1", [4, 6], 384, 24], "rule_names": list(_RULE_NAMES)}
                     for dtype in ("float64", "float32", "float16", "bfloat16")]).encode()
# A window just large enough to hold the dictionary, and little memory: a stream is set up for every entry,
# and a smaller one is cheaper to set up.
_WBITS, _MEMLEVEL = 13, 2
_DEFLATE = zlib.compressobj(1, zlib.DEFLATED, _WBITS, _MEMLEVEL, zlib.Z_DEFAULT_STRATEGY, _ZDICT)
_INFLATE = zlib.decompressobj(_WBITS, _ZDICT)


def pack(blob: bytes) -> bytes:
    """An encoded entry, deflated with the preset dictionary."""
    stream = _DEFLATE.copy()
    return stream.compress(blob) + stream.flush()


def unpack(stored: bytes) -> bytes:
    """The encoded entry that `pack` deflated; zlib.error where it is damaged."""
    stream = _INFLATE.copy()
    blob = stream.decompress(stored) + stream.flush()
    if not stream.eof:
        raise zlib.error("truncated entry")
    return blob


_ARRAY_FIELDS = ("value", "bound", "rule_map")
_EXPECTED_FIELDS = tuple(f.name for f in dataclasses.fields(Expected))
_ARRAY_DTYPES = ("<f8", "|i1")  # float64 values and bounds, int8 rule codes


def encode(expected: Expected) -> bytes:
    """An Expected as a JSON header (its plain fields, and where each array lies) and the arrays' bytes."""
    header, chunks, offset = {}, [], 0
    for f in dataclasses.fields(expected):
        value = getattr(expected, f.name)
        if f.name in _ARRAY_FIELDS:
            if value is None:
                header[f.name] = None
                continue
            array = np.asarray(value)  # tobytes() writes C order; ascontiguousarray would make 0-d arrays 1-d
            if array.dtype.str not in _ARRAY_DTYPES:
                array = array.astype(np.float64)
            header[f.name] = [array.dtype.str, list(array.shape), offset, array.nbytes]
            chunks.append(array.tobytes())
            offset += array.nbytes
        else:
            header[f.name] = list(value) if isinstance(value, tuple) else value
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head + b"".join(chunks)


# Parsed headers by their bytes. Entries of one shape, dtype and set of rules share a header, so even the
# exhaustive suite's entries have only a few thousand distinct headers; parsing each only once keeps JSON
# parsing out of most cache hits.
_LAYOUTS: dict[bytes, tuple] = {}
_MAX_LAYOUTS = 4096


def decode(blob: bytes) -> Expected:
    """The Expected that `encode` wrote."""
    (size,) = struct.unpack_from("<I", blob)
    head = blob[4:4 + size]
    layout = _LAYOUTS.get(head)
    if layout is None:
        layout = _layout(json.loads(head))
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[head] = layout
    plain, arrays = layout
    data = memoryview(blob)[4 + size:]
    fields = dict(plain)
    for name, dtype, shape, offset, nbytes in arrays:
        fields[name] = np.frombuffer(data[offset:offset + nbytes], dtype=dtype).reshape(shape).copy()
    return Expected(**fields)


def _layout(header: dict) -> tuple[tuple[tuple[str, object], ...], tuple[tuple, ...]]:
    """A header as the plain fields' values (lists as tuples: immutable, so entries may share them) and
    where each array lies; ValueError for an array of a dtype `encode` never writes."""
    plain, arrays = [], []
    for name in _EXPECTED_FIELDS:
        value = header.get(name)
        if name in _ARRAY_FIELDS and value is not None:
            dtype, shape, offset, nbytes = value
            if dtype not in _ARRAY_DTYPES:
                raise ValueError(f"unexpected dtype {dtype!r} in a cache entry")
            arrays.append((name, dtype, tuple(shape), offset, nbytes))
        else:
            plain.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(plain), tuple(arrays)
