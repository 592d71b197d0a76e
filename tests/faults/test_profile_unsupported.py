"""Documented restrictions are `unsupported` (issue 38, item 4): a profile's `unsupported:` entry (a dtype
restriction, a part the framework does not define) keeps the run from sending those calls, and each is one
unsupported row with the documented reason and its source, never an `error` row."""

from __future__ import annotations

import numpy as np
import pytest

from cases.ids import parse_id
from conformance.cli import main
from conformance.core.errors import SpecError
from conformance.core.model import Verdict
from conformance.core.results import iter_results
from conformance.judge.profiles import DeviationLedger, load_restrictions
from tests.helpers import make_case

FRAMEWORK = "tests.faults.adapters:Float32Float64OnlyAdapter"  # its rows name it numpy-test
ONLY = ["--only", "fwd/sum/log_target=0/4x6/*"]
DOCS = "https://example.org/numpy-test/kl_div"
PROFILE = f"""framework: numpy-test
deviations: []
unsupported:
  - apis: [numpy.kl_div]
    dtypes: [float16, bfloat16]
    reason: "the documentation: input and target are float32 or float64"
    basis: docs
    reference: {DOCS}
  - apis: [numpy.kl_div]
    dtypes: [mixed]
    reason: "the documentation: target has the dtype of input"
    basis: docs
    reference: {DOCS}
"""


def _run(tmp_path, profile):
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "numpy-test.yaml").write_text(profile)
    out = tmp_path / "out"
    code = main(["run", "--framework", FRAMEWORK, *ONLY, "--out", str(out), "--no-progress", "--no-repro",
                 "--no-cache", "--profiles", str(profiles)])
    return code, [r for r in iter_results(out) if r.part == "forward"]  # the stand-in has no gradients


def test_documented_dtype_restrictions_come_out_unsupported_with_the_reason(tmp_path):
    code, rows = _run(tmp_path, PROFILE)
    pairs = {r.case_id: parse_id(r.case_id).dtype for r in rows}
    narrow = [r for r in rows if {pairs[r.case_id].input, pairs[r.case_id].target} & {"float16", "bfloat16"}]
    mixed = [r for r in rows if pairs[r.case_id].is_mixed]
    plain = [r for r in rows if r not in narrow and r not in mixed]
    assert narrow and mixed and plain
    assert code == 0
    for row in narrow + mixed:
        assert row.verdict is Verdict.UNSUPPORTED, (row.case_id, row.verdict, row.message)
        assert DOCS in row.message and "(documented, docs: " in row.message
    assert all("float32 or float64" in r.message for r in narrow)  # the first entry that covers a call gives its reason
    assert any("dtype of input" in r.message for r in mixed if r not in narrow)
    assert any(r.verdict is not Verdict.UNSUPPORTED for r in plain)  # sent, and judged
    assert not any(DOCS in r.message for r in plain)


def test_without_the_entries_the_same_calls_are_errors(tmp_path):
    """The stand-in refuses those calls: what the entries turn into unsupported rows is an error otherwise."""
    code, rows = _run(tmp_path, "framework: numpy-test\ndeviations: []\n")
    assert code == 0
    mixed = [r for r in rows if parse_id(r.case_id).dtype.is_mixed]
    assert Verdict.ERROR in {r.verdict for r in mixed} and not any(DOCS in r.message for r in rows)


def test_a_part_entry_covers_its_parts_only(spec, tmp_path):
    (tmp_path / "numpy-test.yaml").write_text(
        "framework: numpy-test\ndeviations: []\nunsupported:\n- {apis: [numpy.kl_div], parts: [grad_target, "
        "grad2_input], reason: no target gradient, basis: docs, reference: 'https://x'}\n")
    ledger = DeviationLedger(spec, "numpy-test", ["numpy.kl_div"], tmp_path)
    case = make_case(np.zeros((2, 3)), np.full((2, 3), 0.5), reduction="sum")
    assert ledger.unsupported(case, "numpy.kl_div", "forward") is None
    assert ledger.unsupported(case, "numpy.kl_div", "grad_target") == "no target gradient (documented, docs: https://x)"


@pytest.mark.parametrize("entry, words", [
    ("{apis: [numpy.kl_div], reason: r, basis: docs, reference: 'https://x'}", "is not valid under any"),
    ("{apis: [numpy.kl_div], dtypes: [float8], reason: r, basis: docs, reference: 'https://x'}", "'float8' is not one"),
    ("{apis: [numpy.kl_div], parts: [forward], reason: r, reference: 'https://x'}", "'basis' is a required property"),
])
def test_a_malformed_entry_is_refused_naming_the_field(spec, tmp_path, entry, words):
    (tmp_path / "numpy-test.yaml").write_text(f"framework: numpy-test\ndeviations: []\nunsupported:\n- {entry}\n")
    with pytest.raises(SpecError) as info:
        load_restrictions("numpy-test", spec, tmp_path)
    assert str(info.value).startswith(str(tmp_path / "numpy-test.yaml")) and "unsupported[0]" in str(info.value)
    assert words in str(info.value)


def test_an_entry_for_an_api_the_adapter_lacks_is_refused(spec, tmp_path):
    (tmp_path / "numpy-test.yaml").write_text(
        "framework: numpy-test\ndeviations: []\nunsupported:\n- {apis: [numpy.typo], parts: [forward], reason: r, "
        "basis: docs, reference: 'https://x'}\n")
    with pytest.raises(SpecError, match=r"unsupported\[\]\.apis"):
        DeviationLedger(spec, "numpy-test", ["numpy.kl_div"], tmp_path)
