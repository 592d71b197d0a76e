"""A framework that computes in one fixed dtype whatever the caller's (dtypes.computation, as Keras' loss classes
compute in floatx): the run names the behaviour when no profile states it, and a profile that states it documents
every row of it, as one defect."""

from __future__ import annotations

import json

from conformance.cli import main
from conformance.core.results import iter_results

CASES = """
- {id: none64, input: [[-1.1, -0.3]], target: [[0.1, 0.9]], reduction: none, dtype: float64}
- {id: sum64, input: [[-1.1, -0.3]], target: [[0.1, 0.9]], reduction: sum, dtype: float64}
- {id: sum16, input: [[-1.0, -0.25]], target: [[0.5, 0.5]], reduction: sum, dtype: float16}
- {id: sum32, input: [[-1.1, -0.3]], target: [[0.1, 0.9]], reduction: sum, dtype: float32}
"""


def _run(tmp_path, adapter: str):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    code = main(["run", "--framework", f"tests.faults.adapters:{adapter}", "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / "out"), "--no-progress", "--no-repro", "--no-cache"])
    rows = {row.case_id: row for row in iter_results(tmp_path / "out")}
    return code, rows, json.loads((tmp_path / "out" / "summary.json").read_text())["defects"]


def test_an_undeclared_fixed_computation_dtype_is_named_as_one_undocumented_defect(tmp_path):
    code, rows, defects = _run(tmp_path, "Float32ComputationAdapter")
    assert code == 0  # findings, not failures: no gate was asked
    assert rows["sum32"].verdict.value == "pass"  # a float32 call is the float32 call
    for case_id in ("none64", "sum64", "sum16"):
        row = rows[case_id]
        assert row.verdict.value == "dtype" and not row.documented, row
        assert row.cause == "dtypes.computation", row.message
    assert [(d["status"], d["rows"]) for d in defects] == [("undocumented", 3)]


def test_a_declared_fixed_computation_dtype_documents_every_row_of_it(tmp_path):
    code, rows, defects = _run(tmp_path, "DeclaredFloat32ComputationAdapter")
    assert code == 0
    assert rows["sum32"].verdict.value == "pass"
    for case_id in ("none64", "sum64", "sum16"):
        row = rows[case_id]
        assert row.verdict.is_divergence and row.documented_by == ("computes-in-float32",), row
        assert row.cause == "dtypes.computation"
    assert [(d["status"], d["rows"], d["cause"]) for d in defects] == [("documented", 3, "dtypes.computation")]


def test_a_wrong_answer_in_float32_is_still_an_undocumented_finding(tmp_path):
    _, rows, _ = _run(tmp_path, "WrongFloat32ComputationAdapter")
    assert all(row.verdict.is_divergence and not row.documented for row in rows.values()), rows
