"""The reference cache's keys follow the code: every project module whose code runs while an expectation (or
an explanation) is computed has its source in the key, so an edit to it can never serve a stale answer.

The modules in the key are derived from the imports of the reference and the judge (cachekey.code_modules);
these tests watch which code actually runs, so a module reached some other way (a lazy import, a table
loaded by name) fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, generate_cases
from conformance.core.choices import alternatives
from conformance.core.model import GRAD_PARTS, Observation
from conformance.judge.casejudge import CaseJudge
from conformance.judge.profiles import DeviationLedger
from conformance.judge.cachekey import EXPLAIN_ROOTS, REFERENCE_ROOTS, _module_file, code_modules
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad

PROJECT = [Path(p).resolve() for p in {
    _module_file("conformance.core.model").parents[1], _module_file("conformance.reference.forward").parent}]


def _project_files_run(work) -> set[Path]:
    """The project's source files whose functions were called while `work()` ran."""
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    files = {Path(f).resolve() for f in seen if f.endswith(".py")}
    return {f for f in files if any(f.is_relative_to(root) for root in PROJECT)}


def unkeyed(files_run: set[Path], keyed_modules: tuple[str, ...]) -> set[Path]:
    """The files that ran but whose source is in no key."""
    return files_run - {_module_file(m).resolve() for m in keyed_modules}


@pytest.fixture(scope="module")
def sample(spec):
    """A few cases of every family, reduction, target space and dialect (every 7th case of the default suite)."""
    return list(generate_cases(spec, seed=DEFAULT_SEED))[::7]


def _expectations(spec, cases):
    for case in cases:
        dialects = ["keras"] if case.params.prob_input else ["canonical", "distribution_sum"]
        for dialect in dialects:
            expected_forward(case, spec, dialect)
            for part in GRAD_PARTS:
                expected_grad(case, spec, part, dialect)


def test_every_module_that_computes_an_expectation_is_in_its_key(spec, sample):
    ran = _project_files_run(lambda: _expectations(spec, sample))
    assert any(f.name == "klterm.py" for f in ran)  # the watch saw the reference at work
    missing = unkeyed(ran, code_modules(REFERENCE_ROOTS))
    assert not missing, f"code that computes expectations but is not in the cache key: {sorted(map(str, missing))}"


def test_every_module_that_explains_is_in_the_explanation_key(spec, sample):
    """A judge explains and documents divergences (alternative specs, the profile's deviations): all of that
    code is in the explanation key, or in the reference build it reads."""
    ledger = DeviationLedger(spec, "torch", ["torch.nn.functional.kl_div", "torch.nn.KLDivLoss"])

    def judge_divergences():
        for case in sample:
            if case.params.prob_input or case.input.size == 0:
                continue
            expected = expected_forward(case, spec)
            if expected.value is None or expected.value.size == 0:
                continue
            value = np.asarray(expected.value, dtype=np.float64)
            observed = Observation(value=value * 1.5 + 1.0, dtype=str(case.dtype.input), shape=value.shape)
            judge = CaseJudge(case, spec)
            judge.judgement("forward", "canonical", observed)
            judge.documented(ledger, "torch.nn.functional.kl_div", "forward", "canonical", observed)

    assert alternatives(spec)
    ran = _project_files_run(judge_divergences)
    assert any(f.name == "explain.py" for f in ran)
    missing = unkeyed(ran, code_modules(REFERENCE_ROOTS) + code_modules(EXPLAIN_ROOTS))
    assert not missing, f"code that explains but is not in the explanation key: {sorted(map(str, missing))}"


def test_a_module_left_out_of_the_key_is_found(spec, sample):
    """The check above fails when a module that computes expectations is missing from the derived list."""
    ran = _project_files_run(lambda: _expectations(spec, sample[:20]))
    keyed = code_modules(REFERENCE_ROOTS)
    for left_out in ("conformance.reference.klterm", "conformance.core.rounding", "conformance.core.tolerance"):
        assert unkeyed(ran, tuple(m for m in keyed if m != left_out)) == {_module_file(left_out).resolve()}


def test_the_derived_modules_follow_imports_not_a_list():
    reference = code_modules(REFERENCE_ROOTS)
    assert {"conformance.reference.klterm", "conformance.reference.logexp_tables", "conformance.core.tolerance",
            "conformance.core.rounding"} <= set(reference)
    explain = code_modules(EXPLAIN_ROOTS)
    assert {"conformance.judge.compare", "conformance.judge.explain", "conformance.judge.profiles",
            "conformance.core.choices"} <= set(explain)
    # the run loop asks for explanations but does not compute them: editing it keeps stored explanations
    assert not any(m.startswith("conformance.run.") for m in reference + explain)
