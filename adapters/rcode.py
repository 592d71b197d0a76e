"""The R code the R torch adapter writes: a call as an R user writes it, R literals and comments, and the reproducer.

Everything that turns a case's values or a run's text into R source is here, so that one place keeps text from
outside (a reduction from a case file, a case id) inside R string literals and comments, never code. Imports no
framework and starts no R: the adapter (adapters/rtorch.py) sends the calls, and a reproducer is run by R alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np

from conformance.adapters.base import hex_floats
from conformance.core.case import Case
from conformance.core.model import UPSTREAM, Expected


_R_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class RCall:
    """One call of an R torch API, stated once: the R worker makes it (the function found in R torch's
    namespace, through do.call) and the reproducer prints it, so a reproducer makes the call the run made.

    `function` is called on (x, t) with `kwargs`; a module-style API (nn_kl_div_loss) is first built with
    `init` and then called on (x, t). Every value is a string, which crosses to R percent-encoded and
    enters a reproducer only as an R string literal (r_string), never as code.
    """

    function: str
    kwargs: tuple[tuple[str, str], ...] = ()
    init: tuple[tuple[str, str], ...] | None = None

    def __post_init__(self) -> None:
        names = [self.function, *(k for k, _ in self.kwargs), *(k for k, _ in self.init or ())]
        if not all(_R_NAME.match(name) for name in names) or \
                not all(type(v) is str for _, v in (*self.kwargs, *(self.init or ()))):
            raise ValueError(f"not a plain R call: {self!r}")

    def fields(self) -> list[str]:
        """The call as request fields: the function, its style, and its arguments (name=value, each
        percent-encoded, "-" for none)."""
        pairs = self.kwargs if self.init is None else self.init
        arguments = ",".join(f"{_encode(name)}={_encode(value)}" for name, value in pairs) or "-"
        return [self.function, "function" if self.init is None else "module", arguments]

    def source(self) -> str:
        """The call as R source on variables named x and t, each value as an R string literal."""
        def arguments(pairs):
            return [f"{name} = {r_string(value)}" for name, value in pairs]
        if self.init is None:
            return f"{self.function}({', '.join(['x', 't', *arguments(self.kwargs)])})"
        return f"{self.function}({', '.join(arguments(self.init))})(x, t)"


def _encode(text: str) -> str:
    """Percent-encoding of one argument's name or value; "-" too, so no value reads as the empty field."""
    return quote(text, safe="").replace("-", "%2D")


def r_string(text: str) -> str:
    """`text` as an R string literal: a quote, a backslash or any character that is not printable ASCII is
    escaped, so the literal cannot end early or span lines whatever the text (a reduction from a case file).

    Is equivalent to ``'"' + text + '"'`` for plain text: ``r_string("mean") == '"mean"'``. NUL and lone
    surrogates, which no R string holds, become U+FFFD, so the script still parses.
    """
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        elif ch == "\0" or "\ud800" <= ch <= "\udfff":  # R strings cannot hold NUL or a lone surrogate
            out.append("\\U{fffd}")
        else:
            out.append(f"\\U{{{ord(ch):x}}}")
    return '"' + "".join(out) + '"'


def r_comment(text: str) -> str:
    """`text` as the body of one R comment line: every character outside printable ASCII escaped, so no
    line break (or anything R might read as one) in a case id ends the comment."""
    return "".join(ch if " " <= ch <= "~" else f"\\U{{{ord(ch):x}}}" for ch in text)


def _r_strings(values) -> str:
    hexes = hex_floats(values)
    quoted = ", ".join('"' + h + '"' for h in hexes)
    return f"c({quoted})" if hexes else "character(0)"


def _r_shape(shape: tuple[int, ...]) -> str:
    return f"c({', '.join(f'{n}L' for n in shape)})" if shape else "integer(0)"


def r_repro_script(case: Case, call: RCall, device: str, part: str, about: tuple[str, ...],
                   expected: Expected, recorded: str = "a value") -> str:
    """The R reproducer: the exact values (hex floats), the run's call as an R user writes it, and for a
    gradient part R torch's autograd_grad with the spec's upstream gradient. It judges the result as the
    Python reproducers do (adapters/reproducer.py: python_repro_script) and exits as `git bisect run` reads it."""
    buffer = {"contiguous": "", "transposed": "$transpose(-1, -2)$contiguous()",
              "strided": "$repeat_interleave(2L, dim = -1L)"}[case.layout]
    view = {"contiguous": "", "transposed": "$transpose(-1, -2)", "strided": "[.., 1:N:2]"}[case.layout]

    def tensor(name: str, dtype: str, grad: bool) -> list[str]:
        lines = [f"  {name} <- torch_tensor(as.numeric({name}_values), dtype = torch_float64())$reshape({name}_shape)"
                 f"{buffer}$to(device = {r_string(device)}, dtype = torch_{dtype}())"]
        if grad:
            lines.append(f"  {name}$requires_grad_(TRUE)")
        if view:
            lines.append(f"  {name} <- {name}{view}")
        return lines
    body = [*tensor("x", case.dtype.input, part in ("grad_input", "grad2_input")),
            *tensor("t", case.dtype.target, part in ("grad_target", "grad2_input")),
            f"  out <- {call.source()}"]
    if part == "forward":
        body.append("  out")
    else:
        wrt = "t" if part == "grad_target" else "x"
        second = part == "grad2_input"
        body.append(f"  grad <- autograd_grad(out, list({wrt}), grad_outputs = list(upstream(out))"
                    f"{', create_graph = TRUE' if second else ''})[[1]]")
        if second:
            body.append("  grad <- autograd_grad((grad * upstream(grad))$sum(), list(t))[[1]]")
        body.append("  grad")
    if expected.error_id:
        expectation = [f"EXPECTED_ERROR <- {r_string(str(expected.error_type))}"
                       f"  # spec: errors.{r_comment(expected.error_id)}",
                       f"ERROR_MATCH <- {r_string(expected.error_match or '')}",
                       f'expected <- {r_string(f"raises {expected.error_type} ({expected.error_id})")}']
    else:
        bound = expected.bound if expected.bound is not None else np.zeros(np.shape(expected.value))
        expectation = ["EXPECTED_ERROR <- NULL",
                       f"DTYPE <- {r_string(str(expected.result_dtype))}",
                       f"expected_values <- as.numeric({_r_strings(expected.value)})",
                       f"expected_shape <- {_r_shape(tuple(expected.shape))}",
                       f"bound <- as.numeric({_r_strings(bound)})",
                       "expected <- shown_values(expected_values, expected_shape, DTYPE)"]
    title, *rest = about
    pattern = UPSTREAM["none"]
    return "\n".join([
        f"# {r_comment(title)}",
        "#",
        *(f"# {r_comment(line)}" for line in rest[:-1]), f"# {r_comment(rest[-1])} Needs only R and the torch package.",
        "# Run: Rscript this_file.R. Exits 1 while the run's finding reproduces, 0 once the result conforms to the",
        "# spec, 125 (git bisect's skip) when it cannot tell: torch does not load, or the call fails otherwise.",
        "if (!suppressWarnings(requireNamespace(\"torch\", quietly = TRUE))) {",
        "  cat(\"cannot tell: the torch package does not load\\n\")",
        "  quit(status = 125)",
        "}",
        "library(torch)",
        "options(error = function() quit(status = 125, save = \"no\"))  # this script's own failure: cannot tell",
        "",
        "# every digit, flat in C (row-major) order: some divergences are in the last digits",
        "shown_values <- function(v, shape, dtype) {",
        '  paste0("[", paste(sprintf("%.17g", v), collapse = ", "), "] shape (", paste(shape, collapse = ", "),',
        '         ") ", dtype)',
        "}",
        "values_of <- function(tensor) {",
        "  as.numeric(as_array(tensor$detach()$to(device = \"cpu\", dtype = torch_float64())$reshape(-1)))",
        "}",
        "dtype_of <- function(tensor) {",
        "  dtypes <- c(Half = \"float16\", BFloat16 = \"bfloat16\", Float = \"float32\", Double = \"float64\")",
        "  dtype <- as.character(tensor$dtype)",
        "  if (dtype %in% names(dtypes)) dtypes[[dtype]] else dtype",
        "}",
        "shown <- function(tensor) shown_values(values_of(tensor), tensor$shape, dtype_of(tensor))",
        "# spec: tolerance.comparison: the NaN/inf pattern exact, then |got - expected| <= bound",
        "conforms <- function(got, shape, dtype) {",
        "  if (!identical(dtype, DTYPE) || !identical(as.integer(shape), as.integer(expected_shape))) return(FALSE)",
        "  want <- expected_values",
        "  unequal <- is.na(got != want) | got != want",
        "  pattern <- (is.nan(got) != is.nan(want)) | ((is.infinite(got) | is.infinite(want)) & unequal)",
        "  finite <- is.finite(want)",
        "  !any(pattern) && all(abs(got[finite] - want[finite]) <= bound[finite])",
        "}",
        "# the gradient flowing into the loss (spec: gradients.upstream), in C order",
        "upstream <- function(like) {",
        "  n <- prod(like$shape)",
        f"  values <- if (length(like$shape) == 0) {UPSTREAM['reduced']!r} else "
        f"{pattern['base']!r} + {pattern['step']!r} * ((seq_len(n) - 1) %% {pattern['period']!r})",
        "  torch_tensor(values, dtype = torch_float64())$reshape(like$shape)$to(device = like$device, dtype = like$dtype)",
        "}",
        "",
        f"x_values <- {_r_strings(case.input)}  # hex floats: exact",
        f"x_shape <- {_r_shape(tuple(case.input.shape))}",
        f"t_values <- {_r_strings(case.target)}",
        f"t_shape <- {_r_shape(tuple(case.target.shape))}",
        f"RECORDED <- {r_string(recorded)}  # what the run's call gave",
        *expectation,
        "result <- tryCatch({",
        *body,
        "}, error = function(e) e)",
        "if (inherits(result, \"error\")) {",
        "  raised <- class(result)[1]",
        "  message <- conditionMessage(result)",
        "  cat(\"rtorch:  \", paste0(\"raises \", raised, \": \", strsplit(message, \"\\n\")[[1]][1]), \"\\n\")",
        "  code <- if (identical(raised, EXPECTED_ERROR) && grepl(ERROR_MATCH, message, perl = TRUE)) 0 else",
        "    if (identical(RECORDED, paste0(\"raises \", raised))) 1 else 125",
        "} else {",
        "  cat(\"rtorch:  \", shown(result), \"\\n\")",
        "  cat(\"hex:     \", sprintf(\"%a\", values_of(result)), \"\\n\")",
        "  code <- if (is.null(EXPECTED_ERROR) && conforms(values_of(result), result$shape, dtype_of(result))) 0 else",
        "    if (startsWith(RECORDED, \"raises \")) 125 else 1",
        "}",
        'cat("expected:", expected, "\\n")',
        "if (is.null(EXPECTED_ERROR)) cat(\"hex:     \", sprintf(\"%a\", expected_values), \"\\n\")",
        "cat(c(\"conforms to the spec\", paste(\"reproduces:\", RECORDED), \"cannot tell\")"
        "[match(code, c(0, 1, 125))],",
        "    \"(exit\", paste0(code, \")\\n\"))",
        "quit(status = code)",
        "",
    ])
