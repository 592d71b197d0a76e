"""PaddlePaddle adapter: paddle.nn.functional.kl_div and paddle.nn.KLDivLoss on cpu and gpu.

Quirks live here:
- Paddle states the loss in the canonical form (input log q, label p or log p, `reduction`,
  `log_target`), with no size_average/reduce arguments
  (https://paddlepaddle.org.cn/documentation/docs/en/api/paddle/nn/functional/kl_div_en.html).
- The device is Paddle's own word: `cpu`, or `gpu` (place 'gpu:0') on a CUDA build with a GPU.
- The kernel is registered for float32 and float64 only; float16 and bfloat16 raise
  "The kernel with key (CPU, ..., float16) of kernel `kldiv_loss` is not registered", which
  is no kernel for this device. An integer dtype raises the same error, but that is a refusal
  the spec rules on (errors.integral_dtype), so it stays an exception.
- Paddle 3 has stride kernels: `transpose` and `[..., ::2]` are real non-contiguous views.
- Every tensor starts with stop_gradient=True; the ones differentiated get False. The kernel
  has no gradient with respect to label and no double backward: both are observed as the
  framework gives them (None, and a RuntimeError), never skipped.
- `import paddle` warns "No ccache found" (a UserWarning on stderr, nothing on stdout);
  `load()` silences that one warning. Every failed double backward also logs a glog warning
  ("While running Node (KldivLossGradNode) raises an EnforceNotMet exception") beside the
  exception it raises; `load()` sets GLOG_minloglevel=2 (errors only) unless the user set it.

Modes beside eager (`paddle.jit.to_static`), each call's program compiled once per (mode, call, dtypes, shapes)
and reused; the gradients are what Paddle's autograd gives through the program:
- `to-static`: `full_graph=True` (the AST translation to a static program) with an `InputSpec` of the case's
  shapes. It cannot run the function eagerly on a failed translation: it raises. Its one eager path is
  `paddle.jit.enable_to_static(False)`, which makes every to_static function eager; a call made while it is
  off is a ModeFallback.
- `to-static-dynamic-batch`: the same with the first dimension None in the `InputSpec`, so the program does
  not know the batch size (a 1-d input's one dimension is its batch, as `batchmean` reads it; a 0-d input has
  none, so its program is to-static's).
- `to-static-prim`: to-static with Paddle's primitive decomposition on (`FLAGS_prim_all`, the decomposition CINN
  uses), switched on at run time by `core._set_prim_all_enabled` around this mode's calls only (the worker
  runs every mode) and restored after.
- `to-static-sot`: the default `full_graph=False` path (SOT, bytecode translation; it ignores `input_spec`).
  SOT runs a captured graph of fewer than MIN_GRAPH_SIZE (10) operators eagerly, and kl_div's graph is smaller,
  so by default SOT runs kl_div eagerly: the mode lowers the threshold to 0 around its calls so the graph is
  compiled, and a call whose translated code is still the original (a graph break, a fallback) is a
  ModeFallback. Each key gets a code object of its own, so SOT sees one shape per function and the run does not
  depend on the order of its cases. Against eager it returns a target gradient (zeros) where eager returns none.
  Not modelled: once one SOT function has seen a second batch size, SOT makes that dimension symbolic and
  `batchmean` divides by -1, as in to-static-dynamic-batch (default settings, kl_div inside a larger graph).
"""

from __future__ import annotations

import os
import platform
import re
import warnings
from contextlib import nullcontext

import numpy as np

from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, ModeFallback, construction_source,
                                       fill_value, layout_buffer, numpy_source)
from conformance.adapters.observation import missing_gradient
from conformance.adapters.paddlestatic import (DYNAMIC_BATCH, MODES, PRIM, SOT, check_compiled, compile_program,
                                               mode_switches, spec_shape)
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

PLACES = {"cpu": "cpu", "gpu": "gpu:0"}
# "(NotFound) The kernel with key (CPU, Undefined(AnyLayout), float16) of kernel `kldiv_loss` is not registered."
NO_KERNEL = re.compile(r"The kernel with key \(\w+, .*\b(float16|bfloat16)\) of kernel `\w+` is not registered")
class PaddleAdapter(Adapter):
    name = "paddle"
    apis = (
        Api("paddle.nn.functional.kl_div", grads=("input", "target")),
        Api("paddle.nn.KLDivLoss", grads=("input", "target"), implementation="paddle.nn.functional.kl_div"),
    )
    known_devices = tuple(PLACES)
    modes = MODES
    # SOT runs a captured graph with fewer operators than this eagerly; 0 compiles every graph (a test raises it
    # back to Paddle's default to force the fallback)
    sot_min_graph_size = 0

    def __init__(self) -> None:
        self.paddle = None
        self._device: str | None = None
        self._compiled: dict = {}

    def load(self) -> None:
        os.environ.setdefault("GLOG_minloglevel", "2")  # read when Paddle's library loads
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="No ccache found")
                import paddle
        except Exception as exc:
            raise FrameworkUnavailable(f"cannot import paddle: {type(exc).__name__}: {exc}") from None
        self.paddle = paddle

    def version(self) -> str:
        return self.paddle.__version__

    def mode_unavailable(self, mode: str) -> str | None:
        """The to_static modes are built on Paddle 3's translation: Paddle 2's AST translation cannot resolve
        the wrapper's closure (NameError), and its SOT has another interface."""
        major = re.match(r"\d+", self.version())
        if mode != EAGER and major is not None and int(major.group()) < 3:
            return (f"paddle {self.version()}: the adapter's to_static modes need Paddle 3 (Paddle 2's translation "
                    "cannot resolve the call's wrapper)")
        return None

    def devices(self) -> tuple[str, ...]:
        device = self.paddle.device
        if device.is_compiled_with_cuda() and device.cuda.device_count() > 0:
            return ("cpu", "gpu")
        return ("cpu",)

    def device_name(self, device: str) -> str:
        if device == "gpu":
            return self.paddle.device.cuda.get_device_name(0)
        return platform.processor() or platform.machine()

    def build(self, case: Case, device: str):
        self._use_device(device)
        return tuple(self._tensor(values, dtype, case.layout, device, made=case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def _use_device(self, device: str) -> None:
        """Paddle's global device, set besides each tensor's place, for anything Paddle creates on its own."""
        if device != self._device:
            self.paddle.set_device(PLACES[device])
            self._device = device

    def _tensor(self, values: np.ndarray, dtype: str, layout: str, device: str, differentiated: bool = False,
                made: Construction = NUMPY_DEFAULT):
        """The tensor as the case's construction makes it: paddle.to_tensor of a NumPy array or of nested Python
        floats, or paddle.full (on the global device, which `_use_device` set); the dtype named, or left to Paddle
        (its default dtype, or the NumPy array's)."""
        buffer, view = layout_buffer(values, layout, swap=_swap_last_two)
        given = None if made.inferred else dtype
        if made.source == "factory":
            leaf = self.paddle.full(buffer.shape, fill_value(buffer), dtype=given)
            leaf.stop_gradient = not differentiated
        else:
            data = (buffer.tolist() if made.source == "list" else numpy_source(buffer, dtype) if made.inferred
                    else buffer)
            leaf = self.paddle.to_tensor(data, dtype=given, place=PLACES[device], stop_gradient=not differentiated)
        return view(leaf)

    def call(self, case: Case, api: Api) -> ApiCall:
        p = case.params
        if api.name == "paddle.nn.functional.kl_div":
            return ApiCall.function(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)
        return ApiCall.module(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        """Eager: the call as stated. A static mode: the call's program for these dtypes and shapes (compiled on
        the first call with this key, reused after), run under the mode's switches."""
        if mode == EAGER:
            return super().invoke(case, api, inputs)
        x, t = inputs
        program, code = self._program(case, api, x, t, mode)
        try:
            with mode_switches(self.paddle, mode, self.sot_min_graph_size):
                out = program(x, t)
        except ModeFallback:
            raise
        except Exception:
            check_compiled(code, self.sot_min_graph_size, raised=True)  # an eager call's exception is a fallback's too
            raise
        check_compiled(code, self.sot_min_graph_size)
        return out

    def _program(self, case: Case, api: Api, x, t, mode: str):
        """The to_static function of `mode` and the call for the dtypes and shapes of (x, t), and the code object
        SOT translates (None in the full-graph modes)."""
        call = self.call(case, api)
        key = (mode, call, str(x.place), str(x.dtype), tuple(x.shape), str(t.dtype), tuple(t.shape))
        if key not in self._compiled:
            self._compiled[key] = compile_program(self.paddle, call, x, t, mode, len(self._compiled))
        return self._compiled[key]

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        """paddle.grad with the upstream gradient as grad_outputs; double backward with create_graph=True. A
        static mode's forward is its program; its switches stay on through the backward."""
        with mode_switches(self.paddle, mode, self.sot_min_graph_size) if mode != EAGER else nullcontext():
            return self._gradient(case, api, device, part, mode)

    def _gradient(self, case: Case, api: Api, device: str, part: str, mode: str):
        paddle = self.paddle
        self._use_device(device)
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, part != "grad_target", case.construction)
        t = self._tensor(case.target, case.dtype.target, case.layout, device, part != "grad_input", case.construction)
        out = self.invoke(case, api, (x, t), mode)
        upstream = paddle.to_tensor(upstream_gradient(tuple(out.shape)), dtype=out.dtype, place=PLACES[device])
        (grad,) = paddle.grad([out], [t if part == "grad_target" else x], grad_outputs=[upstream],
                              allow_unused=True, create_graph=second)
        if not second or grad is None:
            return grad
        w = paddle.to_tensor(upstream_gradient(tuple(grad.shape)), dtype=grad.dtype, place=PLACES[device])
        (grad2,) = paddle.grad([(grad * w).sum()], [t], allow_unused=True)
        return grad2

    def describe_exception(self, exc: Exception, mode: str = EAGER) -> str:
        """A to_static error comes as "In transformed code:" and a traceback through the files of this machine
        (the harness's, Paddle's), then Paddle's message after the exception's type name: that message, every line
        of it (an enforce error's second line is its hint), as eager gives it. SOT wraps an error of the call in
        its InnerError, "In simulate execution:", with the origin exception's traceback: its own message, then the
        origin's type and message, without the traceback."""
        text = str(exc)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if text.startswith("In transformed code:"):
            return _message_from(lines, re.compile(rf"{re.escape(type(exc).__name__)}: ")) or lines[-1] if lines else text
        if text.startswith("In simulate execution:"):
            own = _message_from(lines, re.compile(rf"(\w+\.)*{re.escape(type(exc).__name__)}: "), last=False)
            origin = _message_from(lines, _ERROR_LINE, keep_name=True)
            if own and origin:
                # SOT names the layer's object by a counter of the process ("object_29087"): the next run's differs
                return _SOT_OBJECT.sub("object", f"{own.splitlines()[0]}; origin: {origin}")
        return text

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        return NO_KERNEL.search(str(exc)) is not None

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        place = PLACES[device]

        def tensor(name, values, dtype, differentiated):
            ndim = np.ndim(values)
            view = {"contiguous": "", "strided": "[..., ::2]",
                    "transposed": f".transpose({list(range(ndim - 2)) + [ndim - 1, ndim - 2]})"}[case.layout]
            source = construction_source(name, values, case, dtype)
            given = "" if case.construction.inferred else f", dtype={dtype!r}"
            if case.construction.source == "factory":  # paddle.full makes it on the device set above
                return (f"paddle.full({source}{given})"
                        + ("" if not differentiated else f"\n{name[0]}.stop_gradient = False"))
            return f"paddle.to_tensor({source}{given}, place={place!r}, stop_gradient={not differentiated}){view}"
        lines = ["import paddle  # warns 'No ccache found' on stderr", ""]
        if part != "forward":
            # one line, so that an issue's snippet, which leaves this check out, leaves out all of it
            lines += ["", "class MissingGradient(Exception): \"\"\"paddle.grad gave no gradient (None).\"\"\"", ""]
        lines += [f"paddle.set_device({place!r})",
                  f"x = {tensor('x_values', case.input, case.dtype.input, part != 'grad_target')}",
                  f"t = {tensor('t_values', case.target, case.dtype.target, part != 'grad_input')}"]
        if mode == EAGER:
            lines.append(f"out = {self.call(case, api).source()}")
        else:
            lines += self._mode_source(case, api, mode)
        if part == "forward":
            lines.append("result_dtype = str(out.dtype).removeprefix('paddle.')  # as the run records it")
            lines.append(f"result = {_host_source('out')}")
        else:
            wrt = "t" if part == "grad_target" else "x"
            second = part == "grad2_input"
            lines.append(f"g = paddle.to_tensor(upstream(tuple(out.shape)), dtype=out.dtype, place={place!r})")
            lines.append(f"(grad,) = paddle.grad([out], [{wrt}], grad_outputs=[g], allow_unused=True, create_graph={second})")
            if second:
                lines.append(f"w = paddle.to_tensor(upstream(tuple(grad.shape)), dtype=grad.dtype, place={place!r})")
                lines.append("(grad,) = paddle.grad([(grad * w).sum()], [t], allow_unused=True)")
            missing = f"raise MissingGradient({missing_gradient(api.name, part)!r})"
            lines += ["if grad is None:  # the harness records this as MissingGradient", "    " + missing,
                      "result_dtype = str(grad.dtype).removeprefix('paddle.')  # as the run records it",
                      f"result = None if grad is None else {_host_source('grad')}  # a snippet prints the None"]
        return "\n".join(lines)

    def _mode_source(self, case: Case, api: Api, mode: str) -> list[str]:
        """The call wrapped as the mode wraps it: the to_static function (its InputSpec, the prim switch, SOT's
        graph size threshold), called on x and t into `out`."""
        call = self.call(case, api)
        kwargs = ", ".join(f"{name}={value!r}" for name, value in call.kwargs)
        lines = []
        if call.init is not None:
            lines.append(f"loss = {call.source().rpartition('(x, t)')[0]}  # built once, outside the program")
            body = "loss(x, t)"
        else:
            body = f"{call.path}(x, t{', ' if kwargs else ''}{kwargs})"
        lines += ["", "", "def kl_div(x, t):", f"    return {body}", ""]
        if mode == SOT:
            lines += ["", "from paddle.jit.sot.utils.envs import min_graph_size_guard",
                      "kl_div = paddle.jit.to_static(kl_div)  # full_graph=False: SOT",
                      f"with min_graph_size_guard({self.sot_min_graph_size!r}):  # compile kl_div's small graph too",
                      "    out = kl_div(x, t)"]
            return lines
        specs = ", ".join(f"InputSpec({spec_shape(np.shape(v), mode == DYNAMIC_BATCH)!r}, {d!r}, {n!r})"
                          for v, d, n in ((case.input, case.dtype.input, "x"), (case.target, case.dtype.target, "t")))
        lines += ["", "from paddle.static import InputSpec",
                  f"kl_div = paddle.jit.to_static(kl_div, input_spec=[{specs}], full_graph=True)"]
        if mode == PRIM:
            lines.append("paddle.framework.core._set_prim_all_enabled(True)  # FLAGS_prim_all: the decomposition")
        lines.append("out = kl_div(x, t)")
        return lines

    def to_numpy(self, result):
        if not isinstance(result, self.paddle.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).removeprefix("paddle.")
        host = result.detach().cpu()
        if dtype == "bfloat16":  # .numpy() gives its raw bits as uint16; float32 holds every bfloat16
            host = host.astype("float32")
        return host.numpy().astype(np.float64), dtype, tuple(result.shape)


# a line that opens an exception's message in a traceback: "ValueError: (InvalidArgument) ..."
_SOT_OBJECT = re.compile(r"\bobject_\d+\b")  # SOT's name for a traced object, numbered per process
_ERROR_LINE = re.compile(r"[A-Za-z_]\w*(Error|Exception): ")


def _message_from(lines: list[str], opens: re.Pattern, last: bool = True, keep_name: bool = False) -> str | None:
    """The message of a traceback's text (stripped lines) that opens on the last (or first) line `opens` matches:
    that line without the exception's name (kept with `keep_name`), then the lines after it, indented as Paddle
    indents an enforce error's hint; None where no line matches."""
    found = [i for i, line in enumerate(lines) if opens.match(line)]
    if not found:
        return None
    first, *rest = lines[found[-1] if last else found[0]:]
    head = first if keep_name else first[opens.match(first).end():]
    return "\n".join([head, *(f"  {line}" for line in rest)])


def _swap_last_two(tensor):
    """A transposed view of the last two axes (Paddle's transpose takes the whole permutation)."""
    perm = list(range(tensor.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return tensor.transpose(perm)


def _host_source(name: str) -> str:
    """A reproducer's line that brings tensor `name` to NumPy float64 as the run does (to_numpy): a bfloat16
    tensor's .numpy() gives its raw bits as uint16, so it goes through float32, which holds every bfloat16."""
    return f"{name}.astype('float32' if {name}.dtype == paddle.bfloat16 else {name}.dtype).numpy().astype(np.float64)"
