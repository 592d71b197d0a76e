"""Releases without tags: the version is written in the package's files, `--version` says it (with the commit of
a git checkout), and the install line of the docs installs a clone that has no tags.

Engine tests: they need git and no framework; the install test builds one wheel offline (pip --no-index,
--no-build-isolation, this environment's setuptools) into a fresh venv.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.errors import SpecError
from conformance.core.model import FORMAT_VERSION
from conformance.core.specload import load_spec, parse_yaml, spec_hash
from conformance.version import source_root, version_text
from tests.packaging import ROOT, files_version, tracked_files


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


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
    if source_root() != ROOT:
        pytest.skip("the harness is imported from an install, not from this checkout")
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


# a release's section in CHANGELOG.md (docs/guide/install.md: Versions and releases)
RELEASE_HEADING = re.compile(r"## Harness (?P<version>\S+) \((?P<date>\d{4}-\d{2}-\d{2})\): "
                             r"spec version (?P<spec>\d+), row format version (?P<rows>\d+)")


def _newest_section() -> str:
    headings = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert headings, "CHANGELOG.md has no section"
    return headings[0]


def test_the_newest_changelog_section_is_the_release_in_the_files_and_what_it_writes():
    """The heading names the version written in the package, the version of the spec the harness ships
    (spec_version in the spec it loads by default) and the row format its rows carry (format_version)."""
    heading = _newest_section()
    release = RELEASE_HEADING.fullmatch(heading)
    assert release, (f"CHANGELOG.md's newest section {heading!r} is not a release: a change is released with "
                     "`## Harness X.Y.Z (YYYY-MM-DD): spec version N, row format version M`")
    assert release["version"] == files_version()
    assert int(release["spec"]) == load_spec().data["spec_version"]
    assert int(release["rows"]) == FORMAT_VERSION


def _format_version(model_source: str) -> int:
    (value,) = [node.value.value for node in ast.parse(model_source).body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["FORMAT_VERSION"]]
    return value


def test_a_release_writes_the_spec_and_row_format_of_the_commit_that_set_it():
    """Baselines and --resume refuse results by spec hash and row format version, never by the harness's
    version: a baseline written by a release stays readable by every commit that says that release only while
    both stay those of the commit that set the version."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout (the history says which commit set the version)")
    version = files_version()
    commits = _git(ROOT, "log", "--format=%H", "-S", f'__version__ = "{version}"', "--", "conformance/__init__.py")
    if not commits:
        pytest.skip(f"{version} is not committed yet: this is the release being made")
    release = commits.splitlines()[0]
    shown = f"spec/kl_div.yaml at {release[:12]}"
    then = spec_hash(parse_yaml(_git(ROOT, "show", f"{release}:spec/kl_div.yaml"), shown, SpecError))
    redo = f"release a new version: a baseline written by {version} would be refused (docs/guide/install.md)"
    assert then == load_spec().hash, f"the spec changed since {version} was set ({release[:12]}): {redo}"
    model_then = _format_version(_git(ROOT, "show", f"{release}:conformance/core/model.py"))
    assert model_then == FORMAT_VERSION, f"the row format changed since {version} was set ({release[:12]}): {redo}"


PLACEHOLDER_URL = "https://github.com/<owner>/kl-conformance"
# pages that pin the harness for another project (the docs' own line is install.md's first)
PINNING_PAGES = ("docs/guide/install.md", "docs/guide/ci.md", "docs/guide/plugin.md", "README.md")


def _documented_requirement() -> str:
    """The requirement of install.md's install line, as a user copies it."""
    found = re.search(r'^pip install "(kl-conformance @ git\+[^"]+)"', (ROOT / "docs/guide/install.md").read_text(),
                      re.MULTILINE)
    assert found, "docs/guide/install.md has no `pip install \"kl-conformance @ git+...\"` line"
    return found.group(1)


def test_every_page_pins_a_commit_as_the_install_guide_does():
    requirement = _documented_requirement()
    assert requirement == f"kl-conformance @ git+{PLACEHOLDER_URL}@<commit>"
    for page in PINNING_PAGES:
        text = (ROOT / page).read_text()
        pins = re.findall(r"kl-conformance @ git\+\S+?@([^\s\"'`]+)", text)
        assert set(pins) <= {"<commit>"}, f"{page} pins {sorted(set(pins))}: the repository holds no tags"


def test_the_documented_install_line_installs_a_clone_without_tags(tmp_path):
    """The install guide's line, with its URL swapped for a tagless clone of this repository and `<commit>` for the
    clone's commit, installs into a fresh venv, and `kl-conformance --version` there says the files' version.

    Offline: pip reads no index (--no-index), builds with this environment's setuptools (the venv borrows it
    through PYTHONPATH while pip builds there, --no-build-isolation), and installs no dependency (--no-deps;
    the venv reads them from this environment once the harness is installed)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-tags", str(ROOT), str(clone)], check=True, capture_output=True)
    assert _git(clone, "tag") == ""
    commit = _git(clone, "rev-parse", "HEAD")
    # pip refuses `NAME @ git+file:///path` (no host); file://localhost/path is the same clone
    requirement = _documented_requirement().replace(PLACEHOLDER_URL, f"file://localhost{clone.as_posix()}")
    requirement = requirement.replace("<commit>", commit)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    here = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                                "--no-build-isolation", "--no-deps", "--ignore-installed", "--no-cache-dir",
                                "--no-compile", "--disable-pip-version-check", requirement],
                               capture_output=True, text=True, cwd=tmp_path, env={**env, "PYTHONPATH": here})
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env=env).stdout.strip()
    # appended after the venv's own folder: the harness comes from the venv, its dependencies from here
    (Path(purelib) / "kl_test_dependencies.pth").write_text(f"{here}\n")
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    done = subprocess.run([str(scripts / "kl-conformance"), "--version"], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    # from an install the version alone: the installed harness is not a git checkout
    assert (done.returncode, done.stdout) == (0, f"kl-conformance {files_version(clone)}\n"), done.stderr[-3000:]


def test_a_run_records_the_commit_it_ran_from(tmp_path):
    """run.json says which commit made the rows (the findings pages' "harness commit"): harness_version is the
    release alone, which many commits share."""
    from conformance.version import checkout_commit

    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n")
    out = tmp_path / "out"
    sys.path.append(str(ROOT))  # the stand-in adapters of tests/faults
    try:
        assert main(["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(cases), "--suite",
                     "none", "--out", str(out), "--no-progress", "--no-repro"]) == 0
    finally:
        sys.path.remove(str(ROOT))
    import json

    recorded = json.loads((out / "run.json").read_text())["commit"]
    assert recorded == checkout_commit(source_root())
    if (source_root() / ".git").exists() and shutil.which("git"):
        assert recorded and re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", recorded)
