"""The entry point starts `run`'s worker before the harness loads, from a guess that `run` checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.results import iter_results
from conformance.entry import early_worker

ADAPTER = "tests.faults.adapters:NumpyAdapter"
CASES = "- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"


@pytest.mark.parametrize("argv", [
    [], ["cases"], ["report", "x", "--out", "y"], ["run"], ["run", "--help"], ["run", "--framework", ADAPTER, "-h"],
    ["run", "--framework"],  # no value: the real parser says so, in one line
])
def test_no_guess_no_worker_and_nothing_printed(argv, capsys):
    assert early_worker(argv) is None
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("extra, cache_dir", [
    ([], "default"), (["--no-cache"], None), (["--cache-dir", "somewhere"], Path("somewhere")),
])
def test_the_guess_is_the_framework_and_cache_that_run_reads(monkeypatch, tmp_path, extra, cache_dir):
    monkeypatch.setenv("KL_CACHE_DIR", str(tmp_path / "cache"))
    pool = early_worker(["run", "--out", "o", "--framework", ADAPTER, *extra])
    try:
        assert pool.launched and pool.framework == ADAPTER
        assert pool.compile_cache_dir == (tmp_path / "cache" if cache_dir == "default" else cache_dir)
    finally:
        pool.close()


def _run(tmp_path, early, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTER, "--cases", str(cases), "--suite", "none", "--out", str(out),
                 "--no-progress", "--no-cache", *extra], early_worker=early)
    return code, [(r.case_id, r.verdict.value) for r in iter_results(out)]


def test_run_uses_the_early_worker_when_the_guess_matches(tmp_path):
    early = early_worker(["run", "--framework", ADAPTER, "--no-cache"])
    assert _run(tmp_path, early) == (0, [("one", "pass")])
    assert early.info is not None  # the run waited on this worker: it ran the case
    assert not early._process.is_alive()  # and closed it


def test_run_starts_its_own_worker_when_the_guess_is_wrong(tmp_path):
    """A guess for another cache directory (JAX would keep its kernels elsewhere) is closed unused."""
    early = early_worker(["run", "--framework", ADAPTER, "--cache-dir", str(tmp_path / "elsewhere")])
    assert _run(tmp_path, early) == (0, [("one", "pass")])
    assert early.info is None and not early._process.is_alive()
