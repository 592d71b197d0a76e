"""`selftest`'s command line fails closed: a framework that does not load is exit 3, never a pass, and names it
does not know are refused before anything is written. Runs use the honest NumPy stand-in of
tests/faults/adapters.py; the planted faults themselves are proven on the real frameworks (tests/e2e)."""

from __future__ import annotations

import json

from conformance.cli import main
from conformance.core.results import iter_results

CASES = "- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
ADAPTERS = "tests.faults.adapters:"


def _selftest(tmp_path, adapter, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["selftest", "--framework", ADAPTERS + adapter, "--suite", "none", "--cases", str(cases),
                 "--out", str(tmp_path / "out"), "--variant", "value_outside_rounding", *extra])


def test_a_framework_that_does_not_load_is_incomplete_not_a_pass(tmp_path, capsys):
    assert _selftest(tmp_path, "UnloadableAdapter") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did not run, so nothing was planted" in err and "numpy_kl" in err
    assert not (tmp_path / "out" / "selftest.json").exists()


def test_unknown_or_absent_names_are_refused_before_anything_is_written(tmp_path, capsys):
    assert _selftest(tmp_path, "NumpyAdapter", "--api", "numpy.nope") == 2
    assert "unknown api 'numpy.nope'" in capsys.readouterr().err
    assert _selftest(tmp_path, "CpuOnlyAdapter", "--device", "cuda") == 2
    assert "device 'cuda' is not present" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_device_narrows_every_run_of_the_selftest(tmp_path):
    assert _selftest(tmp_path, "CpuOnlyAdapter", "--device", "cpu") == 0
    out = tmp_path / "out"
    report = json.loads((out / "selftest.json").read_text())
    assert [(v["name"], v["planted"], v["flagged"]) for v in report["variants"]] == [("value_outside_rounding", 1, 1)]
    for run in ("control", "value_outside_rounding"):
        assert {row.device for row in iter_results(out / run)} == {"cpu"}
