"""Judges made before a run, while its worker loads the framework (the CLI's prefetch, the plugin's set-up:
run/judging.judges_until), give the rows a run makes without them: verdicts, causes, explanations, documented
and known marks and the report's details, byte for byte but for the timings."""

from __future__ import annotations

import re

from conformance import api
from conformance.judge.refcache import ReferenceCache
from conformance.run.context import RunOptions
from conformance.run.judging import judges_until
from conformance.run.runner import run_conformance
from conformance.run.selection import select_cases

# an honest float64 NumPy adapter: the default suite's narrow dtypes, edges and dialect-free cases diverge from
# it in every way the judge explains (dtypes, NaN patterns, values)
ADAPTER = "tests.faults.adapters:NumpyAdapter"
ELAPSED = re.compile(r'"elapsed_s": [0-9.e+-]+')


def _rows(out) -> list[str]:
    return ELAPSED.sub('"elapsed_s": T', (out / "results.jsonl").read_text()).splitlines()


def test_judges_made_before_the_run_give_the_rows_and_details_it_makes_without_them(tmp_path):
    spec = api.load_spec()
    cases = list(select_cases(spec, api.Selection(only=["fwd/*/float16/*", "fwd/*/float64/*"])))[:80]
    options = RunOptions(cache_dir=tmp_path / "cache")
    run_conformance(spec, ADAPTER, cases, tmp_path / "without", options)
    # made as the plugin makes them: its own cache, every case's expectations before the run starts
    cache = ReferenceCache(tmp_path / "cache")
    made = judges_until(lambda: False, spec, iter(cases), options, ["canonical"], cache)
    judges = {case.id: judge for case, judge in made if judge is not None}
    assert len(judges) == len(cases)
    summary = run_conformance(spec, ADAPTER, cases, tmp_path / "with", options, judges=judges)
    cache.close()
    assert judges == {}, "the run takes each judge it uses"
    assert summary.cases == len(cases)
    rows = _rows(tmp_path / "with")
    assert rows == _rows(tmp_path / "without") and len(rows) >= len(cases)
    assert '"verdict": "pass"' in "".join(rows) and any('"verdict": "pass"' not in row for row in rows)
    assert (tmp_path / "with" / "details.jsonl").read_bytes() == (tmp_path / "without" / "details.jsonl").read_bytes()
