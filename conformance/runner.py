"""Runs cases through one framework's adapter and writes judged rows as they finish.

Composes the pipeline: cases -> reference (Expected, once per case, shared by
every API and device) -> adapter (Observation) -> compare (verdict) -> results.
"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

import conformance
from conformance.adapters.base import Adapter, FrameworkUnavailable
from conformance.adapters.registry import get_adapter
from conformance.compare import classify
from conformance.errors import UsageError
from conformance.explain import explain
from conformance.model import Case, Observation, Result, Spec, Target, Verdict
from conformance.reference.forward import expected_forward
from conformance.results import ResultsWriter, prepare_out_dir, write_manifest


@dataclass
class RunSummary:
    """What a run did, for the CLI's exit code and last line."""

    out_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    cases: int = 0
    not_run: str | None = None

    @property
    def divergences(self) -> int:
        return sum(n for verdict, n in self.counts.items() if Verdict(verdict).is_divergence)


def select(adapter: Adapter, apis: Sequence[str], devices: Sequence[str]) -> list[Target]:
    """The (framework, api, device) triples to run; unknown names list the valid ones."""
    api_names = [api.name for api in adapter.apis]
    for name in apis:
        if name not in api_names:
            raise UsageError(f"unknown api {name!r} for framework {adapter.name!r}", where="--api",
                             fix=f"use one of {api_names}")
    for name in devices:
        if name not in adapter.known_devices:
            raise UsageError(f"unknown device {name!r} for framework {adapter.name!r}", where="--device",
                             fix=f"use one of {list(adapter.known_devices)}")
    present = adapter.devices()
    absent = [d for d in devices if d not in present]
    if absent:
        raise UsageError(f"device {absent[0]!r} is not present on this machine for {adapter.name}", where="--device",
                         fix=f"use one of the present devices {list(present)}")
    return [Target(adapter.name, api, device)
            for api in (apis or api_names) for device in (devices or present)]


def run_conformance(
    spec: Spec,
    framework: str,
    cases: Iterable[Case],
    out_dir: str | Path,
    apis: Sequence[str] = (),
    devices: Sequence[str] = (),
    run_info: dict | None = None,
    progress: Callable[[int], None] | None = None,
    on_result: Callable[[Case, Result], None] | None = None,
) -> RunSummary:
    """Run every case on every selected target, appending each judged row to results.jsonl.

    Raises
    ------
    UsageError
        for an unknown framework, api or device, or an unwritable output directory.
    """
    adapter = get_adapter(framework)
    out = prepare_out_dir(out_dir)
    summary = RunSummary(out)
    manifest = {"framework": framework, "spec_hash": spec.hash, "spec": spec.source,
                "harness_version": conformance.__version__, **provenance(), **(run_info or {})}
    try:
        adapter.load()
    except FrameworkUnavailable as exc:
        summary.not_run = str(exc)
        ResultsWriter(out).close()
        write_manifest(out, {**manifest, "status": "not_run", "reason": str(exc)})
        return summary
    targets = select(adapter, apis, devices)
    version = adapter.version()
    device_names = {t.device: adapter.device_name(t.device) for t in targets}
    manifest.update(framework_version=version, targets=[str(t) for t in targets], status="running",
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_manifest(out, manifest)

    with ResultsWriter(out) as writer:
        for case in cases:
            expected = expected_forward(case, spec)
            for target in targets:
                api = adapter.api(target.api)
                reason = adapter.unsupported_reason(case, api)
                observed = (Observation(unsupported=reason) if reason is not None
                            else adapter.run(case, api, target.device, "forward"))
                judgement = classify(expected, observed, spec)
                cause, message = judgement.cause, judgement.message
                if judgement.verdict.is_divergence:
                    behaves_as = explain(case, observed, spec)
                    if behaves_as:
                        cause = " + ".join(a.path.removesuffix(".choice") for a in behaves_as)
                        message += f"; behaves as {', '.join(map(str, behaves_as))}"
                result = Result(
                    case_id=case.id, family=case.family, reduction=case.params.reduction,
                    log_target=case.params.log_target, framework=framework, framework_version=version,
                    api=target.api, device=target.device, dtype=expected.result_dtype or str(case.dtype),
                    part="forward", verdict=judgement.verdict, documented=False,
                    max_abs_err=judgement.max_abs_err, bound=judgement.bound, cause=cause,
                    message=message, warnings=observed.warnings,
                    missing_warnings=judgement.missing_warnings, elapsed_s=round(observed.elapsed_s, 9),
                    source=case.source, spec_hash=spec.hash, harness_version=conformance.__version__,
                    python_version=manifest["python_version"], numpy_version=manifest["numpy_version"],
                    device_name=device_names[target.device],
                )
                writer.write(result)
                summary.counts[result.verdict.value] = summary.counts.get(result.verdict.value, 0) + 1
                if on_result is not None:
                    on_result(case, result)
            summary.cases += 1
            if progress is not None:
                progress(summary.cases)
    write_manifest(out, {**manifest, "status": "complete", "cases": summary.cases, "counts": summary.counts,
                         "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return summary


def provenance() -> dict[str, str]:
    """Versions every result carries, so reports from different machines can be compared."""
    return {"python_version": platform.python_version(), "numpy_version": np.__version__,
            "platform": platform.platform(), "executable": sys.executable}
