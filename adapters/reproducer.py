"""The text of a Python reproducer around an adapter's `repro_source` lines: the whole script that exits as
`git bisect run` reads it, the short snippet for an issue draft, and the checks and quoting that keep text
from outside a literal (a case file's names refused unless known, comments and docstrings that stay one).

Writes text only: it never runs a framework or the script it writes, and knows no tolerance beyond the bound
the spec's expected value carries.
"""

from __future__ import annotations

import re

import numpy as np

from conformance.core.case import LAYOUTS, Case
from conformance.core.model import FLOAT_DTYPES, PARTS, UPSTREAM, Expected
from conformance.core.rounding import INTEGER_DTYPES


def check_script_names(case: Case, device: str, part: str, known_devices: tuple[str, ...]) -> None:
    """Refuse names a reproducer writes as code (a dtype as `torch.float32`, a device as `mx.cpu`, a part as a
    variable) unless each is one the harness knows: a case file or a run directory cannot put code there."""
    names = {"dtype": (case.dtype.input, FLOAT_DTYPES + INTEGER_DTYPES), "target dtype": (case.dtype.target,
             FLOAT_DTYPES + INTEGER_DTYPES), "layout": (case.layout, LAYOUTS), "part": (part, PARTS),
             "device": (device, script_devices(known_devices))}
    for what, (name, known) in names.items():
        if type(name) is not str or name not in known:
            raise ValueError(f"unknown {what} {name!r} for a reproducer (one of {list(known)})")


def script_devices(known_devices: tuple[str, ...]) -> tuple[str, ...]:
    """The device names a reproducer may be asked for: the adapter's, and the bare kind of a qualified one
    (Keras' "tensorflow:cpu" is also "cpu", the CLI's default, which the adapter resolves itself)."""
    return tuple(dict.fromkeys([*known_devices, *(d.rpartition(":")[2] for d in known_devices if ":" in d)]))


def python_comment(text: str) -> str:
    """`text` as the body of one Python comment line: everything outside printable ASCII escaped, so no line
    break in it ends the comment."""
    return ascii(str(text))[1:-1]


# the reproducer's checks, which a snippet leaves out: the MissingGradient class (its docstring whatever the
# framework's words), the test of a gradient that did not come back, and the result's dtype
_SCAFFOLDING = re.compile(r"^(class MissingGradient\b|\s+\"\"\"[^\"]*gave no gradient|\s*if grad\w* is None:|"
                          r"\s*raise MissingGradient\b|result_dtype = )")


def python_snippet(source: str, case: Case, part: str, expected: Expected) -> str:
    """`source` (repro_source's lines) as a snippet of a few lines: NumPy arrays written as decimal literals
    (every value is exact in float64), the upstream gradient where a gradient part needs it, and the result
    printed beside what the spec expects; the reproducer's checks (a missing gradient, the dtype) are left out."""
    def literal(values: np.ndarray) -> str:
        return f"np.array({np.asarray(values, dtype=np.float64).tolist()!r})"
    lines = ["import numpy as np", "nan, inf = float('nan'), float('inf')",
             f"x_values = {literal(case.input)}", f"t_values = {literal(case.target)}"]
    if part != "forward":
        lines.append("upstream = lambda s: np.asarray(1.25) if s == () else "
                     "(0.75 + 0.125 * (np.arange(int(np.prod(s))) % 5)).reshape(s)  # spec: gradients.upstream")
    lines += [line for line in source.split("\n") if line.strip() and not _SCAFFOLDING.match(line)]
    if expected.error_id:
        lines.append(f"print(result)  # the spec expects {expected.error_type} (errors.{python_comment(expected.error_id)})")
    else:
        shown = np.asarray(expected.value, dtype=np.float64).tolist()
        lines.append(f"print(result)  # the spec expects {python_comment(repr(shown))[:300]}")
    return "\n".join(lines) + "\n"


def python_repro_script(framework: str, source: str, case: Case, about: tuple[str, ...], expected: Expected,
                        recorded: str = "a value") -> str:
    """A Python reproducer: the case's exact values (hex floats), the adapter's `source` lines, and the
    result printed beside the spec's expected value, each in decimal and exact hex. It judges the result
    itself with NumPy, by the spec's element rule (compare.py `_judge_values`), and exits as `git bisect run`
    reads it: 1 while the run's finding (`recorded`: "a value", "a value of another dtype" or
    "raises <type>") reproduces, 0 once the call conforms, 125 (skip) when it cannot tell. Needs only
    the framework and NumPy; every text from outside is a literal."""
    if expected.error_id:
        expectation = [f"EXPECTED_ERROR, ERROR_MATCH = {expected.error_type!r}, {expected.error_match or ''!r}"
                       f"  # spec: errors.{python_comment(expected.error_id)}",
                       "expected = f'raises {EXPECTED_ERROR}'"]
    else:
        bound = expected.bound if expected.bound is not None else np.zeros(np.shape(expected.value))
        expectation = ["EXPECTED_ERROR, ERROR_MATCH = None, ''",
                       f"DTYPE = {expected.result_dtype!r}",
                       f"expected = values({hex_floats(expected.value)}, {tuple(expected.shape)})",
                       f"bound = values({hex_floats(bound)}, {tuple(expected.shape)})"]
    title, *rest = about
    pattern = UPSTREAM["none"]
    return "\n".join([
        python_docstring("\n".join([title, "", *rest[:-1], f"{rest[-1]} Needs only {framework} and numpy.", "",
                              "Exits 1 while the run's finding reproduces, 0 once the result conforms to the spec,",
                              "125 (git bisect's skip) when it cannot tell: the framework or NumPy fails to",
                              "import, or the call fails otherwise than the run recorded."])),
        "import re",
        "import sys",
        "",
        "try:",
        "    import numpy as np",
        "except ImportError as exc:",
        "    print('cannot tell:', exc)",
        "    sys.exit(125)",
        "",
        "np.set_printoptions(precision=17)  # every digit: some divergences are in the last ones",
        "",
        "",
        "def values(hexes, shape):",
        "    return np.array([float.fromhex(h) for h in hexes], dtype=np.float64).reshape(shape)",
        "",
        "",
        "def shown(a):  # decimal, then the exact hex floats",
        "    return f'{a!r} hex {[float(v).hex() for v in np.ravel(a)]}'",
        "",
        "",
        "def upstream(shape):  # the gradient flowing into the loss (spec: gradients.upstream)",
        "    if shape == ():",
        f"        return np.asarray({UPSTREAM['reduced']!r})",
        f"    return ({pattern['base']!r} + {pattern['step']!r} * (np.arange(int(np.prod(shape))) % "
        f"{pattern['period']!r})).reshape(shape)",
        "",
        "",
        "def conforms(got, dtype):  # spec: tolerance.comparison: NaN/inf pattern exact, then within the bound",
        "    if dtype not in (None, DTYPE) or got.shape != expected.shape:",
        "        return False",
        "    with np.errstate(invalid='ignore'):",
        "        nonfinite = (np.isnan(got) != np.isnan(expected)) | ((np.isinf(got) | np.isinf(expected))"
        " & (got != expected))",
        "        finite = np.isfinite(expected)",
        "        return not nonfinite.any() and bool((np.abs(got - expected)[finite] <= bound[finite]).all())",
        "",
        "",
        "def exit_code():  # 0: conforms; 1: the run's finding reproduces; 125: cannot tell",
        "    if raised is not None:",
        "        if raised == EXPECTED_ERROR and re.search(ERROR_MATCH, message):",
        "            return 0",
        "        return 1 if RECORDED == 'raises ' + raised else 125",
        "    if result_dtype is None and RECORDED == 'a value of another dtype':",
        "        return 125  # the script does not see this framework's dtype",
        "    if EXPECTED_ERROR is None and conforms(np.asarray(result, dtype=np.float64), result_dtype):",
        "        return 0",
        "    return 125 if RECORDED.startswith('raises ') else 1",
        "",
        "",
        f"RECORDED = {recorded!r}  # what the run's call gave",
        *expectation,
        f"x_values = values({hex_floats(case.input)}, {tuple(case.input.shape)})",
        f"t_values = values({hex_floats(case.target)}, {tuple(case.target.shape)})",
        "result_dtype = raised = None",
        "try:",
        "\n".join("    " + line if line else "" for line in source.splitlines()),
        "except Exception as exc:  # the framework's exception (its failing import too) is the result",
        "    raised, message = type(exc).__name__, str(exc)",
        "    result = f'raises {raised}: {exc}'.splitlines()[0]",
        "try:",
        f"    print({framework + ': '!r}, result if raised else shown(result), result_dtype or '')",
        "    print('expected:', expected if EXPECTED_ERROR else shown(expected), '' if EXPECTED_ERROR else DTYPE)",
        "    code = exit_code()",
        "except Exception as exc:  # a result this script cannot read",
        "    print('cannot tell:', type(exc).__name__, exc)",
        "    code = 125",
        "print({0: 'conforms to the spec', 1: 'reproduces: ' + RECORDED, 125: 'cannot tell'}[code], f'(exit {code})')",
        "sys.exit(code)",
        "",
    ])


def python_docstring(text: str) -> str:
    """`text` as a module docstring: triple-quoted where that reads it back unchanged, else its repr, so
    a case id or reduction from a case file (quotes, backslashes) stays inside the string."""
    plain = all(line.isprintable() for line in text.split("\n"))
    if plain and '"""' not in text and "\\" not in text and not text.endswith('"'):
        return f'"""{text}\n"""'
    return repr(text)


def hex_floats(array) -> list[str]:
    """The values of `array` as exact hex floats (float64, C order)."""
    return [float(v).hex() for v in np.asarray(array, dtype=np.float64).reshape(-1)]
