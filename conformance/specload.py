"""Loads and validates the spec file; owns the mapping from YAML to `Spec`.

Never computes anything from the spec: that is the reference's job.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from conformance.errors import SpecError
from conformance.model import Spec

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
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the spec ({exc.strerror})", file=shown,
                        fix="pass --spec with the path of a readable spec file") from None
    data = parse_yaml(text, shown, SpecError)
    validate_spec_data(data, shown)
    return Spec(data=data, source=shown, hash=spec_hash(data))


def parse_yaml(text: str, shown: str, error: type[SpecError] | type) -> Any:
    """Safe-load YAML (no object construction); a syntax error names line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"invalid YAML: {problem}", file=shown, where=where,
                    fix="correct the YAML syntax at that position") from None


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
    """Rules a JSON Schema cannot state: every floating pair has a promotion row."""
    floating = data["dtypes"]["floating"]
    pairs = {frozenset((r["input"], r["target"])) for r in data["dtypes"]["promotion"]}
    for i, a in enumerate(floating):
        for b in floating[i + 1:]:
            if frozenset((a, b)) not in pairs:
                raise SpecError(f"no promotion row for {a!r} with {b!r}", file=shown, where="dtypes.promotion",
                                fix=f"add {{input: {a}, target: {b}, result: ...}}")
    params = data["signature"]["parameters"]
    if params["reduction"]["default"] not in params["reduction"]["values"]:
        raise SpecError(f"default {params['reduction']['default']!r} is not one of {params['reduction']['values']}",
                        file=shown, where="signature.parameters.reduction.default", fix="pick one of the values")


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


def spec_hash(data: Any) -> str:
    """Hash of the spec's meaning: canonical JSON, so comments and layout do not count."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
