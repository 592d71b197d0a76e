"""Loads and validates the spec file; owns the mapping from YAML to `Spec`.

Never computes anything from the spec: that is the reference's job.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from conformance.core.case import LAYOUTS
from conformance.core.choices import check_choice_points
from conformance.core.errors import SpecError
from conformance.core.formula import check_formulas
from conformance.core.model import FLOAT_FORMATS, PARTS, UPSTREAM, Spec, spec_hash
from conformance.core.tolerance import check_tolerance_formulas
from conformance.core.yamlload import SpecLoader
from conformance.core.yamlload import parse_yaml as parse_bounded
from conformance.core.yamlload import read_text

SPEC_PACKAGE = "conformance.spec"


def default_spec_path() -> Path:
    """The spec shipped with the harness."""
    return Path(str(resources.files(SPEC_PACKAGE).joinpath("kl_div.yaml")))


def load_schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped beside the spec (kl_div.schema.json, results.schema.json)."""
    return json.loads(resources.files(SPEC_PACKAGE).joinpath(name).read_text(encoding="utf-8"))


def load_spec(path: str | Path | None = None) -> Spec:
    """Read, validate and hash a spec file.

    Raises
    ------
    SpecError
        naming the file, the path inside the YAML and the problem.
    """
    path = Path(path) if path is not None else default_spec_path()
    shown = str(path)
    text = read_text(path, shown, SpecError, fix="give --spec the path of a readable spec file")
    data = parse_yaml(text, shown, SpecError)
    check_finite(data, shown)
    validate_spec_data(data, shown)
    return Spec(data=data, source=shown, hash=spec_hash(data))


# libyaml's parser where PyYAML was built with it (SpecLoader's base): much faster than the pure-Python
# parser on the spec, which every command reads before it starts
SAFE_LOADER = SpecLoader.__mro__[2]


def parse_yaml(text: str, shown: str, error: type[SpecError] | type) -> Any:
    """Safe-load a spec or profile (no object construction), bounded, refusing repeated keys; a syntax error
    names line and column."""
    return parse_bounded(text, shown, error, loader=SpecLoader)


def check_finite(data: Any, shown: str, path: tuple = ()) -> None:
    """Every number of a spec is finite: an infinite or NaN constant makes a bound that accepts anything."""
    if isinstance(data, float) and not math.isfinite(data):
        raise SpecError(f"the number {data!r} is not finite", file=shown, where=yaml_path(path) or "(top level)",
                        fix="write a finite number")
    if isinstance(data, dict):
        for key, value in data.items():
            check_finite(value, shown, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_finite(value, shown, path + (i,))


def validate_spec_data(data: Any, shown: str) -> None:
    """Check `data` against kl_div.schema.json, reporting the first error by YAML path."""
    validator = jsonschema.Draft202012Validator(load_schema("kl_div.schema.json"))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        raise SpecError(err.message, file=shown, where=yaml_path(err.absolute_path) or "(top level)",
                        fix=_schema_fix(err))
    _check_consistency(data, shown)


def _check_consistency(data: dict[str, Any], shown: str) -> None:
    """Rules a JSON Schema cannot state, so that a spec stating something false is refused: the
    dtype constants, the promotion table, the formulas' names, the choice points and the upstream gradient."""
    check_choice_points(data, shown)
    _check_dtype_constants(data["dtypes"], shown)
    _check_promotion(data["dtypes"], shown)
    _check_computation(data["dtypes"], shown)
    _check_inferred(data["dtypes"], shown)
    check_formulas(data, shown)
    check_tolerance_formulas(data, shown)
    stated = data["gradients"]["upstream"]
    pattern = {key: stated["none"][key] for key in UPSTREAM["none"]}
    if pattern != UPSTREAM["none"] or set(stated["none"]) != set(pattern) or stated["reduced"] != UPSTREAM["reduced"]:
        raise SpecError(f"states {dict(stated['none'])} / {stated['reduced']}, but every adapter and reproducer "
                        f"applies {UPSTREAM['none']} / {UPSTREAM['reduced']}",
                        file=shown, where="gradients.upstream",
                        fix="state the pattern of conformance.core.model.UPSTREAM (or change it there, for every adapter)")
    _check_legacy_mapping(data["signature"], shown)
    _check_dialect_reductions(data, shown)
    if list(data["gradients"]["parts"]) != list(PARTS[1:]):
        raise SpecError(f"lists {list(data['gradients']['parts'])}, but the harness computes {list(PARTS[1:])}",
                        file=shown, where="gradients.parts", fix=f"write {list(PARTS[1:])}")
    if list(data["shapes"]["layouts"]["values"]) != list(LAYOUTS):
        raise SpecError(f"lists {list(data['shapes']['layouts']['values'])}, but the adapters lay tensors out as "
                        f"{list(LAYOUTS)}", file=shown, where="shapes.layouts.values", fix=f"write {list(LAYOUTS)}")
    params = data["signature"]["parameters"]
    if params["reduction"]["default"] not in params["reduction"]["values"]:
        raise SpecError(f"default {params['reduction']['default']!r} is not one of {params['reduction']['values']}",
                        file=shown, where="signature.parameters.reduction.default", fix="pick one of the values")


def _check_dialect_reductions(data: dict[str, Any], shown: str) -> None:
    """The canonical dialect takes exactly the signature's reductions; every other dialect a subset of them."""
    signature = list(data["signature"]["parameters"]["reduction"]["values"])
    for name, dialect in data["dialects"].items():
        taken = list(dialect["reductions"])
        if (name == "canonical" and sorted(taken) != sorted(signature)) or not set(taken) <= set(signature):
            raise SpecError(f"lists {taken}, but the signature's reductions are {signature}", file=shown,
                            where=f"dialects.{name}.reductions",
                            fix="list the signature's reductions (canonical), or some of them (another dialect)")


def _check_legacy_mapping(signature: dict[str, Any], shown: str) -> None:
    """The legacy mapping has one row for every combination of the legacy arguments' values in which at
    least one is given, and maps it to a reduction of the signature."""
    params = signature["parameters"]
    reductions = list(params["reduction"]["values"])
    rows = {(row["size_average"], row["reduce"]): row["reduction"] for row in signature["legacy"]["mapping"]}
    for i, row in enumerate(signature["legacy"]["mapping"]):
        if row["reduction"] not in reductions:
            raise SpecError(f"maps to {row['reduction']!r}, not one of {reductions}", file=shown,
                            where=f"signature.legacy.mapping[{i}].reduction", fix=f"use one of {reductions}")
    for size_average in params["size_average"]["values"]:
        for reduce in params["reduce"]["values"]:
            if (size_average, reduce) != (None, None) and (size_average, reduce) not in rows:
                raise SpecError(f"no row for size_average={size_average!r}, reduce={reduce!r}", file=shown,
                                where="signature.legacy.mapping", fix="add the row, with the reduction it means")


def _check_dtype_constants(dtypes: dict[str, Any], shown: str) -> None:
    """unit_roundoff (2**-bits) and smallest_subnormal (2**(min_exp - bits + 1)) must be the formats'
    own, and NumPy's finfo where NumPy has the type."""
    for name, (bits, min_exp, _) in FLOAT_FORMATS.items():
        truth = {"unit_roundoff": 2.0 ** -bits, "smallest_subnormal": 2.0 ** (min_exp - bits + 1)}
        if name != "bfloat16":  # NumPy has no bfloat16; its constants follow from the format above
            info = np.finfo(name)
            truth = {"unit_roundoff": float(info.eps) / 2, "smallest_subnormal": float(info.smallest_subnormal)}
        for field, value in truth.items():
            stated = dtypes[field].get(name)
            if stated != value:
                raise SpecError(f"{name} is stated as {stated!r}, but the format's is {value!r}", file=shown,
                                where=f"dtypes.{field}.{name}", fix=f"write {value!r}")


def _check_computation(dtypes: dict[str, Any], shown: str) -> None:
    """dtypes.computation: every choice but one names the floating dtype a call is cast to; the one left computes
    in the result dtype."""
    _check_dtype_choices(dtypes["computation"], dtypes["floating"], 1, "dtypes.computation", shown)


def _check_inferred(dtypes: dict[str, Any], shown: str) -> None:
    """dtypes.inferred: every choice of python_float names the dtype Python floats become; every choice of
    numpy_array but one (an array keeps its dtype) names the dtype a wider array narrows to."""
    _check_dtype_choices(dtypes["inferred"]["python_float"], dtypes["floating"], 0, "dtypes.inferred.python_float",
                         shown)
    _check_dtype_choices(dtypes["inferred"]["numpy_array"], dtypes["floating"], 1, "dtypes.inferred.numpy_array",
                         shown)


def _check_dtype_choices(node: dict[str, Any], floating: list[str], others: int, path: str, shown: str) -> None:
    """A choice point whose choices reference/computation.py reads as dtypes: all but `others` of them name a
    floating dtype."""
    named_otherwise = [name for name in node["choices"] if name not in floating]
    if len(named_otherwise) != others:
        raise SpecError(f"choices {named_otherwise} name no floating dtype, where {others} may", file=shown,
                        where=f"{path}.choices",
                        fix=f"name {'each other' if others else 'each'} choice after a dtype of {floating}")


def _check_promotion(dtypes: dict[str, Any], shown: str) -> None:
    """The promotion table is symmetric, complete, closed and a lattice: one row per unordered pair of
    floating dtypes, a result among them that holds both (no less precision or range than either),
    and associative (promoting three dtypes in any order gives one answer)."""
    floating = dtypes["floating"]
    table: dict[frozenset, str] = {}
    for i, row in enumerate(dtypes["promotion"]):
        pair, where = frozenset((row["input"], row["target"])), f"dtypes.promotion[{i}]"
        if not set(pair) | {row["result"]} <= set(floating):
            raise SpecError(f"row {row} names a dtype outside dtypes.floating {floating}", file=shown, where=where,
                            fix="promote only floating dtypes, to a floating dtype")
        if len(pair) == 1:
            raise SpecError(f"row {row} promotes a dtype with itself", file=shown, where=where,
                            fix="remove the row: a dtype promotes to itself")
        if pair in table:
            raise SpecError(f"a second row for {sorted(pair)}", file=shown, where=where,
                            fix="keep one row per pair: promotion is symmetric")
        bits, min_exp, _ = FLOAT_FORMATS[row["result"]]
        if any(FLOAT_FORMATS[d][0] > bits or FLOAT_FORMATS[d][1] < min_exp for d in pair):
            raise SpecError(f"{row['result']} cannot hold every value of {sorted(pair)}", file=shown, where=where,
                            fix="promote to a dtype with at least the precision and range of both")
        table[pair] = row["result"]
    promote = lambda a, b: a if a == b else table.get(frozenset((a, b)))
    for i, a in enumerate(floating):
        for b in floating[i + 1:]:
            if frozenset((a, b)) not in table:
                raise SpecError(f"no promotion row for {a!r} with {b!r}", file=shown, where="dtypes.promotion",
                                fix=f"add {{input: {a}, target: {b}, result: ...}}")
    for a in floating:
        for b in floating:
            for c in floating:
                if promote(promote(a, b), c) != promote(a, promote(b, c)):
                    raise SpecError(f"promoting {a}, {b} and {c} depends on the order", file=shown,
                                    where="dtypes.promotion", fix="make the table a lattice (associative)")


def _schema_fix(err: jsonschema.ValidationError) -> str:
    if err.validator == "enum":
        return f"use one of {err.validator_value}"
    if err.validator == "required":
        return "add the missing field"
    if err.validator == "additionalProperties":
        return "remove or rename the unknown field (see spec/kl_div.schema.json)"
    if err.validator == "type":
        return f"give a value of type {err.validator_value}"
    return "see spec/kl_div.schema.json for the allowed form"


def yaml_path(parts: Any) -> str:
    """`['a', 'b', 0, 'c']` -> `a.b[0].c`."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out

