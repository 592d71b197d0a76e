"""Loads user case files: YAML lists of hand-written cases, e.g. regressions from bug reports.

Each entry: `id`, `input`, `target` (nested lists of numbers; .inf, -.inf, .nan
allowed), and optionally `dtype` (a name, or {input: NAME, target: NAME}), `shape`
(a list of sizes, or {input: SIZES, target: SIZES}: what a nested list cannot state,
such as [0, 4]), `reduction`, `log_target`, `size_average`, `reduce`, `layout`, `grad`
(input, target, grad2_input), `input_space`, `note`.
Numbers follow YAML 1.2 (`1e-3` is a number; conformance/core/yamlload.py). Every problem
is reported with the file, the case id and the field.

Never imports a framework or the reference.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from conformance.core.case import LAYOUTS, Case, DtypePair, Params
from conformance.core.errors import CaseFileError
from conformance.core.model import FLOAT_DTYPES
from conformance.core.rounding import INTEGER_DTYPES, is_representable, round_to_dtype
from conformance.core.yamlload import parse_yaml, read_text

FIELDS = ("id", "input", "target", "dtype", "shape", "reduction", "log_target", "size_average", "reduce", "layout",
          "grad", "input_space", "note")
INPUT_SPACES = ("log", "probability")  # input as log q (canonical), or q (spec: dialects.*.input_space)
REQUIRED = ("id", "input", "target")
KNOWN_DTYPES = FLOAT_DTYPES + INTEGER_DTYPES
# gradients a case may ask for, and the part each is: the first derivatives by argument, and the second-order
# part by its own name (spec: gradients.second_order.part, d/dtarget of grad_input)
GRADS = {"input": "grad_input", "target": "grad_target", "grad2_input": "grad2_input"}
MAX_DIMS = 32  # NumPy's limit is 32 (1.x) or 64 (2.x) dimensions
MAX_ELEMENTS = 1 << 24  # per tensor stated by `shape`: a number fills it, so a typo must not fill the memory
# A case file's bounds, set so that the largest file accepted parses in seconds (docs/guide/cases.md): its bytes,
# its YAML values (each number, string, list and mapping; aliases expanded), and its cases.
MAX_FILE_BYTES = 16 * 2**20
MAX_FILE_VALUES = 500_000
MAX_CASES = 10_000


def load_case_file(path: str | Path) -> list[Case]:
    """Parse and validate one case file.

    Raises
    ------
    CaseFileError
        naming the file, the case id (or entry index) and the field.
    """
    shown = str(path)
    text = read_text(path, shown, CaseFileError, fix="give --cases the path of a readable YAML file",
                     max_bytes=MAX_FILE_BYTES)
    data = parse_yaml(text, shown, CaseFileError, max_values=MAX_FILE_VALUES)
    if not isinstance(data, list) or not data:
        raise CaseFileError(f"expected a non-empty YAML list of cases, got {type(data).__name__}", file=shown,
                            fix="write the file as a list: '- id: my-case' followed by its fields")
    if len(data) > MAX_CASES:
        raise CaseFileError(f"{len(data)} cases, more than the {MAX_CASES} a case file may hold", file=shown,
                            fix="split the file into smaller ones and pass each with --cases")
    cases, seen = [], set()
    for index, entry in enumerate(data):
        case = _parse_entry(entry, index, shown)
        if case.id in seen:
            raise CaseFileError(f"duplicate id {case.id!r}", file=shown, where=f"case {case.id!r}",
                                fix="give every case a unique id")
        seen.add(case.id)
        cases.append(case)
    return cases


def _parse_entry(entry: Any, index: int, shown: str) -> Case:
    where = f"entry {index}"
    if not isinstance(entry, dict):
        raise CaseFileError(f"expected a mapping, got {type(entry).__name__}", file=shown, where=where,
                            fix="each list item needs fields such as 'id:', 'input:' and 'target:'")
    case_id = entry.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        raise CaseFileError(f"field 'id' must be a non-empty string, got {case_id!r}", file=shown, where=where,
                            fix="add 'id: some-name' to the case")
    where = f"case {case_id!r}"

    def fail(field: str, problem: str, fix: str) -> CaseFileError:
        return CaseFileError(problem, file=shown, where=f"{where}, field {field!r}", fix=fix)

    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise fail(unknown[0], f"unknown field {unknown[0]!r}", f"use only the fields {list(FIELDS)}")
    for name in REQUIRED:
        if name not in entry:
            raise fail(name, f"missing field {name!r}", f"add '{name}:' to the case")

    dtype = _parse_dtype(entry.get("dtype", "float32"), fail)
    reduction = entry.get("reduction", "mean")
    if not isinstance(reduction, str):
        raise fail("reduction", f"must be a string, got {reduction!r}", "write e.g. 'reduction: batchmean'")
    flags = {}
    for name, allowed_none in (("log_target", False), ("size_average", True), ("reduce", True)):
        value = entry.get(name, False if not allowed_none else None)
        if not (isinstance(value, bool) or (allowed_none and value is None)):
            allowed = "true, false or null" if allowed_none else "true or false"
            raise fail(name, f"must be {allowed}, got {value!r}", f"write '{name}: {allowed.split(',')[0]}'")
        flags[name] = value
    layout = entry.get("layout", "contiguous")
    if layout not in LAYOUTS:
        raise fail("layout", f"unknown layout {layout!r}", f"use one of {list(LAYOUTS)}")
    grad = entry.get("grad", [])
    if not isinstance(grad, list) or any(not isinstance(g, str) or g not in GRADS for g in grad):
        raise fail("grad", f"must be a list drawn from {list(GRADS)}, got {grad!r}",
                   "write e.g. 'grad: [input]' or 'grad: [input, target, grad2_input]'")
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise fail("note", f"must be a string, got {note!r}", "quote the note")

    x = _parse_tensor(entry["input"], dtype.input, f"{where}, field 'input'", shown)
    t = _parse_tensor(entry["target"], dtype.target, f"{where}, field 'target'", shown)
    if "shape" in entry:
        shapes = _parse_shape(entry["shape"], fail)
        x = _to_shape(x, shapes["input"], "input", fail)
        t = _to_shape(t, shapes["target"], "target", fail)
    if layout == "transposed" and (x.ndim < 2 or t.ndim < 2):
        raise fail("layout", "'transposed' needs tensors of at least 2 dimensions", "use 'contiguous' or 'strided'")
    if layout == "strided" and (x.ndim < 1 or t.ndim < 1):
        raise fail("layout", "'strided' needs tensors of at least 1 dimension", "use 'contiguous'")
    input_space = entry.get("input_space", "log")
    if input_space not in INPUT_SPACES:
        raise fail("input_space", f"unknown input space {input_space!r}", f"use one of {list(INPUT_SPACES)}")
    params = Params(reduction, flags["log_target"], flags["size_average"], flags["reduce"],
                    prob_input=input_space == "probability")
    parts = ("forward",) + tuple(dict.fromkeys(GRADS[g] for g in grad))
    return Case(id=case_id, params=params, input=x, target=t, dtype=dtype, family="user", layout=layout,
                parts=parts, source=shown)


def _parse_dtype(value: Any, fail) -> DtypePair:
    if isinstance(value, str):
        names = {"input": value, "target": value}
    elif isinstance(value, dict) and set(value) == {"input", "target"}:
        names = value
    else:
        raise fail("dtype", f"expected a dtype name or {{input: NAME, target: NAME}}, got {value!r}",
                   f"use one of {list(KNOWN_DTYPES)}")
    for side, name in names.items():
        if name not in KNOWN_DTYPES:
            raise fail("dtype", f"unknown dtype {name!r} for {side}", f"use one of {list(KNOWN_DTYPES)}")
    return DtypePair(names["input"], names["target"])


def _parse_shape(value: Any, fail) -> dict[str, tuple[int, ...]]:
    """`shape`: one list of sizes for both tensors, or {input: SIZES, target: SIZES}, as `dtype` is written."""
    sides = value if isinstance(value, dict) and set(value) == {"input", "target"} else {"input": value,
                                                                                        "target": value}
    shapes = {}
    for side, sizes in sides.items():
        if not isinstance(sizes, list) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in sizes):
            raise fail("shape", f"expected a list of sizes (integers >= 0) or {{input: SIZES, target: SIZES}}, "
                                f"got {sizes!r}" + (f" for {side}" if sides is value else ""),
                       "write e.g. 'shape: [0, 4]', or 'shape: {input: [0, 4], target: [4]}'")
        if len(sizes) > MAX_DIMS:
            raise fail("shape", f"{len(sizes)} dimensions for {side}", f"give tensors at most {MAX_DIMS} dimensions")
        if math.prod(sizes) > MAX_ELEMENTS:
            raise fail("shape", f"{math.prod(sizes)} elements for {side}",
                       f"give a tensor at most {MAX_ELEMENTS} elements")
        shapes[side] = tuple(sizes)
    return shapes


def _to_shape(values: np.ndarray, shape: tuple[int, ...], side: str, fail) -> np.ndarray:
    """The values in `shape`: one number fills it; a list gives its elements in row-major order."""
    if values.ndim == 0:
        return np.full(shape, values, dtype=np.float64)
    if values.size != math.prod(shape):
        raise fail(side, f"{values.size} numbers for shape {list(shape)}, which holds {math.prod(shape)}",
                   f"give {math.prod(shape)} numbers (row-major, nested or flat), or one number to fill the "
                   f"shape; an empty shape such as [0, 4] takes []")
    return values.reshape(shape)


def _parse_tensor(value: Any, dtype: str, where: str, shown: str) -> np.ndarray:
    """A nested list (or a number, for 0-d) to a float64 array; ragged lists and non-numbers are errors."""
    def check(node: Any, depth: int, path: str) -> None:
        if depth > MAX_DIMS:
            raise CaseFileError(f"more than {MAX_DIMS} nested lists at {path}", file=shown, where=where,
                                fix=f"give tensors at most {MAX_DIMS} dimensions")
        if isinstance(node, list):
            for i, item in enumerate(node):
                check(item, depth + 1, f"{path}[{i}]")
            kinds = {isinstance(item, list) for item in node}
            lengths = {len(item) for item in node if isinstance(item, list)}
            if len(kinds) > 1 or len(lengths) > 1:
                raise CaseFileError(f"ragged tensor at {path or 'top level'}: rows differ in length or nesting",
                                    file=shown, where=where, fix="give every row the same number of elements")
        elif isinstance(node, bool) and dtype != "bool":
            raise CaseFileError(f"boolean {node!r} at {path or 'top level'} in a {dtype} tensor", file=shown,
                                where=where, fix="write numbers, or set dtype: bool")
        elif not isinstance(node, (int, float)):
            raise CaseFileError(f"{node!r} at {path or 'top level'} is not a number", file=shown, where=where,
                                fix="write numbers; use .inf, -.inf and .nan for the special values")
        elif isinstance(node, int) and not _fits_float64(node):
            raise CaseFileError(f"the integer at {path or 'top level'} ({len(str(abs(node)))} digits) is too large "
                                "for a float64", file=shown, where=where,
                                fix="write a number below 1.8e308, or .inf / -.inf for infinity")

    check(value, 0, "")
    array = np.asarray(value, dtype=np.float64)
    if dtype in INTEGER_DTYPES and not is_representable(array, dtype):
        raise CaseFileError(f"values not representable in {dtype} (fractions or non-finite values)", file=shown,
                            where=where, fix=f"write integers for dtype {dtype}" + (" (0 or 1)" if dtype == "bool" else ""))
    if dtype in INTEGER_DTYPES and dtype != "bool":
        info = np.iinfo(dtype)
        # float(info.max) + 1 is 2**63 exactly for int64, where float(info.max) alone rounds up to it
        outside = (array < float(info.min)) | (array >= float(info.max) + 1)
        if outside.any():
            value = array[outside].flat[0]
            raise CaseFileError(f"the value {value:.17g} is outside {dtype}'s range [{info.min}, {info.max}]",
                                file=shown, where=where, fix=f"write integers from {info.min} to {info.max}, "
                                                             "or choose a wider dtype")
    return round_to_dtype(array, dtype)


def _fits_float64(number: int) -> bool:
    try:
        float(number)
    except OverflowError:
        return False
    return True
