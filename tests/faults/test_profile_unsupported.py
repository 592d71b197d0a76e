"""Documented restrictions are `unsupported` (issue 38, item 4): a profile's `unsupported:` entry (a dtype
restriction, a part the framework does not define) keeps the run from sending those calls, and each is one
unsupported row with the documented reason and its source, never an `error` row."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cases.ids import parse_id
from conformance.adapters.base import Api
from conformance.cli import main
from conformance.core.errors import SpecError
from conformance.core.model import Verdict
from conformance.core.results import iter_results
from conformance.judge.profiles import DeviationLedger, load_restrictions
from tests.faults.adapters import NumpyAdapter
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


def test_a_mode_entry_covers_its_modes_only_and_an_entry_without_one_every_mode(spec, tmp_path):
    """torch.compile does not define double backward (its maintainers made it raise): an entry may name the modes
    it holds in, and one without `mode:` states a restriction of the API, whatever compiles it."""
    (tmp_path / "numpy-test.yaml").write_text(
        "framework: numpy-test\ndeviations: []\nunsupported:\n"
        "- {apis: [numpy.kl_div], parts: [grad2_input], mode: 'inductor*', reason: no double backward compiled, "
        "basis: maintainers, reference: 'https://x'}\n"
        "- {apis: [numpy.kl_div], dtypes: [float16], reason: float32 or float64, basis: docs, reference: 'https://y'}\n")
    ledger = DeviationLedger(spec, "numpy-test", ["numpy.kl_div"], tmp_path)
    case = make_case(np.zeros((2, 3)), np.full((2, 3), 0.5), reduction="sum")
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input") is None  # eager
    for mode in ("inductor", "inductor-emulated"):
        assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", mode).startswith("no double backward")
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", "onnx-dynamo") is None
    half = make_case(np.zeros((2, 3)), np.full((2, 3), 0.5), reduction="sum", dtype="float16")
    for mode in ("eager", "inductor", "jit"):
        assert ledger.unsupported(half, "numpy.kl_div", "forward", mode).startswith("float32 or float64")


def test_a_device_entry_covers_its_devices_only(spec, tmp_path):
    """Keras' jit is torch.compile on its torch backend only: an entry may name the devices it holds on (a glob), so
    the same call on another backend is sent; a caller that counts every device alike (the self-test) sees it."""
    (tmp_path / "numpy-test.yaml").write_text(
        "framework: numpy-test\ndeviations: []\nunsupported:\n"
        "- {apis: [numpy.kl_div], parts: [grad2_input], mode: jit, device: 'torch:*', reason: no double backward, "
        "basis: maintainers, reference: 'https://x'}\n")
    ledger = DeviationLedger(spec, "numpy-test", ["numpy.kl_div"], tmp_path)
    case = make_case(np.zeros((2, 3)), np.full((2, 3), 0.5), reduction="sum")
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", "jit", "torch:cpu").startswith("no double")
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", "jit", "tensorflow:cpu") is None
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", "eager", "torch:cpu") is None
    assert ledger.unsupported(case, "numpy.kl_div", "grad2_input", "jit").startswith("no double")


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


class OneApiRestricted(NumpyAdapter):
    """Two honest APIs; its carried profile says the second does not take float64 (so no float64 call of it is
    sent)."""

    apis = (Api("numpy.kl_div"), Api("numpy.kl_div_narrow"))
    profile = {"framework": "numpy-test", "deviations": [], "unsupported": [
        {"apis": ["numpy.kl_div_narrow"], "dtypes": ["float64"], "reason": "float32 only", "basis": "docs",
         "reference": "https://x"}]}


def test_the_selftests_hang_counts_only_the_calls_the_run_sends(tmp_path):
    """A hang costs every call of its case that was sent: not those the profile keeps back, which stay
    unsupported, so the planted hang is counted once and disturbs nothing."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: crash-31, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
                     "- {id: beside, input: [[-0.5, -1.0]], target: [[0.5, 0.5]], reduction: sum, dtype: float64}\n")
    out = tmp_path / "out"
    assert main(["selftest", "--framework", "tests.faults.test_profile_unsupported:OneApiRestricted", "--suite",
                 "none", "--cases", str(cases), "--variant", "hang", "--out", str(out)]) == 0
    (hang,) = json.loads((out / "selftest.json").read_text())["variants"]
    assert (hang["planted"], hang["flagged"], hang["disturbed"]) == (1, 1, 0), hang
