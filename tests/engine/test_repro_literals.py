"""Text from a case file (a reduction string, a case id) enters a reproducer only as a string literal.

No framework is needed: adapters render reproducers without importing theirs.
"""

from __future__ import annotations

import ast
import re

import pytest

from conformance.adapters.base import ApiCall
from conformance.adapters.registry import get_adapter
from conformance.core.model import Expected
from tests.helpers import code_without_strings, make_case

HOSTILE = [
    '"""; __import__("os").system("echo owned") #',
    "mean'); __import__('os').system('echo owned'); ('",
    "sum\n__import__('os').system('echo owned')\n",
    'x\\"\\n"""\'\'\'\r\x00{}%s',
]
DEVICES = {"keras": "tensorflow:cpu"}


def _strings(source: str) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_api_call_states_values_as_literals(hostile):
    call = ApiCall.module("torch.nn.KLDivLoss", "x", "t", reduction=hostile, log_target=False)
    source = call.source()
    assert "__import__" not in code_without_strings(source)
    assert hostile in _strings(source)


@pytest.mark.parametrize("bad", [dict(path="torch.nn.kl_div(x); os"), dict(path="torch.nn.KLDivLoss", args=("y",)),
                                 dict(path="torch.nn.KLDivLoss", kwargs=(("reduction", object()),)),
                                 dict(path="torch.nn.KLDivLoss", kwargs=(("a=1, b", 1),))])
def test_api_call_refuses_what_is_not_a_plain_call(bad):
    with pytest.raises(ValueError):
        ApiCall(**bad)


@pytest.mark.parametrize("name", ["torch", "oneflow", "paddle", "mindspore", "mlx", "optax", "keras"])
@pytest.mark.parametrize("hostile", HOSTILE)
def test_reproducer_takes_case_text_only_as_literals(name, hostile):
    adapter = get_adapter(name)  # not loaded: rendering imports no framework
    case = make_case([[-1.0, -2.0]], [[0.5, 0.5]], reduction=hostile, case_id=hostile,
                     log_target=name == "mlx")
    about = (f"Reproduces kl_div case {case.id} on an API (cpu, forward).", f"message: {hostile}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    expected = Expected(result_dtype=None, error_id=hostile, error_type="ValueError")
    for api in adapter.apis:
        for part in ("forward", "grad_input", "grad2_input"):
            script, suffix = adapter.repro_script(case, api, DEVICES.get(name, "cpu"), part, about, expected)
            assert suffix == ".py"
            assert "__import__" not in code_without_strings(script), f"{api.name}/{part}"
            assert "owned" not in code_without_strings(script)
            if name != "optax" and api.name != "keras.losses.kl_divergence":  # these take no reduction
                assert hostile in _strings(script), f"{api.name}/{part}: the reduction is not a literal"


_R_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _r_code(script: str) -> str:
    """An R script's code without its string literals and comments: what could run."""
    lines = []
    for line in script.split("\n"):
        line = _R_STRING.sub('""', line)
        lines.append(line.split("#", 1)[0])
    return "\n".join(lines)


def _r_unquote(literal: str) -> str:
    """What R reads from an r_string literal (its escapes: \\", \\\\ and \\U{hex})."""
    assert literal[0] == literal[-1] == '"'
    return re.sub(r'\\(U\{([0-9a-f]+)\}|["\\])',
                  lambda m: chr(int(m.group(2), 16)) if m.group(2) else m.group(1), literal[1:-1])


@pytest.mark.parametrize("hostile", HOSTILE)
def test_r_strings_and_comments_hold_any_text(hostile):
    from conformance.adapters.rcode import r_comment, r_string

    literal = r_string(hostile)
    held = hostile.replace("\x00", "\ufffd")  # no R string holds NUL: it becomes the replacement character
    assert _R_STRING.fullmatch(literal) and "\n" not in literal and _r_unquote(literal) == held
    assert "\n" not in r_comment(hostile) and "\r" not in r_comment(hostile)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_r_reproducer_takes_case_text_only_as_literals(hostile):
    """A case id with a line break used to end the script's title comment, so the rest of the id ran
    before library(torch); a reduction with a quote could end its string."""
    from conformance.adapters.rcode import r_string

    adapter = get_adapter("rtorch")  # not loaded: rendering starts no R
    case = make_case([[-1.0, -2.0]], [[0.5, 0.5]], reduction=hostile, case_id=hostile)
    about = (f"Reproduces kl_div case {case.id} on an API (cpu, forward).", f"message: {hostile}",
             f"params: {case.params}; dtype: {case.dtype}; layout: {case.layout}.")
    expected = Expected(result_dtype=None, error_id=hostile, error_type="ValueError")
    for api in adapter.apis:
        for part in ("forward", "grad_input", "grad2_input"):
            script, suffix = adapter.repro_script(case, api, "cpu", part, about, expected)
            assert suffix == ".R"
            # what runs first is the fixed check that torch loads (exit 125 if not), then library(torch)
            header = script.split('if (!suppressWarnings(requireNamespace("torch"')[0].strip().split("\n")
            assert all(line.startswith("#") for line in header), f"{api.name}/{part}: {header}"
            assert "owned" not in _r_code(script) and "import" not in _r_code(script)
            assert f"reduction = {r_string(hostile)}" in script
