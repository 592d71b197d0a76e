"""The sdist and wheel carry every file the harness reads, and the version written in the package.

The list of files is derived from the checkout (every file git tracks under the harness's folders), so a
new data file, profile or subpackage that pyproject.toml's package data or package list misses fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.packaging import ROOT, build_dists, files_version, package_files, tracked_files


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    return build_dists(tmp_path_factory.mktemp("dist"))


def _wheel_names(dists) -> set[str]:
    with zipfile.ZipFile(dists.wheel) as wheel:
        return set(wheel.namelist())


def _sdist_names(dists) -> set[str]:
    with tarfile.open(dists.sdist) as sdist:
        names = sdist.getnames()
    top = names[0].split("/")[0]
    return {n.removeprefix(top + "/") for n in names if n.startswith(top + "/")}


def test_the_wheel_holds_every_module_and_data_file(dists):
    files = package_files()
    data = [source for source in files if not source.endswith(".py")]
    # the data the harness reads at run time: the spec and its schemas, the profiles, the example cases,
    # the R worker; each is found in the checkout, not listed here
    assert {Path(p).parts[0] for p in data} >= {"spec", "cases", "adapters"}
    missing = sorted(source for source, installed in files.items() if installed not in _wheel_names(dists))
    assert not missing, f"the wheel lacks these files of the checkout: {missing}"


def test_the_wheel_installs_nothing_beside_the_package(dists):
    names = _wheel_names(dists)
    stray = sorted(n for n in names if not n.startswith(("conformance/", f"kl_conformance-{dists.version}.dist-info/")))
    assert not stray  # no top-level `cases`, `adapters` or `tests` in the user's environment
    metadata = Parser().parsestr(zipfile.ZipFile(dists.wheel).read(f"kl_conformance-{dists.version}.dist-info/"
                                                                  "METADATA").decode())
    assert metadata["Name"] == "kl-conformance" and metadata["Version"] == dists.version
    entry_points = zipfile.ZipFile(dists.wheel).read(f"kl_conformance-{dists.version}.dist-info/"
                                                     "entry_points.txt").decode()
    assert "kl-conformance = conformance.entry:main" in entry_points


def test_the_sdist_holds_every_tracked_file(dists):
    """An sdist is the source: the package's files, and the tests and docs that check them."""
    tracked = tracked_files()
    if tracked is None:
        pytest.skip("not a git checkout: nothing says which files are the source")
    present = {p for p in tracked if (ROOT / p).is_file()}
    missing = sorted(present - _sdist_names(dists))
    assert not missing, f"the sdist lacks these tracked files: {missing}"
    assert {"PKG-INFO", "pyproject.toml", "spec/kl_div.yaml", "adapters/rtorch_worker.R"} <= _sdist_names(dists)


def test_the_wheel_and_sdist_carry_the_version_written_in_the_package(dists):
    """`python -m build` makes the wheel from the unpacked sdist, a tree without .git: the version there comes
    from the package's files as well."""
    version = files_version()
    assert dists.version == version and dists.sdist.name == f"kl_conformance-{version}.tar.gz"
    with tarfile.open(dists.sdist) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        info = Parser().parsestr(sdist.extractfile(f"{top}/PKG-INFO").read().decode())
        assert not any(n.split("/")[1:2] == [".git"] for n in sdist.getnames())
    assert info["Version"] == version


def test_a_tree_without_git_or_pkg_info_builds_with_the_version_written_in_the_package(tmp_path):
    """A source tarball that is not an sdist (a copy of the files, an archive of a commit) builds the same
    version as a checkout: nothing is read from git."""
    tree = tmp_path / "tree"
    for source in [*package_files(), "pyproject.toml", "README.md", "MANIFEST.in"]:
        (tree / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, tree / source)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                           str(tmp_path / "dist"), str(tree)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (tree / ".git").exists()
    assert [w.name for w in (tmp_path / "dist").glob("*.whl")] == [f"kl_conformance-{files_version()}-py3-none-any.whl"]


def test_requires_python_is_the_oldest_python_the_matrix_runs():
    """pyproject.toml's floor is a Python the harness is tested on: it said 3.9, where pip installed the wheel and
    every `run` ended in a traceback (importlib.metadata.entry_points(group=) is 3.10's)."""
    import re
    import tomllib

    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    tested = {tuple(map(int, v.split("."))) for v in re.findall(r"^base_python = python(3\.\d+)$",
                                                                 (ROOT / "tox.ini").read_text(), re.M)}
    oldest = min(tested | {sys.version_info[:2]})
    assert floor == f">={oldest[0]}.{oldest[1]}", (floor, sorted(tested))
    assert f"Python {oldest[0]}.{oldest[1]} or" in (ROOT / "docs" / "guide" / "install.md").read_text()

