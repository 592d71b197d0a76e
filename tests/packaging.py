"""Builds the sdist and the wheel as a release would (`python -m build`), for the package tests.

`--no-isolation` uses the backend of the test environment (the `test` extra holds build and setuptools), so
the build needs no network. The wheel is built from the sdist, as `build` does by default,
so a file the sdist leaves out is missing from the wheel too.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: builds are not run side by side there
    fcntl = None

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where the wheel installs it (pyproject.toml: [tool.setuptools.package-dir])
FOLDERS = {"conformance": "conformance", "reference": "conformance/reference", "cases": "conformance/cases",
           "adapters": "conformance/adapters", "spec": "conformance/spec"}


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path

    @property
    def version(self) -> str:
        """The version the wheel's file name carries (name-version-python-abi-platform.whl)."""
        return self.wheel.name.split("-")[1]


def build_dists(out: Path) -> Dists:
    """The sdist and wheel of the checkout, built into `out`; the build's own output on failure.

    The build writes its egg-info and build/ into the checkout, so builds of two test processes (pytest -n 2,
    tox.ini) take turns under a lock file."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    lock = Path(tempfile.gettempdir()) / f"kl-conformance-build-{hashlib.sha256(bytes(ROOT)).hexdigest()[:12]}.lock"
    with open(lock, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                              capture_output=True, text=True, env=env, cwd=out)
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return Dists(sdist, wheel)


def files_version(root: Path = ROOT) -> str:
    """The release written in the package's files under `root` (conformance/__init__.py's `__version__`), read
    as text: what a build reads, never what an installed copy says."""
    tree = ast.parse((root / "conformance" / "__init__.py").read_text(encoding="utf-8"))
    (value,) = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["__version__"]]
    return value


def tracked_files() -> list[str] | None:
    """The files git tracks in the checkout (paths relative to it), or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted(p for p in done.stdout.decode().split("\0") if p)


def package_files() -> dict[str, str]:
    """Every file of the harness's folders (tracked by git, or on disk outside a checkout), source path ->
    the path the wheel must hold it at: its modules and every data file it reads at run time."""
    tracked = tracked_files()
    if tracked is None:
        tracked = [str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / folder).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    found = {}
    for path in tracked:
        folder, _, rest = path.partition("/")
        if folder in FOLDERS and rest and Path(ROOT / path).is_file():
            found[path] = f"{FOLDERS[folder]}/{rest}"
    return found
