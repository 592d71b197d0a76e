"""The mode slice (`--suite mode-slice`, what `tox -m conformance` runs each mode on) against the recorded runs of
every framework's modes over the whole mode suite (tests/data/mode-findings.json, `tox -m conformance-full`): every
finding those runs showed, in each mode, shows in the slice, and the slice is a slice."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conformance.cases.generate import generated_keys
from conformance.cases.ids import signature
from conformance.cases.suites import MODE_SLICE, mode_slice_signatures
from conformance.core.model import FLOAT_DTYPES

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "tests" / "data" / "mode-findings.json"
RERECORD = ("record the findings again from a matrix over the whole mode suite (`tox -m conformance-full`, then "
            "`python scripts/mode_slice.py record reports/*-modes` and `python scripts/mode_slice.py choose`; "
            "docs/guide/modes.md, The mode slice)")


def _script():
    spec = importlib.util.spec_from_file_location("mode_slice", ROOT / "scripts" / "mode_slice.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def findings() -> dict:
    return _script().read_findings(FINDINGS)


@pytest.fixture(scope="module")
def suite(spec) -> dict[str, list]:
    out: dict[str, list] = {}
    for case_id, key in generated_keys(spec, suite="modes"):
        out.setdefault(signature(case_id), []).append(key)
    return out


def test_the_recording_is_of_this_mode_suite(findings, suite, spec):
    """A recorded finding names signatures of today's mode suite, under today's seed: else the suite has changed
    since the recording, and what the slice is checked against is stale."""
    from conformance.cases.generate import DEFAULT_SEED

    assert findings["seed"] == DEFAULT_SEED, RERECORD
    stale = sorted({s for f in findings["findings"] for s in f["signatures"] if s not in suite})
    assert not stale, f"signatures no longer in the mode suite: {stale[:5]}; {RERECORD}"
    frameworks = {f["framework"] for f in findings["findings"]}
    assert {"torch", "paddle", "mindspore", "oneflow", "optax", "keras"} <= frameworks, frameworks


def test_every_recorded_mode_finding_shows_in_the_slice(findings):
    """The issue's check: the slice's mode findings are the whole suite's, framework by framework and mode by mode.
    A finding shows on a signature when one of its cases showed it; the slice runs every case of its signatures."""
    chosen = mode_slice_signatures()
    lost = [f"{f['framework']} {f['release']} {f['mode']}: {f['defect']} ({f['title']})"
            for f in findings["findings"] if not chosen & set(f["signatures"])]
    assert not lost, "findings of the whole mode suite the slice does not show:\n" + "\n".join(lost)


def test_the_slice_holds_every_floating_dtype_and_reduction(suite, spec):
    """Beside the recorded findings: each floating dtype, and each (reduction, log_target) the spec names, is run in
    every mode, so a release's new finding in any of them can show."""
    chosen = mode_slice_signatures()
    keys = [k for s in chosen for k in suite[s]]
    assert {d for k in keys for d in (k.dtype.input, k.dtype.target)} >= set(FLOAT_DTYPES)
    pairs = {(r, lt) for r in spec.reductions for lt in (False, True)}
    assert {(k.params.reduction, k.params.log_target) for k in keys} >= pairs


def test_the_slice_file_is_what_the_recording_chooses(findings, spec):
    """cases/mode_slice.txt is written from the recording, not by hand: choosing again gives it line for line."""
    script = _script()
    assert MODE_SLICE.read_text(encoding="utf-8") == script.slice_text(script.choose(findings, spec)), \
        "cases/mode_slice.txt differs from `python scripts/mode_slice.py choose`: run it and commit the file"


def test_the_slice_is_the_mode_suite_narrowed(suite, spec):
    """Every case of a chosen signature, and a fraction of the suite's signatures: the compiles it saves."""
    chosen = mode_slice_signatures()
    assert chosen <= set(suite)
    ids = [case_id for case_id, _ in generated_keys(spec, suite="mode-slice")]
    assert len(ids) == sum(len(suite[s]) for s in chosen)
    assert 4 * len(chosen) < len(suite), (len(chosen), len(suite))


def test_a_slice_without_one_of_its_signatures_loses_a_finding_or_an_anchor(findings, spec):
    """Each chosen signature earns its place (the chooser drops the redundant), so the check above is not
    vacuous: remove any one, and something the slice must show is gone."""
    script = _script()
    needs = script.required(findings, spec)
    chosen = mode_slice_signatures()
    for dropped in sorted(chosen):
        rest = chosen - {dropped}
        assert any(not rest & sigs for sigs in needs.values()), dropped


def test_the_recorder_refuses_a_run_that_is_not_of_the_whole_mode_suite(tmp_path, capsys):
    """A default-suite run, or a mode run narrowed by --dtype, would record a partial set of findings and let a
    smaller slice pass its check: refused in one line, exit 2, nothing written."""
    script = _script()
    out = tmp_path / "findings.json"
    for suite, selection in (("default", {}), ("modes", {"dtype": ["float32"]})):
        run = tmp_path / f"run-{suite}"
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"suite": suite, "status": "complete", "selection": selection,
                                                  "spec_hash": "x", "seed": 0}), encoding="utf-8")
        assert script.main(["record", str(run), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(run) in err and ("narrowed by dtype" in err or "suite 'default'" in err)
        assert not out.exists()
    assert script.main(["choose", "--findings", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    assert "missing.json" in capsys.readouterr().err and not out.exists()
