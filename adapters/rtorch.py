"""R torch adapter: torch::nnf_kl_div and torch::nn_kl_div_loss on cpu and cuda, through an R process.

R torch is an R package (https://torch.mlverse.org), so nothing here imports it: the
adapter runs `rtorch_worker.R` (installed beside this file) under Rscript and talks to it
line by line (adapters/rsession.py). Quirks live here:
- R is found as KL_RSCRIPT, else `Rscript` on PATH; the torch package in R's library path,
  with KL_RTORCH_LIB (a library directory holding an R torch build) put first. Where
  either is missing, `load()` says exactly what and how to fix it, and the run is
  `not_run` with that reason. The worker never downloads anything (TORCH_INSTALL=0).
- Neither API takes log_target or size_average/reduce: the usage is
  `nnf_kl_div(input, target, reduction = "mean")` and `nn_kl_div_loss(reduction = "mean")`
  (https://torch.mlverse.org/docs/reference/nn_kl_div_loss), although the page's text
  mentions `log_target`.
- R errors come back as data: the exception type is the R condition's class (for example
  `rlang_error`, `value_error`), its message the condition message; R warnings are
  recorded as `RWarning: <message>`.
- If R dies (a segfault in libtorch), the call is an `RSessionCrash` observation with R's
  last lines and the next call starts a fresh R; a call R does not answer within
  KL_RTORCH_CALL_TIMEOUT_S (default 120 s, above the harness's per-case limit) is killed.
- Arrays cross as flat C-order hex floats with their shape, and tensors are built by
  reshape(), so R's column-major arrays and 1-based dimensions never meet the values.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

from conformance.adapters.base import Adapter, Api, FrameworkUnavailable, check_script_names, hex_floats
from conformance.adapters.rsession import (RSession, RSessionCrash, RSessionTimeout, decode_numbers, decode_text,
                                           encode_numbers)
from conformance.core.model import UPSTREAM, Case, Expected, Observation

WORKER = Path(__file__).with_name("rtorch_worker.R")


class RWarning(UserWarning):
    """A warning R torch gave (its condition message)."""


class RError(Exception):
    """An R error condition; each R condition class becomes a subclass of this name."""


class RProtocolError(Exception):
    """The R worker could not read a request (a bug of this adapter, not of R torch)."""


_R_ERROR_TYPES: dict[str, type] = {}


def r_error(condition_class: str, message: str) -> Exception:
    """An exception whose type name is the R condition's class, so the observation names it."""
    if condition_class == "protocol":
        return RProtocolError(message)
    cls = _R_ERROR_TYPES.get(condition_class)
    if cls is None:
        cls = _R_ERROR_TYPES[condition_class] = type(condition_class, (RError,), {})
    return cls(message)


@dataclass(frozen=True)
class RInputs:
    """A case's input and target as request fields: the R worker builds the tensors per call."""

    device: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class RResult:
    """A tensor R torch returned, read back exactly."""

    value: np.ndarray
    dtype: str
    shape: tuple[int, ...]


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


def find_rscript() -> str:
    """The Rscript to run: KL_RSCRIPT, else Rscript on PATH; FrameworkUnavailable says which is missing."""
    named = os.environ.get("KL_RSCRIPT")
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise FrameworkUnavailable(f"KL_RSCRIPT={named} is not an executable file; point it at R's Rscript")
        return named
    found = shutil.which("Rscript")
    if found is None:
        raise FrameworkUnavailable("R is not installed: no Rscript on PATH and KL_RSCRIPT is not set; install R "
                                   "(https://cran.r-project.org), or set KL_RSCRIPT to the Rscript executable")
    return found


def r_environment() -> dict[str, str]:
    """The environment of the R worker: KL_RTORCH_LIB first in R's library path, and no downloads."""
    env = dict(os.environ)
    library = env.get("KL_RTORCH_LIB")
    if library:
        if not os.path.isdir(library):
            raise FrameworkUnavailable(f"KL_RTORCH_LIB={library} is not a directory; point it at the R library "
                                       "that holds the torch package")
        env["R_LIBS"] = os.pathsep.join(p for p in (library, env.get("R_LIBS")) if p)
    env["TORCH_INSTALL"] = "0"  # R torch must not try to download libtorch in a conformance run
    return env


class RTorchAdapter(Adapter):
    name = "rtorch"
    apis = (
        Api("torch::nnf_kl_div", grads=("input", "target"), log_target=False),
        Api("torch::nn_kl_div_loss", grads=("input", "target"), log_target=False,
            implementation="torch::nnf_kl_div"),
    )
    known_devices = ("cpu", "cuda")
    shared_device_kinds = ("cpu", "cuda")  # libtorch takes CUDA memory as tensors need it

    def __init__(self) -> None:
        self._session: RSession | None = None
        self._version = ""
        self._dtypes: tuple[str, ...] = ()
        self._cuda_name = ""

    def load(self) -> None:
        timeout = float(os.environ.get("KL_RTORCH_CALL_TIMEOUT_S", "120"))
        # --no-init-file: a user's .Rprofile may print or attach things; their .Renviron (R_LIBS_USER) still counts
        pattern = UPSTREAM["none"]
        upstream = [repr(float(v)) for v in (pattern["base"], pattern["step"], pattern["period"], UPSTREAM["reduced"])]
        self._session = RSession([find_rscript(), "--no-init-file", str(WORKER), *upstream], r_environment(),
                                 call_timeout_s=timeout, tmp_root=self.scratch_dir)
        try:
            handshake = self._session.start()
        except (RSessionCrash, RSessionTimeout) as exc:
            raise FrameworkUnavailable(f"the R torch worker did not start: {exc}") from None
        except OSError as exc:
            raise FrameworkUnavailable(f"cannot run Rscript: {exc}") from None
        if handshake[:1] == ["unavailable"]:
            self.close()
            raise FrameworkUnavailable(decode_text(handshake[1]))
        if handshake[:1] != ["ready"] or len(handshake) != 7:
            self.close()
            raise FrameworkUnavailable(f"the R torch worker answered {handshake!r} instead of its handshake")
        _, torch_version, libtorch_version, r_version, dtypes, cuda, cuda_name = handshake
        self._version = f"{torch_version} (libtorch {libtorch_version}, R {r_version})"
        self._dtypes = tuple(dtypes.split(","))
        self._cuda_name = decode_text(cuda_name) if cuda == "1" else ""

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    def version(self) -> str:
        return self._version

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "cuda") if self._cuda_name else ("cpu",)

    def device_name(self, device: str) -> str:
        if device == "cuda":
            return self._cuda_name
        return platform.processor() or platform.machine()

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        """As Adapter.run, but a dtype this R torch does not have (bfloat16 before R torch 0.15) is
        unsupported: no R user can make such a tensor; so is a construction other than the default (see below)."""
        if not case.construction.is_default:
            return Observation(unsupported=f"construction {case.construction} is not made here: the R worker makes "
                                           "every tensor from an R numeric vector (torch_tensor(as.numeric(values), "
                                           "dtype = torch_float64()), then a cast), neither with R torch's dtype "
                                           "inference nor with torch_full")
        missing = [d for d in (case.dtype.input, case.dtype.target) if d not in self._dtypes]
        if missing:
            return Observation(unsupported=f"no such dtype in R torch {self._version.split(' ')[0]}: "
                                           f"torch_{missing[0]}() does not exist")
        return super().run(case, api, device, part)

    def build(self, case: Case, device: str) -> RInputs:
        return RInputs(device, (case.layout, case.dtype.input, case.dtype.target, _shape(case.input.shape),
                                _shape(case.target.shape), encode_numbers(case.input.reshape(-1)),
                                encode_numbers(case.target.reshape(-1))))

    def call(self, case: Case, api: Api) -> RCall:
        """The call `api` makes for `case`: what the R worker runs and what the R reproducer shows."""
        reduction = (("reduction", case.params.reduction),)
        if api.name == "torch::nnf_kl_div":
            return RCall("nnf_kl_div", kwargs=reduction)
        return RCall("nn_kl_div_loss", init=reduction)

    def invoke(self, case: Case, api: Api, inputs: RInputs) -> RResult:
        return self._call(self.call(case, api), inputs, "forward")

    def gradient(self, case: Case, api: Api, device: str, part: str) -> RResult | None:
        """R torch's autograd_grad, with the upstream gradient of the spec, in the R worker."""
        return self._call(self.call(case, api), self.build(case, device), part)

    def to_numpy(self, result: RResult):
        if not isinstance(result, RResult):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        return result.value, result.dtype, result.shape

    def _call(self, call: RCall, inputs: RInputs, part: str) -> RResult | None:
        reply = self._session.call(["call", *call.fields(), inputs.device, part, *inputs.fields])
        kind = reply[0]
        for text in reply[-1].split(",") if reply[-1] != "-" else ():
            warnings.warn(decode_text(text), RWarning, stacklevel=3)
        if kind == "ok":
            _, dtype, shape, values, _ = reply
            shape = tuple(int(n) for n in shape.split(",")) if shape != "-" else ()
            return RResult(np.array(decode_numbers(values), dtype=np.float64).reshape(shape), dtype, shape)
        if kind == "none":
            return None
        if kind == "err":  # libtorch's C++ backtrace after its message says nothing about kl_div
            raise r_error(decode_text(reply[1]), decode_text(reply[2]).split("\nException raised from ")[0])
        raise RProtocolError(f"unexpected reply {reply[:3]!r}")

    def repro_script(self, case: Case, api: Api, device: str, part: str, about: tuple[str, ...],
                     expected: Expected, recorded: str = "a value") -> tuple[str, str]:
        """An R script: needs only R and the torch package; prints R torch's result beside the spec's."""
        check_script_names(case, device, part, self.known_devices)
        return r_repro_script(case, self.call(case, api), device, part, about, expected, recorded), ".R"


def _shape(shape: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in shape) or "-"


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
