"""Seals the reference cache's entries with an HMAC-SHA256 under a secret key, and finds that key: $KL_CACHE_KEY,
else a key file only the user can read.

The cache is a trust boundary: whoever can write its directory can change what a run expects. Every entry is
sealed, under a secret key that never lives in the cache directory, of the build, its table, its key and its
bytes: $KL_CACHE_KEY (a CI secret), else a file only the user can read (secret_path(), made on first use). Without
the key nobody can seal an entry, with these functions or any other, so an entry that is damaged, edited, sealed
under another key or not at all is not trusted (the cache computes it again). A key that cannot be used (a key
file others can read, or that lies in the cache directory) is refused, with its fix.

Makes and checks seals and the key file; never reads or writes the cache's entries.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from conformance.judge.cachekey import reference_build

# The secret key that seals entries: this variable, else the user's own key file (secret_path).
ENV_SECRET = "KL_CACHE_KEY"
# Shorter keys are refused: an entry's bytes are no secret, so a short key could be found by trying keys.
MIN_SECRET_CHARS = 32
MAC_BYTES = 32


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
