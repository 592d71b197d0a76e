"""Reads users' YAML files (case files, known-findings files) by the YAML 1.2 core schema.

PyYAML resolves plain scalars by YAML 1.1, where `1e-3` and `1E5` are strings (a float
needs a dot), `1:30` is the integer 90, `010` is 8, `yes` is true and `2024-01-01` a date.
A user writing numbers means numbers, so this loader takes the YAML 1.2 core rules
(https://yaml.org/spec/1.2.2/#1032-tag-resolution): `true`/`false`, decimal, `0o` and `0x`
integers, floats with or without a dot or exponent, `.inf` and `.nan`; everything else is
a string. It also refuses what YAML 1.1 accepts silently: a repeated key in a mapping (the
last one used to win), and a float literal too large for float64 (it used to become inf).
Loading is safe: no tag constructs an object.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from conformance.core.errors import ConformanceError

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
# YAML 1.1 resolvers that the core schema does not have (merge keys and `=` included)
_DROPPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
            "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"}


class CoreLoader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema's booleans and numbers, refusing repeated keys."""

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, f"expected a mapping, found {node.id}",
                                                    node.start_mark)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in mapping
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a list or mapping used as a key",
                                                        key_node.start_mark) from None
            if repeated:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice in one mapping",
                                                        key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _construct_bool(loader: CoreLoader, node) -> bool:
    return loader.construct_scalar(node).lower() == "true"


def _construct_int(loader: CoreLoader, node) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text)


def _construct_float(loader: CoreLoader, node) -> float:
    text = loader.construct_scalar(node)
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if lowered.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise yaml.constructor.ConstructorError(None, None, f"the number {text} is too large for a float64 "
                                                "(write .inf or -.inf for infinity)", node.start_mark)
    return value


CoreLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
CoreLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
CoreLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
CoreLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def read_text(path, shown: str, error: type[ConformanceError], fix: str) -> str:
    """A user file's text; an unreadable or non-UTF-8 file is `error` naming the file."""
    from pathlib import Path

    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror})", file=shown, fix=fix) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", file=shown, fix="save the file as UTF-8") from None


def parse_yaml(text: str, shown: str, error: type[ConformanceError]) -> Any:
    """Load `text` with CoreLoader; a syntax or value problem names line and column."""
    try:
        return yaml.load(text, Loader=CoreLoader)  # noqa: S506 - CoreLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = exc.problem or str(exc)
        raise error(f"invalid YAML: {problem}", file=shown, where=where,
                    fix="correct the YAML at that position") from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}", file=shown, fix="correct the YAML syntax") from None
    except RecursionError:
        raise error("invalid YAML: nested too deeply", file=shown, fix="nest lists fewer levels deep") from None
