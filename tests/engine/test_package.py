"""The sdist and wheel carry every file the harness reads, and the version follows the git tags.

The list of files is derived from the checkout (every file git tracks under the harness's folders), so a
new data file, profile or subpackage that pyproject.toml's package data or package list misses fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

from conformance.cli import main
from tests.packaging import ROOT, build_dists, package_files, tracked_files


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


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _version(project: Path) -> str:
    """The version setuptools-scm gives `project` under this checkout's pyproject.toml (what a build uses)."""
    done = subprocess.run([sys.executable, "-m", "setuptools_scm"], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def project(tmp_path):
    """A git repository holding this checkout's pyproject.toml, with one commit and no tag."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "project"
    repo.mkdir()
    for name in ("pyproject.toml", ".git_archival.txt", ".gitattributes"):
        shutil.copy(ROOT / name, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    return repo


def test_a_release_tag_is_the_version_and_commits_after_it_are_dev_versions(project):
    _git(project, "tag", "v0.7.2")
    assert _version(project) == "0.7.2"
    (project / "CHANGES").write_text("after the release\n")
    _git(project, "add", "CHANGES")
    _git(project, "commit", "-qm", "second")
    after = _version(project)
    assert after.startswith("0.7.3.dev1+g") and _git(project, "rev-parse", "--short", "HEAD")[:7] in after


def test_a_source_archive_of_a_tag_carries_its_version(project, tmp_path):
    """`git archive` (what a GitHub source tarball is) fills in .git_archival.txt; no .git travels with it."""
    _git(project, "tag", "-a", "v1.4.0", "-m", "release 1.4.0")
    archive = tmp_path / "archive.tar"
    _git(project, "archive", "--format=tar", "-o", str(archive), "HEAD")
    tree = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    assert not (tree / ".git").exists() and _version(tree) == "1.4.0"


def test_a_shallow_clone_without_tags_builds_as_a_dev_version(project, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{project}", str(clone)], check=True,
                   capture_output=True)
    assert _git(clone, "tag") == ""
    assert _version(clone).startswith("0.1.dev")


def test_a_tree_without_git_builds_as_the_fallback_version(tmp_path):
    tree = tmp_path / "tarball"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    assert _version(tree).startswith("0.1.dev")


def test_the_wheel_is_versioned_from_git_not_by_a_constant(dists):
    if tracked_files() is None:
        pytest.skip("not a git checkout: the version comes from PKG-INFO")
    assert dists.version == _version(ROOT)


def test_version_option_prints_the_installed_distributions_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"kl-conformance {metadata.version('kl-conformance')}"
