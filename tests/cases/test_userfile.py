"""User case files: the documented format loads; every kind of mistake names file, case and field."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.cases.userfile import load_case_file
from conformance.errors import CaseFileError

GOOD = """
- id: zero-target-neg-inf-input
  input: [-.inf, -1.0]
  target: [0.0, 1.0]
  reduction: none
  note: from a bug report
- id: mixed
  input: [[-1.0, -2.0]]
  target: [[0.1, 0.9]]
  dtype: {input: float16, target: float32}
  reduction: batchmean
  log_target: false
  size_average: null
  reduce: null
  grad: [input]
- id: scalar
  input: -0.5
  target: .nan
"""


def _write(tmp_path, text):
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    return path


def test_documented_format_loads(tmp_path):
    cases = load_case_file(_write(tmp_path, GOOD))
    assert [c.id for c in cases] == ["zero-target-neg-inf-input", "mixed", "scalar"]
    first, mixed, scalar = cases
    assert first.input[0] == -np.inf and first.params.reduction == "none" and first.dtype.input == "float32"
    assert (mixed.dtype.input, mixed.dtype.target, mixed.parts) == ("float16", "float32", ("forward", "grad_input"))
    assert mixed.input[0, 0] == -1.0 and mixed.target[0, 0] == np.float32(0.1)  # rounded to float32
    assert scalar.input.shape == () and np.isnan(scalar.target)


@pytest.mark.parametrize("text, where, words", [
    ("- id: a\n  input: [1\n", "line", "invalid YAML"),
    ("- id: a\n  input: [1.0]\n  target: [1.0]\n  colour: red\n", "case 'a', field 'colour'", "unknown field"),
    ("- id: a\n  input: [1.0]\n  target: [1.0]\n  dtype: float8\n", "case 'a', field 'dtype'", "unknown dtype 'float8'"),
    ("- id: a\n  input: [[1.0, 2.0], [3.0]]\n  target: [1.0]\n", "case 'a', field 'input'", "ragged tensor"),
    ("- id: a\n  input: [1.0, x]\n  target: [1.0, 1.0]\n", "case 'a', field 'input'", "not a number"),
    ("- id: a\n  input: [1.0]\n", "case 'a', field 'target'", "missing field"),
    ("- id: a\n  input: [1.5]\n  target: [1]\n  dtype: int64\n", "case 'a', field 'input'", "not representable in int64"),
    ("- id: a\n  input: [1.0]\n  target: [1.0]\n  log_target: yes please\n", "case 'a', field 'log_target'", "true or false"),
    ("- id: a\n  input: [1.0]\n  target: [1.0]\n- id: a\n  input: [1.0]\n  target: [1.0]\n", "case 'a'", "duplicate id"),
    ("{id: a}\n", None, "non-empty YAML list"),
    ("- input: [1.0]\n  target: [1.0]\n", "entry 0", "'id'"),
])
def test_bad_files_name_file_case_and_field(tmp_path, text, where, words):
    path = _write(tmp_path, text)
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert words in message, message
    if where:
        assert where in message, message
    assert "Fix:" in message


def test_yaml_is_loaded_safely(tmp_path):
    path = _write(tmp_path, "- !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(CaseFileError, match="invalid YAML"):
        load_case_file(path)
