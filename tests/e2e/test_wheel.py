"""The built wheel, installed into a fresh venv outside the checkout, runs from another project's directory.

What another project does: build (here) or download the wheel, install it, run `kl-conformance run` and
pytest with the plugin from its own directory. The venv gets the wheel and its dependencies from pip; only
the framework itself (torch, a large download) is borrowed from this environment through a .pth file, which
appends that directory after the venv's own, so the harness is imported from the venv's wheel (checked).
Runs once, in the torch environment (tox -e tests-torch).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging import build_dists

FRAMEWORK = "torch"
# a few cases where torch passes and where it has an undocumented finding (log-space -inf targets)
SELECTION = "fwd/sum/log_target=1/4x6/float64/*"


class Venv:
    def __init__(self, root: Path, version: str, project: Path):
        self.root, self.version, self.project = root, version, project
        self.bin = root / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / "python"

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """A command of the venv, run from the project directory, with nothing of the checkout on its path."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(list(args), cwd=self.project, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def venv(request, tmp_path_factory) -> Venv:
    if FRAMEWORK not in request.config.getoption("--framework"):
        pytest.skip(f"the installed-wheel test runs once, with --framework {FRAMEWORK} (tox -e tests-{FRAMEWORK})")
    if FRAMEWORK in request.config.unavailable_frameworks:
        pytest.skip(f"{FRAMEWORK} is not installed here")
    found = importlib.util.find_spec(FRAMEWORK)
    framework_dir = Path(next(iter(found.submodule_search_locations))).parent
    root = tmp_path_factory.mktemp("wheel")
    (root / "dist").mkdir()
    dists = build_dists(root / "dist")
    env = Venv(root / "venv", dists.version, root / "project")
    env.project.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env.root)], check=True)
    # --no-compile: byte-compiling NumPy would be most of the install's time
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(env.python), "install", "-q",
                                "--no-compile", "--disable-pip-version-check", str(dists.wheel), "pytest"],
                               capture_output=True, text=True, cwd=root)
    assert installed.returncode == 0, installed.stderr[-4000:]
    purelib = env.run(str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.stdout.strip()) / "kl_test_framework.pth").write_text(f"{framework_dir}\n")
    return env


@pytest.fixture(scope="module")
def run_dir(venv) -> Path:
    out = venv.project / "reports" / FRAMEWORK
    done = venv.run("kl-conformance", "run", "--framework", FRAMEWORK, "--only", SELECTION, "--out", str(out),
                    "--no-progress")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_harness_is_imported_from_the_venv_not_the_checkout(venv):
    done = venv.run(str(venv.python), "-c", "import conformance, torch; print(conformance.__file__); "
                                            "print(conformance.__version__)")
    assert done.returncode == 0, done.stderr
    location, version = done.stdout.split()
    assert Path(location).resolve().is_relative_to(venv.root.resolve())
    assert version == venv.version


def test_version_prints_the_wheels_version(venv):
    done = venv.run("kl-conformance", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"kl-conformance {venv.version}"


def test_run_from_the_project_directory_records_the_wheels_version(venv, run_dir):
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["harness_version"] == venv.version
    assert Path(manifest["executable"]).parent == venv.bin  # the venv's interpreter ran it
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert rows and {r["harness_version"] for r in rows} == {venv.version}
    assert {r["verdict"] for r in rows} >= {"pass"} and (run_dir / "report.md").is_file()


def _cases(run_dir: Path) -> tuple[str, str]:
    """A case whose every row passes, and one with an undocumented divergence, from the venv's run."""
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    verdicts: dict[str, set[str]] = {}
    for r in rows:
        verdicts.setdefault(r["case_id"], set()).add(r["verdict"])
    passing = sorted(c for c, v in verdicts.items() if v == {"pass"})
    failing = sorted({r["case_id"] for r in rows if r["verdict"] not in ("pass", "unsupported")
                      and not r["documented"] and not r["known_by"]})
    assert passing and failing, verdicts
    return passing[0], failing[0]


def test_the_pytest_plugin_from_the_project_directory(venv, run_dir):
    listed = venv.run(str(venv.python), "-c", "from importlib.metadata import entry_points; "
                                              "print(*[e.value for e in entry_points(group='pytest11')])")
    assert "conformance.pytest_plugin" in listed.stdout.split(), listed.stdout + listed.stderr
    (venv.project / "pytest.ini").write_text("[pytest]\n")
    passing, failing = _cases(run_dir)
    good = venv.run(str(venv.python), "-m", "pytest", "-p", "no:cacheprovider", "--kl-framework", FRAMEWORK,
                    "--kl-only", passing)
    assert good.returncode == 0 and " passed" in good.stdout, good.stdout[-3000:] + good.stderr[-3000:]
    bad = venv.run(str(venv.python), "-m", "pytest", "-p", "no:cacheprovider", "--kl-framework", FRAMEWORK,
                   "--kl-only", failing)
    assert bad.returncode == 1 and failing in bad.stdout, bad.stdout[-3000:] + bad.stderr[-3000:]
