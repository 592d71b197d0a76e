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

import numpy as np

import conformance
from conformance.adapters.registry import get_adapter
from conformance.cases.generate import DEFAULT_SEED, build_case
from conformance.cases.ids import parse_id
from conformance.cases.userfile import load_case_file
from conformance.compare import classify
from conformance.errors import UsageError
from conformance.model import Case, Spec, Verdict
from conformance.runner import expected_for

MAX_CANDIDATES = 64  # single elements tried when minimising


def find_case(case_id: str, run_dir: str | None, case_file: str | None, seed: int | None) -> Case:
    """The case called `case_id`, from a case file, a run directory, or its generated id."""
    files = [case_file] if case_file else []
    if run_dir:
        manifest_path = Path(run_dir) / "run.json"
        if not manifest_path.is_file():
            raise UsageError("no run.json here", file=str(run_dir), where="--from",
                             fix="pass the --out directory of a `kl-conformance run`")
        manifest = json.loads(manifest_path.read_text())
        seed = manifest.get("seed", seed) if seed is None else seed
        files += [str(Path(run_dir) / kept) for kept in manifest.get("case_files_kept", [])]
        files += manifest.get("case_files", [])
    for path in files:
        for case in load_case_file(path):
            if case.id == case_id:
                return case
    try:
        return build_case(parse_id(case_id), DEFAULT_SEED if seed is None else seed)
    except ValueError:
        raise UsageError(f"case {case_id!r} is not a generated id and not in {files or 'any case file'}",
                         where="CASE_ID", fix="pass --cases FILE or --from RUN_DIR for a user case") from None


def minimise(case: Case, adapter, api, device: str, part: str, spec: Spec) -> Case:
    """The smallest case (a single element, if one does) that diverges with the same verdict."""
    verdict = _verdict(case, adapter, api, device, part, spec)
    if not verdict.is_divergence or case.input.shape != case.target.shape or case.input.size <= 1:
        return case
    ndim = case.input.ndim
    flat_x, flat_t = case.input.reshape(-1), case.target.reshape(-1)
    for i in range(min(case.input.size, MAX_CANDIDATES)):
        one = replace(case, input=np.full((1,) * max(ndim, 1), flat_x[i]), target=np.full((1,) * max(ndim, 1), flat_t[i]),
                      layout="contiguous")
        if _verdict(one, adapter, api, device, part, spec) is verdict:
            return one
    return case


def _verdict(case, adapter, api, device, part, spec) -> Verdict:
    return classify(expected_for(case, spec, part, api.dialect), adapter.run(case, api, device, part), spec).verdict


def write_all(run_dir: str, spec: Spec, out_dir: Path, minimize_first: int = 100) -> int:
    """Write a reproducer for every undocumented divergence of a run into `out_dir`; returns the count.

    The first `minimize_first` are minimised (each costs framework calls); the rest are written whole.
    """
    from conformance.results import iter_results

    rows = [r for r in iter_results(run_dir) if r.verdict.is_divergence and not r.documented
            and r.verdict not in (Verdict.CRASH, Verdict.TIMEOUT)]
    if not rows:
        return 0
    adapter = get_adapter(rows[0].framework)
    adapter.load()
    out_dir.mkdir(parents=True, exist_ok=True)
    cases: dict[str, Case] = {}
    for i, r in enumerate(rows):
        if r.case_id not in cases:
            cases[r.case_id] = find_case(r.case_id, run_dir, None, None)
        script, suffix = _script(adapter, cases[r.case_id], adapter.api(r.api), r.device, r.part, spec,
                                 minimize=i < minimize_first)
        name = "".join(c if c.isalnum() or c in "-_=." else "_" for c in f"{r.case_id}__{r.api}__{r.device}__{r.part}")
        (out_dir / f"{name}{suffix}").write_text(script, encoding="utf-8")
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
    adapter.load()
    return _script(adapter, case, api, device, part, spec, minimize)[0]


def _script(adapter, case: Case, api, device: str, part: str, spec: Spec, minimize: bool) -> tuple[str, str]:
    """The reproducer's text and file suffix, from the adapter (a Python script unless it writes its own)."""
    if minimize:
        case = minimise(case, adapter, api, device, part, spec)
    expected = expected_for(case, spec, part, api.dialect)
    judgement = classify(expected, adapter.run(case, api, device, part), spec)
    about = (f"Reproduces kl_div case {case.id} on {api.name} ({device}, {part}).",
             f"kl-conformance {conformance.__version__}, spec {spec.hash}: {judgement.message or judgement.verdict.value}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    return adapter.repro_script(case, api, device, part, about, expected)
