"""The spec's arithmetic: formulas written as expressions, parsed once and evaluated over NumPy arrays.

The spec states its formulas, terms and tolerances as text (``target * (log(target) - input)``,
``factor * (u * magnitude + tiny * (1 + s))``). This module owns that small language: Python
expression syntax restricted to numbers, the names a field allows, + - * / **, unary minus and the
functions below. Nothing else parses, so evaluating a spec runs no code of the spec's author. Evaluation
walks the checked tree with every number a float: no operation works on Python's unbounded integers, so
`9**9**9` is inf at once instead of a computation without end.
Imports only the errors; never computes a reference value itself.
"""

from __future__ import annotations

import ast
import functools
from typing import Any, Mapping

import numpy as np

from conformance.core.errors import SpecError

FUNCTIONS = {
    "log": np.log, "exp": np.exp, "abs": np.abs, "log2": np.log2, "ceil": np.ceil,
    "max": np.maximum, "min": np.minimum,
}
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd)
_BINARY = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
           ast.Pow: np.power}
MAX_FORMULA_CHARS = 1000  # a formula's text; the spec's are under a hundred

# The names each formula field of the spec may use (spec path -> names). A path ending in `[]`
# stands for every item of a list; `*` for every key of a mapping.
VARIABLES: dict[str, tuple[str, ...]] = {
    "pointwise.log_target_false.formula": ("input", "target"),
    "pointwise.log_target_false.terms[]": ("input", "target"),
    "pointwise.log_target_true.formula": ("input", "target"),
    "pointwise.log_target_true.terms[]": ("input", "target"),
    "gradients.log_target_false.input": ("input", "target"),
    "gradients.log_target_false.target": ("input", "target"),
    "gradients.log_target_false.terms.*[]": ("input", "target"),
    "gradients.log_target_true.input": ("input", "target"),
    "gradients.log_target_true.target": ("input", "target"),
    "gradients.log_target_true.terms.*[]": ("input", "target"),
    "gradients.second_order.formula.*": ("input", "target"),
    "gradients.second_order.terms.*[]": ("input", "target"),
    "dialects.keras.formula": ("input", "target"),
    "dialects.keras.terms[]": ("input", "target"),
    "dialects.keras.gradients.input": ("input", "target"),
    "dialects.keras.gradients.target": ("input", "target"),
    "dialects.keras.gradients.second_order": ("input", "target"),
    "dialects.keras.gradients.terms.*[]": ("input", "target"),
    "dialects.keras.gradients.sensitivity.*": ("input", "target"),
    "dtypes.exp_approximation.relative_error": ("target", "u"),
    "tolerance.pointwise.formula": ("factor", "u", "tiny", "magnitude", "s"),
    "tolerance.pointwise.sensitivity.*": ("input", "target"),
    "tolerance.reduction.formula": ("sum_bounds", "sum_abs", "gamma", "divisor", "result", "u"),
    "tolerance.reduction.gamma": ("n", "u"),
    "tolerance.gradient.formula": ("factor", "u", "tiny", "magnitude", "scale", "s"),
    "tolerance.gradient.sensitivity.*.*": ("input", "target"),
    "tolerance.gradient.summation": ("gamma", "sum_abs"),
    "tolerance.gradient.gamma": ("n", "u"),
}


def formula_fields(data: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Every formula in a spec document: (concrete YAML path, text, allowed names)."""
    found = []
    for pattern, names in VARIABLES.items():
        for path, text in _expand(data, pattern.split("."), ""):
            found.append((path, text, names))
    return found


def _expand(node: Any, keys: list[str], path: str):
    if not keys:
        yield path, node
        return
    key, rest = keys[0], keys[1:]
    is_list = key.endswith("[]")
    key = key.removesuffix("[]")
    children = node.items() if key == "*" and isinstance(node, Mapping) else \
        [(key, node[key])] if isinstance(node, Mapping) and key in node else []
    for name, child in children:
        child_path = f"{path}.{name}" if path else name
        if is_list:
            for i, item in enumerate(child if isinstance(child, list) else []):
                yield from _expand(item, rest, f"{child_path}[{i}]")
        else:
            yield from _expand(child, rest, child_path)


def check_formulas(data: Mapping[str, Any], shown: str) -> None:
    """Parse every formula of a spec document; an unknown name or construct is a SpecError naming its path."""
    for path, text, names in formula_fields(data):
        compile_formula(text, names, shown, path)


@functools.lru_cache(maxsize=None)
def compile_formula(text: str, names: tuple[str, ...], shown: str = "spec", where: str = "") -> Any:
    """The expression tree of `text`, after checking that it uses only `names`, numbers and FUNCTIONS.

    Raises
    ------
    SpecError
        naming `where` (the spec path), the offending construct and the allowed names.
    """
    def fail(problem: str) -> SpecError:
        return SpecError(f"{problem} in formula {text!r}", file=shown, where=where,
                         fix=f"write an expression of {list(names)}, numbers, + - * / ** and "
                             f"{sorted(FUNCTIONS)}")

    if not isinstance(text, str):
        raise fail(f"not a string ({type(text).__name__})")
    if len(text) > MAX_FORMULA_CHARS:
        raise SpecError(f"a formula of {len(text)} characters (at most {MAX_FORMULA_CHARS})", file=shown,
                        where=where, fix="write a shorter formula")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise fail(f"syntax error ({getattr(exc, 'msg', exc)})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in names and node.id not in FUNCTIONS:
                raise fail(f"unknown name {node.id!r}")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                raise fail("a call of something other than a listed function")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
                raise fail(f"constant {node.value!r}")
            if isinstance(node.value, int) and node.value.bit_length() > 1024:
                raise fail("an integer beyond float64's range")
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Load) + _OPERATORS):
            raise fail(f"{type(node).__name__} is not allowed")
    return tree.body


def evaluate(text: str, names: tuple[str, ...], **values: Any) -> Any:
    """The value of the formula `text` with `values` bound to its names, elementwise over arrays.

    Is equivalent to ``eval(text, {**FUNCTIONS, **values})`` for a text that `compile_formula` accepts,
    except that its integer literals are floats: arithmetic between Python numbers is done in float64
    (overflow gives inf, not an endless big-integer power), and a Python float stays a weak scalar
    beside an array, as the literal did.
    """
    tree = compile_formula(text, names)
    with np.errstate(all="ignore"):
        return _walk(tree, values)


def _walk(node: ast.AST, values: dict[str, Any]) -> Any:
    """The value of a checked expression tree (compile_formula allows nothing else)."""
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _walk(node.operand, values)
        return _scalar(np.negative, operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        return _scalar(_BINARY[type(node.op)], _walk(node.left, values), _walk(node.right, values))
    return FUNCTIONS[node.func.id](*(_walk(arg, values) for arg in node.args))


def _scalar(function, *operands: Any) -> Any:
    """`function` of the operands; between Python numbers only, in float64 and back to a Python float."""
    if all(isinstance(operand, (int, float)) and not isinstance(operand, bool) for operand in operands):
        return float(function(*(np.float64(operand) for operand in operands)))
    return function(*operands)


def sum_of_abs(texts: list[str], names: tuple[str, ...], **values: Any) -> Any:
    """sum_i |term_i| for the spec's list of terms: the magnitude a tolerance scales with."""
    total = 0
    for text in texts:
        total = total + np.abs(evaluate(text, names, **values))
    return total
