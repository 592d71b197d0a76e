"""Releases without tags: the version is written in the package's files, `--version` says it (with the commit of
a git checkout), and the install line of the docs installs a clone that has no tags.

Engine tests: they need git and no framework; the install test builds one wheel offline (pip --no-index,
--no-build-isolation, this environment's setuptools) into a fresh venv.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.version import version_text
from tests.packaging import ROOT, files_version, tracked_files


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with one commit of one tracked file."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tracked.txt").write_text("one\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "tracked.txt")
    _git(repo, "commit", "-qm", "first")
    return repo


def test_a_checkout_adds_its_commit_and_says_when_tracked_files_changed(repo):
    commit = _git(repo, "rev-parse", "--short", "HEAD")
    assert version_text(repo) == f"{files_version()} (commit {commit})"
    (repo / "untracked.txt").write_text("not part of the commit\n")
    assert version_text(repo) == f"{files_version()} (commit {commit})"
    (repo / "tracked.txt").write_text("two\n")
    assert version_text(repo) == f"{files_version()} (commit {commit}+dirty)"


def test_a_hand_made_tag_does_not_replace_the_commit(repo):
    _git(repo, "tag", "v9.9.9")
    assert version_text(repo) == f"{files_version()} (commit {_git(repo, 'rev-parse', '--short', 'HEAD')})"


def test_a_folder_inside_another_repository_is_not_its_checkout(repo):
    """A wheel installed in a venv inside a user's repository: git would answer with the user's commit."""
    site_packages = repo / ".venv" / "site-packages"
    site_packages.mkdir(parents=True)
    assert version_text(site_packages) == files_version()


def test_version_option_from_this_checkout(capsys):
    if tracked_files() is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: --version says the version alone (test_version_option_without_git)")
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    commit = _git(ROOT, "rev-parse", "--short", "HEAD")
    dirty = "+dirty" if _git(ROOT, "status", "--porcelain", "--untracked-files=no") else ""
    assert capsys.readouterr().out == f"kl-conformance {files_version()} (commit {commit}{dirty})\n"


def test_version_option_without_git(tmp_path):
    """git absent from PATH: the version alone, exit 0."""
    no_git = tmp_path / "bin"
    no_git.mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PATH": str(no_git)}
    done = subprocess.run([sys.executable, "-m", "conformance", "--version"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"kl-conformance {files_version()}\n", "")
