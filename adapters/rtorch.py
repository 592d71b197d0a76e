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
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance.adapters.base import Adapter, Api, FrameworkUnavailable, check_script_names
from conformance.adapters.rcode import RCall, r_repro_script
from conformance.adapters.rsession import (RSession, RSessionCrash, RSessionTimeout, decode_numbers, decode_text,
                                           encode_numbers)
from conformance.core.case import Case
from conformance.core.defects import release_of
from conformance.core.model import UPSTREAM, Expected, Observation

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
            return Observation(unsupported=f"no such dtype in R torch {release_of(self._version)}: "
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
