"""The runs of the runner a pytest session makes: one per share of the collected cases, judged with the options
its --kl-* options state (conformance/pytest_plugin.py's suite holds them), and the first cases' expectations,
made while the frameworks' workers load them, as `run` makes them.

Imported once the suite is set up, never at the plugin's load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.core.results import iter_results
from conformance.judge.refcache import ReferenceCache, default_cache_dir
from conformance.options import OPTIONS, PLUGIN
from conformance.run.context import RunOptions
from conformance.run.jobs import default_jobs
from conformance.run.judging import judges_until
from conformance.run.runner import run_conformance
from conformance.runcommand import selection_record


def run_options(suite, cases: int = 0) -> RunOptions:
    """The options of the suite's runs, as `run` takes them from its command line; `cases`, a share's size."""
    # under xdist the pytest processes take the cores; alone, --jobs's default
    jobs = 1 if "PYTEST_XDIST_WORKER" in os.environ else default_jobs(suite.modes, cases)
    return RunOptions(apis=suite.apis, devices=suite.devices, modes=suite.modes, parts=suite.parts,
                      timeout_s=suite.timeout_s, memory_budget_mb=suite.selection.memory_budget_mb,
                      budget_option=OPTIONS["memory_budget_mb"].where(PLUGIN), known=suite.known,
                      cache_dir=default_cache_dir(), like=suite.like, jobs=jobs)


def judges_while_loading(suite) -> tuple[ReferenceCache, dict]:
    """The reference cache, open, and the judges of the suite's first cases, by case id, each holding its
    expectations: made until every framework's worker has loaded it (judging.judges_until), so that the
    session's first run finds them made, as `run`'s prefetch does. The first run to judge a case takes its judge."""
    options = run_options(suite)
    cache = ReferenceCache(options.cache_dir)
    dialects = [api.dialect for adapter in suite.adapters.values() for api in adapter.apis
                if not suite.apis or api.name in suite.apis]
    try:
        made = judges_until(lambda: all(pool.ready() for pool in suite.pools.values()), suite.spec,
                            iter(suite.chosen), options, dialects, cache)
    except BaseException:  # an interrupt while the worker loads: the cache is closed, as a run closes its own
        cache.close()
        raise
    return cache, {case.id: judge for case, judge in made if judge is not None}


def judge_share(suite, framework: str, cases: list, out: Path) -> list:
    """The rows of one run of the runner over a share of the suite's cases, written to `out` (the run directory
    the session's gates read), as the run wrote them: with each divergence's mark, shared or the port's own, where
    --kl-like asks."""
    record = selection_record(suite.selection, suite.known, suite.parts, suite.apis, suite.devices,
                              suite.adapters[framework].name, suite.modes, suite.timeout_s)
    run_info = {"seed": suite.selection.seed, "suite": suite.selection.suite, "samples": suite.selection.samples,
                "case_files": list(suite.selection.case_files), "only": list(suite.selection.only),
                "shard": None, "known": suite.config.getoption("kl_known"), "selection": record,
                "command": "pytest --kl-framework " + framework,
                **({"mirrors": suite.adapters[framework].mirrored()} if suite.like else {})}
    written: list = []  # the rows as the run wrote them, so that they are not read back
    summary = run_conformance(suite.spec, framework, cases, out, run_options(suite, len(cases)), run_info=run_info,
                              pool=suite.pool_of(framework), on_result=lambda _, row: written.append(row),
                              judges=suite.judges)
    if summary.not_run:
        pytest.fail(f"kl-conformance: {framework} did not run: {summary.not_run}", pytrace=False)
    if suite.marks is None:
        return written
    suite.marks.write_marks(out)  # each divergence shared with the recorded run, or the port's own
    return list(iter_results(out))
