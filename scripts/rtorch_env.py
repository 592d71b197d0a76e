#!/usr/bin/env python3
"""Run a command with R torch at hand: built once from its source archives, then reused from a cache.

R torch comes from CRAN, which some machines (this project's CI among them) cannot reach. Given the
folder that holds its source archives, this builds R torch with scripts/build-rtorch.sh into a cache
keyed by everything the build depends on, and runs the command with KL_RTORCH_LIB and TORCH_HOME
pointing at that build, so a second run on the same machine reuses it.

Usage:
    python scripts/rtorch_env.py COMMAND [ARG...]

Environment:
    KL_RTORCH_SOURCES  the folder holding the archives that scripts/rtorch-sources.sha256 lists (their
                       checksums are verified). Unset: the command runs as it is, and finds an installed
                       R torch, or reports R torch as not run with the reason.
    KL_RTORCH_LIB      an R library holding R torch already (with TORCH_HOME): used as it is, no build.
    KL_RTORCH_CACHE    where builds are kept (default: $XDG_CACHE_HOME/kl-conformance/rtorch, else
                       ~/.cache/kl-conformance/rtorch); one folder per key.

The command sees KL_RTORCH_LIB, TORCH_HOME and R_LIBS (the build's library first). When sources are given,
R torch is required: the command runs with KL_REQUIRE_FRAMEWORKS=rtorch, so the
test suite does not skip an R torch that fails to load. Exit 2: the sources are not what the checksum
file names; exit 3: the build failed (its log is kept and its last lines printed).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NoReturn

SCRIPTS = Path(__file__).resolve().parent
BUILD_SCRIPT = SCRIPTS / "build-rtorch.sh"
CHECKSUMS = SCRIPTS / "rtorch-sources.sha256"
# The Debian packages whose versions change what the build produces.
KEY_PACKAGES = ("libtorch-dev", "r-base-core", "r-cran-rcpp")
LOG_TAIL_LINES = 40


def say(text: str) -> None:
    print(f"rtorch_env: {text}", file=sys.stderr, flush=True)


def fail(code: int, text: str) -> NoReturn:
    say(text)
    raise SystemExit(code)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_archives() -> dict[str, str]:
    """Archive name -> sha256, from scripts/rtorch-sources.sha256 (sha256sum's format)."""
    pinned = {}
    for line in CHECKSUMS.read_text().splitlines():
        if line.strip():
            checksum, name = line.split()
            pinned[name] = checksum
    return pinned


def verified_archives(sources: Path) -> dict[str, Path]:
    """The pinned archives in `sources`, each checked against its checksum."""
    if not sources.is_dir():
        fail(2, f"KL_RTORCH_SOURCES={sources} is not a folder; name the folder that holds "
                f"{', '.join(pinned_archives())}")
    archives = {}
    for name, checksum in pinned_archives().items():
        path = sources / name
        if not path.is_file():
            fail(2, f"KL_RTORCH_SOURCES={sources}: {name} is missing; the folder must hold "
                    f"{', '.join(pinned_archives())}")
        actual = sha256_of(path)
        if actual != checksum:
            fail(2, f"KL_RTORCH_SOURCES={sources}: {name} has sha256 {actual}, not {checksum} "
                    f"({CHECKSUMS.name}); give the archive that file names")
        archives[name] = path
    return archives


def debian_version(package: str) -> str:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "absent"


def build_key(archives: dict[str, Path]) -> tuple[str, dict[str, str]]:
    """A key naming everything the build depends on: the archives (verified: their pinned checksums), the build
    script, the system packages."""
    pinned = pinned_archives()
    inputs = {name: pinned[name] for name in sorted(archives)}
    inputs[BUILD_SCRIPT.name] = sha256_of(BUILD_SCRIPT)
    inputs.update({package: debian_version(package) for package in KEY_PACKAGES})
    inputs["LANTERN_CXXFLAGS"] = os.environ.get("LANTERN_CXXFLAGS", "")
    inputs["RTORCH_OPT"] = os.environ.get("RTORCH_OPT", "")
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return key, inputs


def cache_root() -> Path:
    named = os.environ.get("KL_RTORCH_CACHE")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kl-conformance" / "rtorch"


def unpack(archive: Path, into: Path) -> Path:
    """Unpacks an archive of one top folder and returns that folder; members leaving it are refused."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            for member in tar.getmembers():
                target = (into / member.name).resolve()
                if not str(target).startswith(str(into.resolve()) + os.sep) or member.issym() or member.islnk():
                    fail(2, f"{archive}: member {member.name!r} leaves the archive's folder")
            tar.extractall(into)
    tops = [entry for entry in into.iterdir() if entry.is_dir()]
    if len(tops) != 1:
        fail(2, f"{archive}: expected one top folder, found {len(tops)}")
    return tops[0]


def is_ready(prefix: Path) -> bool:
    return (prefix / "ready.json").is_file() and (prefix / "torch-home" / "lib" / "liblantern.so").exists() \
        and (prefix / "Rlib" / "torch" / "DESCRIPTION").is_file()


def build(archives: dict[str, Path], prefix: Path, inputs: dict[str, str]) -> None:
    """Builds R torch into `prefix` with build-rtorch.sh; `ready.json` is written last, so a build that
    stopped half way is never mistaken for a finished one."""
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    log = prefix / "build.log"
    started = time.monotonic()
    say(f"building R torch into {prefix} (log: {log}); this takes a while on a cold machine")
    with tempfile.TemporaryDirectory(prefix="rtorch-src-") as scratch:
        scratch_path = Path(scratch)
        torch_src = unpack(archives["torch-0.11.0.tar.gz"], scratch_path / "torch")
        coro_src = unpack(archives["coro-1.1.0.tar.gz"], scratch_path / "coro")
        env = dict(os.environ, RTORCH_APT="0")
        with log.open("w") as stream:
            result = subprocess.run(["bash", str(BUILD_SCRIPT), str(torch_src), str(coro_src), str(prefix)],
                                    stdout=stream, stderr=subprocess.STDOUT, env=env)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        print("\n".join(tail), file=sys.stderr)
        fail(3, f"building R torch failed (exit {result.returncode}); the whole log is {log}")
    shutil.rmtree(prefix / "build", ignore_errors=True)  # compile trees: the install needs none of them
    seconds = round(time.monotonic() - started)
    (prefix / "ready.json").write_text(json.dumps({"inputs": inputs, "build_s": seconds}, indent=1) + "\n")
    say(f"built R torch in {seconds} s")


def provide(sources: Path) -> Path:
    """The prefix of an R torch built from `sources`: the cached build for these inputs, built if missing.
    A build that is ready is reused before anything is installed; otherwise the Debian packages come first,
    since their versions are part of the key."""
    archives = verified_archives(sources)
    root = cache_root()
    key, _ = build_key(archives)
    if is_ready(root / key):
        say(f"reusing the R torch build at {root / key}")
        return root / key
    packages = subprocess.run(["bash", str(BUILD_SCRIPT), "--apt-only"], capture_output=True, text=True)
    if packages.returncode != 0:
        print(packages.stdout[-4000:] + packages.stderr[-4000:], file=sys.stderr)
        fail(3, "the Debian packages R torch's build needs could not be installed (scripts/build-rtorch.sh "
                "--apt-only above)")
    key, inputs = build_key(archives)
    root.mkdir(parents=True, exist_ok=True)
    prefix = root / key
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two environments asking at once: one builds, the other waits
        if is_ready(prefix):
            say(f"reusing the R torch build at {prefix}")
        else:
            build(archives, prefix, inputs)
    return prefix


def main(argv: list[str]) -> int:
    if not argv:
        fail(2, "usage: python scripts/rtorch_env.py COMMAND [ARG...]")
    sources = os.environ.get("KL_RTORCH_SOURCES")
    if os.environ.get("KL_RTORCH_LIB"):
        say(f"using the R torch in KL_RTORCH_LIB={os.environ['KL_RTORCH_LIB']}")
    elif sources:
        prefix = provide(Path(sources))
        os.environ["KL_RTORCH_LIB"] = str(prefix / "Rlib")
        os.environ["TORCH_HOME"] = str(prefix / "torch-home")
        # R itself finds the build too (`Rscript -e 'library(torch)'`), not only the harness's adapter
        os.environ["R_LIBS"] = os.pathsep.join(filter(None, [str(prefix / "Rlib"), os.environ.get("R_LIBS")]))
        required = [name for name in os.environ.get("KL_REQUIRE_FRAMEWORKS", "").split(",") if name]
        os.environ["KL_REQUIRE_FRAMEWORKS"] = ",".join(dict.fromkeys(required + ["rtorch"]))
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
