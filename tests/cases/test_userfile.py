"""User case files: the documented format loads; every kind of mistake names file, case and field."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.cases.userfile import load_case_file
from conformance.core.errors import CaseFileError

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


SHAPED = """
- id: empty-batch
  input: []
  target: []
  shape: [0, 4]
  reduction: batchmean
  grad: [input, target, grad2_input]
- id: filled
  input: -0.0
  target: 0.1
  shape: {input: [4], target: [3, 4]}
  dtype: {input: float32, target: float16}
  grad: [grad2_input]
- id: flat
  input: [-1, -2, -3, -4, -5, -6]
  target: [[0.5, 0.25, 0.25], [0.125, 0.125, 0.75]]
  shape: [2, 3]
"""


def test_a_shape_states_what_a_nested_list_cannot_and_grad2_input_is_a_part(tmp_path):
    """`shape: [0, 4]`: an empty batch of four classes, which no nested list can write ([] is (0,), [[]] is
    (1, 0)); a single number fills its shape; a flat list is read row-major. `grad2_input` asks for the
    second-order part beside the first derivatives."""
    empty, filled, flat = load_case_file(_write(tmp_path, SHAPED))
    assert empty.input.shape == empty.target.shape == (0, 4)
    assert empty.parts == ("forward", "grad_input", "grad_target", "grad2_input")
    assert filled.input.shape == (4,) and filled.target.shape == (3, 4) and filled.parts == ("forward", "grad2_input")
    assert np.all(filled.input == 0) and np.all(np.signbit(filled.input))  # every element the number, sign kept
    assert np.all(filled.target == np.float16(0.1))  # rounded to the target's dtype
    assert flat.input.tolist() == [[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]] and flat.target[1, 2] == 0.75


@pytest.mark.parametrize("fields, where, words", [
    ("input: [1.0]\n  target: [1.0]\n  shape: 3", "field 'shape'", "expected a list of sizes"),
    ("input: [1.0]\n  target: [1.0]\n  shape: [2, -1]", "field 'shape'", "expected a list of sizes"),
    ("input: [1.0]\n  target: [1.0]\n  shape: [true]", "field 'shape'", "expected a list of sizes"),
    ("input: [1.0]\n  target: [1.0]\n  shape: [1.5]", "field 'shape'", "expected a list of sizes"),
    ("input: [1.0]\n  target: [1.0]\n  shape: {input: [1]}", "field 'shape'", "expected a list of sizes"),
    ("input: [1.0]\n  target: [1.0]\n  shape: {input: [1], target: x}", "field 'shape'", "for target"),
    ("input: 1.0\n  target: 1.0\n  shape: [100000, 100000]", "field 'shape'", "10000000000 elements"),
    ("input: 1.0\n  target: 1.0\n  shape: [" + ", ".join(["1"] * 33) + "]", "field 'shape'", "33 dimensions"),
    ("input: [1.0, 2.0]\n  target: 0.5\n  shape: [0, 4]", "field 'input'", "2 numbers for shape [0, 4]"),
    ("input: []\n  target: [0.5, 0.5]\n  shape: [0, 4]", "field 'target'", "which holds 0"),
    ("input: [1.0]\n  target: [1.0]\n  grad: [input2]", "field 'grad'", "must be a list drawn from"),
    ("input: [1.0]\n  target: [1.0]\n  grad: [[input]]", "field 'grad'", "must be a list drawn from"),
])
def test_a_bad_shape_or_grad_names_file_case_and_field(tmp_path, fields, where, words):
    path = _write(tmp_path, "- id: a\n  " + fields + "\n")
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: case 'a', {where}: ") and words in message and "Fix:" in message, message
    assert "\n" not in message


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


def test_numbers_follow_yaml_1_2(tmp_path):
    """PyYAML's YAML 1.1 rule read `1e-3` and `1E5` as strings (a float needed a dot)."""
    path = _write(tmp_path, "- id: a\n  input: [1e-3, 1E5, .5, -2e+2, 0x10, 010]\n"
                            "  target: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]\n  dtype: float64\n")
    (case,) = load_case_file(path)
    assert case.input.tolist() == [0.001, 100000.0, 0.5, -200.0, 16.0, 10.0]


@pytest.mark.parametrize("text, words", [
    # a 400-digit integer is 1e400: it used to end in OverflowError
    ("- id: a\n  input: [1" + "0" * 400 + "]\n  target: [0.5]\n", "(401 digits) is too large for a float64"),
    ("- id: a\n  input: [1.0e400]\n  target: [0.5]\n", "too large for a float64"),
    # YAML 1.1 let the second key win silently
    ("- id: a\n  input: [1.0]\n  input: [2.0]\n  target: [0.5]\n", "key 'input' given twice"),
    ("- id: a\n  input: 1:30\n  target: 0.5\n", "'1:30' at top level is not a number"),  # 90 in YAML 1.1
    ("- id: a\n  input: " + "[" * 40 + "1" + "]" * 40 + "\n  target: 0.5\n", "more than 32 nested lists"),
    ("- id: a\n  input: " + "[" * 3000 + "1" + "]" * 3000 + "\n  target: 0.5\n", "nested too deeply"),
])
def test_odd_values_are_refused_in_one_line(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    message = str(info.value)
    assert message.startswith(str(path)) and words in message and "Fix:" in message, message


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("- id: café\n  input: [1.0]\n  target: [0.5]\n".encode("latin-1"))
    with pytest.raises(CaseFileError, match="not UTF-8 text"):
        load_case_file(path)
