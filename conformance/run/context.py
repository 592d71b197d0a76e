"""What one run carries from step to step: its options (RunOptions), what it did (RunSummary), and the context
its steps share (RunContext), which also builds each judged row from a call's judgement.

Holds and builds values only: writes no file, starts no worker, and never imports a framework or the reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import conformance
from conformance.adapters.base import Adapter
from conformance.core.case import Case
from conformance.core.defects import defect_of, residual_cause
from conformance.core.known import KnownFindings
from conformance.core.model import UNEXPLAINED, Expected, Judgement, Observation, Result, Spec, Target, Verdict
from conformance.judge.profiles import DeviationLedger
from conformance.judge.refcache import ReferenceCache
from conformance.run.outdir import OutDirLock
from conformance.run.pool import WorkerPool
from conformance.run.resume import Resumed
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB
from conformance.run.worker import WorkerInfo

DEFAULT_TIMEOUT_S = 60.0


@dataclass
class RunSummary:
    """What a run did, for the CLI's exit code and last line."""

    out_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    cases: int = 0
    skipped: int = 0  # cases a resumed run had judged already
    unspoken: int = 0  # cases in an input space no selected API's dialect takes: no rows
    partless: int = 0  # cases with none of the parts --part selects: no rows
    earlier: dict[str, int] = field(default_factory=dict)  # the rows a resumed run had already, by verdict
    stages: list[str] = field(default_factory=list)  # run.json's `stages` once the rows are written (record.STAGES)
    restarts: int = 0
    not_run: str | None = None  # why the framework could not be loaded
    apis_not_run: dict[str, str] = field(default_factory=dict)  # APIs the installed release lacks, and why
    notes: list[str] = field(default_factory=list)  # the harness's own options that degraded on this release
    stopped: str | None = None  # why the run ended before its last case (the worker could not be restarted)
    current: str | None = None  # the case being judged, for the reason of a failure

    @property
    def divergences(self) -> int:
        """The divergent rows this command wrote."""
        return sum(n for verdict, n in self.counts.items() if Verdict(verdict).is_divergence)

    @property
    def all_counts(self) -> dict[str, int]:
        """The run's rows by verdict: those a resumed run had, and those this command wrote (run.json's `counts`)."""
        total = dict(self.earlier)
        for verdict, n in self.counts.items():
            total[verdict] = total.get(verdict, 0) + n
        return total

    @property
    def all_divergences(self) -> int:
        """The divergent rows of the whole run, a resumed run's earlier ones included."""
        return sum(n for verdict, n in self.all_counts.items() if Verdict(verdict).is_divergence)


@dataclass(frozen=True)
class RunOptions:
    apis: Sequence[str] = ()
    devices: Sequence[str] = ()
    modes: Sequence[str] = ()  # empty: eager only
    parts: Sequence[str] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB
    budget_option: str = "--memory-budget-mb"  # what the caller's surface calls it, for a refused case's fix
    resume: bool = False
    force: bool = False  # replace what an earlier run wrote into the output directory
    known: KnownFindings | None = None  # marks the divergences a user accepts
    profiles_dir: Path | None = None
    like: str | None = None  # judge as a port of this framework: its profile's deviations document too (--like)
    cache_dir: Path | None = None  # the reference cache (refcache.py); None computes every expectation
    inputs: tuple[tuple[str, str], ...] = ()  # (option, path) of the command's inputs: --force must not remove one
    jobs: int = 1  # worker processes the cases are spread over (--jobs): one on a device not shared, at most max_jobs


@dataclass
class RunContext:
    """What the steps of one run read, and what they learn on the way: the spec, the framework as the caller
    named it and its adapter, the profile's ledger, the options, the output directory and what --resume found
    there, the run.json record being made (manifest) and the summary; the worker pool and the directory's lock,
    each with whether the run owns it, and the reference cache; once the framework is loaded, the worker's
    versions and the targets."""

    spec: Spec
    framework: str  # as the caller named it: it may be "module:Class", the adapter has its own name
    adapter: Adapter
    ledger: DeviationLedger
    options: RunOptions
    out: Path
    before: Resumed | None  # what --resume found; None on a fresh run
    manifest: dict
    summary: RunSummary
    pool: WorkerPool
    lock: OutDirLock
    cache: ReferenceCache | None
    own_pool: bool  # the run closes the pool; a caller's pool stays open for its further calls
    own_lock: bool  # the run releases the lock; a caller's lock is held until it has written the reports too
    targets: list[Target] = field(default_factory=list)
    info: WorkerInfo | None = None
    jobs: int = 1  # the worker processes the run may use (--jobs, at most the adapter's max_jobs)
    prepared: bool = False  # run.json is written: a failure from here on is recorded there

    def __post_init__(self) -> None:
        self.implementations = self.adapter.implementations()
        self.api_names = [a.name for a in self.adapter.apis]

    @property
    def done(self) -> set[tuple[str, str, str, str, str]]:
        """The (case id, api, device, mode, part) of the rows a resumed run has already."""
        return self.before.done if self.before is not None else set()

    def row(self, case: Case, digest: str, call: tuple[str, str, str, str], expected: Expected | None,
            judgement: Judgement, observed: Observation, documented_by: tuple[str, ...] = ()) -> Result:
        """The result row of one call (api, device, mode, part) of `case`."""
        api, device, mode, part = call
        info, manifest = self.info, self.manifest
        cause = judgement.cause
        if judgement.verdict.is_divergence and not documented_by:  # what the profile does not state
            declared = self.ledger.declared(api, mode, device, case, part)
            cause = residual_cause(cause, frozenset(p for d in declared for p in d.set))
        elif cause == UNEXPLAINED and documented_by:  # no alternative alone told it apart; what documents it does
            declared = self.ledger.declared(api, mode, device, case, part)
            cause = " + ".join(dict.fromkeys(p for d in declared if d.id in documented_by
                                             for p in d.set)) or cause
        row = Result(
            case_id=case.id, case_digest=digest, seed=manifest.get("seed"), family=case.family,
            reduction=case.params.reduction, log_target=case.params.log_target, framework=self.adapter.name,
            framework_version=info.version, api=api, device=device, mode=mode,
            dtype=(expected.result_dtype if expected is not None and expected.result_dtype else str(case.dtype)),
            part=part, verdict=judgement.verdict, documented=bool(documented_by), documented_by=documented_by,
            known_by=(), max_abs_err=judgement.max_abs_err, bound=judgement.bound, cause=cause,
            rules=judgement.rules, defect="", message=judgement.message, warnings=observed.warnings,
            missing_warnings=judgement.missing_warnings,
            elapsed_s=round(observed.elapsed_s, 9), source=case.source, spec_hash=self.spec.hash,
            harness_version=conformance.__version__, python_version=manifest["python_version"],
            numpy_version=manifest["numpy_version"], device_name=info.device_names.get(device, device),
        )
        return replace(row, defect=defect_of(row, self.implementations[api]))
