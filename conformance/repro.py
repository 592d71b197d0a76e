"""Writes standalone reproducers: a script that needs only one framework (and NumPy, for Python ones).

The case comes from its id (generated cases are rebuilt from id and seed), from a user
case file, or from an earlier run directory (which keeps its seed and its user cases).
Before writing, the case is minimised: if a single element of it diverges the same
way, the script uses that element alone, which is what one pastes into an upstream issue.
Composes the adapter, the reference and the comparator; runs in the framework's environment.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

import conformance
from conformance.adapters.registry import get_adapter
from conformance.cases.generate import DEFAULT_SEED, build_case
from conformance.cases.ids import parse_id
from conformance.cases.userfile import load_case_file
from conformance.compare import classify, differs_in_nonfinite_pattern
from conformance.errors import UsageError
from conformance.model import Case, Expected, Spec, Verdict
from conformance.runner import CaseJudge

MAX_CANDIDATES = 64  # single elements tried when minimising


def find_case(case_id: str, run_dir: str | None, case_file: str | None, seed: int | None) -> Case:
    """The case called `case_id`, from a case file, a run directory, or its generated id."""
    return CaseSource(run_dir, case_file, seed).get(case_id)


class CaseSource:
    """Where reproducers find their cases: the user case files of a run (or one named file), each parsed
    once into an index by id, else the generated case of that id drawn with the run's seed."""

    def __init__(self, run_dir: str | None, case_file: str | None, seed: int | None) -> None:
        self.files = [case_file] if case_file else []
        if run_dir:
            manifest_path = Path(run_dir) / "run.json"
            if not manifest_path.is_file():
                raise UsageError("no run.json here", file=str(run_dir), where="--from",
                                 fix="pass the --out directory of a `kl-conformance run`")
            manifest = json.loads(manifest_path.read_text())
            seed = manifest.get("seed", seed) if seed is None else seed
            self.files += [str(Path(run_dir) / kept) for kept in manifest.get("case_files_kept", [])]
            self.files += manifest.get("case_files", [])
        self.seed = DEFAULT_SEED if seed is None else seed
        self._index: dict[str, Case] = {}
        self._unread = list(self.files)  # read in order, each once, only as far as an id needs

    def get(self, case_id: str) -> Case:
        while case_id not in self._index and self._unread:
            for case in load_case_file(self._unread.pop(0)):
                self._index.setdefault(case.id, case)  # the first file that has the id wins
        if case_id in self._index:
            return self._index[case_id]
        try:
            return build_case(parse_id(case_id), self.seed)
        except ValueError:
            raise UsageError(f"case {case_id!r} is not a generated id and not in {self.files or 'any case file'}",
                             where="CASE_ID", fix="pass --cases FILE or --from RUN_DIR for a user case") from None


def expectations(spec: Spec, cache=None) -> Callable[[Case, str, str], Expected]:
    """expect(case, part, dialect): the spec's expectation, through the reference cache when one is given."""
    return lambda case, part, dialect: CaseJudge(case, spec, cache).expected(spec, part, dialect)


def minimise(case: Case, adapter, api, device: str, part: str, spec: Spec, expect=None) -> Case:
    """The smallest case (a single element, if one does) that diverges with the same verdict."""
    expect = expect or expectations(spec)
    verdict = _verdict(case, adapter, api, device, part, spec, expect)
    if not verdict.is_divergence or case.input.shape != case.target.shape or case.input.size <= 1:
        return case
    ndim = case.input.ndim
    flat_x, flat_t = case.input.reshape(-1), case.target.reshape(-1)
    for i in _screened(case, adapter, api, device, part, expect, min(case.input.size, MAX_CANDIDATES)):
        one = replace(case, input=np.full((1,) * max(ndim, 1), flat_x[i]), target=np.full((1,) * max(ndim, 1), flat_t[i]),
                      layout="contiguous")
        if _verdict(one, adapter, api, device, part, spec, expect) is verdict:
            return one
    return case


def _screened(case: Case, adapter, api, device: str, part: str, expect, count: int) -> list[int]:
    """The first `count` elements in the order to try them: first those where one call on all of them at once,
    unreduced and each its own distribution (shape (count, 1)), diverges. The batch only orders the candidates;
    each is still judged alone with the case's own parameters, so a screen that misleads costs calls, not truth."""
    order = list(range(count))
    if api.reductions is not None and "none" not in api.reductions:
        return order
    batch = replace(case, id=f"{case.id}#candidates", layout="contiguous",
                    params=replace(case.params, reduction="none", size_average=None, reduce=None),
                    input=case.input.reshape(-1)[:count].reshape(count, 1),
                    target=case.target.reshape(-1)[:count].reshape(count, 1))
    expected, observed = expect(batch, part, api.dialect), adapter.run(batch, api, device, part)
    if observed.raised or expected.value is None or np.size(observed.value) != count or expected.value.size != count:
        return order
    got = np.asarray(observed.value, dtype=np.float64).reshape(count)
    want, bound = expected.value.reshape(count), expected.bound.reshape(count)
    with np.errstate(invalid="ignore"):
        off = differs_in_nonfinite_pattern(got, want) | (np.isfinite(want) & ~(np.abs(got - want) <= bound))
    return [i for i in order if off[i]] + [i for i in order if not off[i]]


def _verdict(case, adapter, api, device, part, spec, expect) -> Verdict:
    return classify(expect(case, part, api.dialect), adapter.run(case, api, device, part), spec).verdict


def write_all(run_dir: str, spec: Spec, out_dir: Path, cache_dir: Path | None = None,
              progress: Callable[[int, int], None] | None = None) -> int:
    """Write a reproducer, minimised, for every undocumented divergence of a run into `out_dir`; returns the count.

    Expectations come from the reference cache in `cache_dir` (the run's own are there already);
    `progress(done, total)` is called after each reproducer.
    """
    from conformance.refcache import ReferenceCache
    from conformance.results import iter_results

    rows = [r for r in iter_results(run_dir) if r.verdict.is_divergence and not r.documented
            and r.verdict not in (Verdict.CRASH, Verdict.TIMEOUT)]
    if not rows:
        return 0
    adapter = get_adapter(rows[0].framework)
    adapter.load()
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = ReferenceCache(cache_dir) if cache_dir is not None else None
    expect = expectations(spec, cache)
    source, cases = CaseSource(run_dir, None, None), {}
    try:
        for done, r in enumerate(rows, 1):
            if r.case_id not in cases:
                cases[r.case_id] = source.get(r.case_id)
            script, suffix = _script(adapter, cases[r.case_id], adapter.api(r.api), r.device, r.part, spec,
                                     minimize=True, expect=expect)
            name = "".join(c if c.isalnum() or c in "-_=." else "_" for c in f"{r.case_id}__{r.api}__{r.device}__{r.part}")
            (out_dir / f"{name}{suffix}").write_text(script, encoding="utf-8")
            if progress is not None:
                progress(done, len(rows))
    finally:
        if cache is not None:
            cache.close()
    return len(rows)


def write_script(case_id: str, framework: str, spec: Spec, api_name: str | None = None, device: str = "cpu",
                 part: str = "forward", run_dir: str | None = None, case_file: str | None = None,
                 seed: int | None = None, minimize: bool = True) -> str:
    """The reproducer's source text."""
    adapter = get_adapter(framework)
    api_names = [a.name for a in adapter.apis]
    if api_name is not None and api_name not in api_names:
        raise UsageError(f"unknown api {api_name!r} for {framework!r}", where="--api", fix=f"use one of {api_names}")
    api = adapter.api(api_name or api_names[0])
    case = find_case(case_id, run_dir, case_file, seed)
    why = adapter.unsupported_reason(case, api) or adapter.unsupported_part(api, part)
    if why:
        raise UsageError(f"{api.name} cannot express case {case_id!r} ({part}): {why}", where="CASE_ID",
                         fix="pick a case and part the report shows for this API (its rows are not `unsupported`)")
    adapter.load()
    return _script(adapter, case, api, device, part, spec, minimize)[0]


def _script(adapter, case: Case, api, device: str, part: str, spec: Spec, minimize: bool,
            expect=None) -> tuple[str, str]:
    """The reproducer's text and file suffix, from the adapter (a Python script unless it writes its own)."""
    expect = expect or expectations(spec)
    if minimize:
        case = minimise(case, adapter, api, device, part, spec, expect)
    expected = expect(case, part, api.dialect)
    judgement = classify(expected, adapter.run(case, api, device, part), spec)
    about = (f"Reproduces kl_div case {case.id} on {api.name} ({device}, {part}).",
             f"kl-conformance {conformance.__version__}, spec {spec.hash}: {judgement.message or judgement.verdict.value}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    return adapter.repro_script(case, api, device, part, about, expected)
