"""MindSpore adapter: mint.nn.KLDivLoss, mint.nn.functional.kl_div, ops.kl_div and nn.KLDivLoss.

Quirks live here:
- The mint APIs are documented for Ascend only; on CPU and GPU MindSpore raises
  "The kernel KLDiv unregistered", reported as `unsupported` (no kernel for this
  device) with MindSpore's message (https://www.mindspore.cn/docs/en/master/api_python/mint/mindspore.mint.nn.KLDivLoss.html).
  So is a failed CPU kernel selection ("Kernel select failed"): ops.full, the fill factory, has no bfloat16
  kernel on CPU, so a bfloat16 case it makes cannot be built there.
- ops.kl_div(logits, labels, reduction) and nn.KLDivLoss(reduction) have no
  log_target argument; no API takes size_average/reduce.
- The device is chosen through MindSpore's context: device_target CPU, GPU or Ascend.
- Ops run synchronously (mindspore.runtime.launch_blocking), so an error is raised by
  the call that caused it; asynchronously, errors of a failed call (a mint call with
  no kernel) surfaced in later calls and made runs nondeterministic.

Mode `jit`: the call is a function compiled by `mindspore.jit(fn, fullgraph=True)` (graph mode, parsed from
its source), one per (API, arguments, device, input signature). A gradient is taken as MindSpore's tutorials write a
training step: `mindspore.jit` of the function that calls `mindspore.grad` of the loss, so the loss and its backward
are one graph (https://www.mindspore.cn/tutorials/en/master/beginner/quick_start.html, `train_step`;
https://www.mindspore.cn/tutorials/en/master/beginner/accelerate_with_static_graph.html). The step never runs the
forward alone: a forward without a kernel does not stop its gradient from being tried, and on CPU the mint APIs'
forward and input gradient fail graph kernel selection ("Unsupported op [KLDiv] on CPU": unsupported, as eager)
while their target gradient comes back from the graph, where PyNative raises "The kernel KLDiv unregistered".
It proves each call compiled: `fullgraph=True` makes syntax MindSpore cannot compile raise instead of running
in the Python interpreter (the LAX "JIT fallback"), and the switch mindspore.jit's wrapper reads at each call to
run the function eagerly instead, the environment variable MS_JIT=0, leaves no compiled phase behind: a call
whose function has no phase in MindSpore's compile cache (or made with MS_JIT=0) raises ModeFallback.
MindSpore's on-disk compile cache (enable_compile_cache) is not used: it is keyed by the function's source files,
and nothing here shows it keys the arguments the compiled function closes over (the reduction).
"""

from __future__ import annotations

import itertools
import os
import re

import numpy as np

from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, ModeFallback,
                                       construction_source, fill_value, layout_buffer, layout_buffer_source,
                                       numpy_source)
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

DEVICE_TARGETS = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}
# "The kernel KLDiv unregistered." (PyNative); "Unsupported op [KLDiv] on CPU" (graph kernel selection); "Kernel
# select failed: Select CPU operator[FillV2] fail! Unsupported data type!" (a CPU kernel without this dtype: ops.full
# has no bfloat16 one, so a bfloat16 case made by the fill factory cannot be built on CPU)
NO_KERNEL_MARKERS = ("unregistered", "Unsupported op [", "Kernel select failed")
JIT = "jit"
# The parts of a graph-mode error that are MindSpore's call stacks and its IR dump's path, not the error: they
# name this process's files and line numbers.
GRAPH_ERROR_NOISE = re.compile(r"^- (The Function Call Stack|C\+\+ Call Stack|The Traceback of Net Construct Code)"
                               r"|^ ?\(See file '", re.M)


class MindSporeAdapter(Adapter):
    name = "mindspore"
    apis = (
        Api("mindspore.mint.nn.KLDivLoss", grads=("input", "target"),
            implementation="mindspore.mint.nn.functional.kl_div"),
        Api("mindspore.mint.nn.functional.kl_div", grads=("input", "target")),
        # no double backward: "Illegal primitive KLDivLossGrad's bprop not defined" (mindspore 2.10.0)
        Api("mindspore.ops.kl_div", grads=("input", "target"), log_target=False, second_order=False),
        Api("mindspore.nn.KLDivLoss", grads=("input", "target"), log_target=False, second_order=False,
            implementation="mindspore.ops.kl_div"),
    )
    known_devices = tuple(DEVICE_TARGETS)
    modes = (Mode(JIT, "mindspore.jit(fullgraph=True): graph mode; a gradient is a jitted training step, "
                       "mindspore.jit of the function calling mindspore.grad"),)

    def __init__(self) -> None:
        self.ms = None
        self._device: str | None = None
        # (API, call, device, input signature[, part]) -> (name, compiled fn): a call's, or a gradient's step
        self._jitted: dict[tuple, tuple[str, object]] = {}
        self._names = itertools.count()

    def load(self) -> None:
        if self.scratch_dir is not None:  # jit's failures dump analyze_fail.ir under $MS_OM_PATH, else the cwd
            os.environ.setdefault("MS_OM_PATH", str(self.scratch_dir / "mindspore"))
        try:
            import mindspore
        except Exception as exc:
            raise FrameworkUnavailable(f"cannot import mindspore: {type(exc).__name__}: {exc}") from None
        self.ms = mindspore
        # Synchronous execution: in its default asynchronous mode MindSpore raises a failed
        # op's error at a later call, so a case's exception could surface in the next case.
        # (On CPU this is also about twice as fast for the suite's small tensors.)
        launch_blocking = getattr(getattr(mindspore, "runtime", None), "launch_blocking", None)
        if launch_blocking is not None:
            launch_blocking()
        else:
            mindspore.set_context(pynative_synchronize=True)

    def version(self) -> str:
        return self.ms.__version__

    def mode_unavailable(self, mode: str) -> str | None:
        if mode == JIT and self._compiled_phases() is None:
            return ("mindspore.graph.api.ms_compile_cache is missing in this MindSpore, so a jit call cannot be "
                    "proved compiled")
        return None

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        """Eager: the call as stated. jit: the compiled function of this call and signature, proved compiled."""
        if mode != JIT:
            return super().invoke(case, api, inputs)
        call = self.call(case, api)
        return self._compiled(api, (call, *_signature(inputs)), lambda: self._plain(call), inputs)

    def _compiled(self, api: Api, key: tuple, make, inputs):
        """`make()`'s function compiled by `mindspore.jit` (once per key), called on `inputs`, and proved compiled:
        named uniquely, so that its phase can be found (MindSpore names a phase after the function's module, name
        and source line)."""
        key = (api.name, self._device, *key)
        if key not in self._jitted:
            fn = make()
            name = f"kl_conformance_jit_{next(self._names)}"
            fn.__name__ = fn.__qualname__ = name
            self._jitted[key] = name, self.ms.jit(fn, fullgraph=True)
        name, compiled = self._jitted[key]
        jit_off = os.environ.get("MS_JIT") == "0"
        out = compiled(*inputs)
        if jit_off or not any(f".{name}." in phase for phase in self._compiled_phases()):
            raise ModeFallback(f"mindspore.jit ran {api.name} eagerly: "
                               + ("MS_JIT=0 is set" if jit_off else "no compiled phase of its function"))
        return out

    @staticmethod
    def _plain(call: ApiCall):
        """A plain function `kl(x, t)` making `call` (a loss object built outside it, as a user builds one)."""
        fn = call.resolve()
        if call.init is not None:
            fn = fn(**dict(call.init))
        kwargs = dict(call.kwargs)
        if call.args == ("x", "t"):
            def kl(x, t):
                return fn(x, t, **kwargs)
        else:
            def kl(x, t):
                return fn(t, x, **kwargs)
        return kl

    @staticmethod
    def _compiled_phases():
        """MindSpore's set of compiled graph phases, or None where this release keeps it elsewhere."""
        try:
            from mindspore.graph import api as graph_api
        except ImportError:
            return None
        phases = getattr(graph_api, "ms_compile_cache", None)
        return phases if isinstance(phases, set) else None

    def describe_exception(self, exc: Exception, mode: str = EAGER) -> str:
        """In jit, the error less MindSpore's call stacks and banner lines, which name this process's files."""
        text = str(exc)
        if mode != JIT:
            return text
        cut = GRAPH_ERROR_NOISE.search(text)
        if cut:
            text = text[:cut.start()]
        return "\n".join(line for line in text.splitlines() if line.strip() and set(line.strip()) != {"-"})

    def devices(self) -> tuple[str, ...]:
        present = ["cpu"]
        hal = getattr(self.ms, "hal", None)
        for device in ("gpu", "ascend"):
            try:
                if hal is not None and hal.is_available(DEVICE_TARGETS[device]):
                    present.append(device)
            except Exception:  # a backend that is not built in raises instead of answering False
                pass
        return tuple(present)

    def build(self, case: Case, device: str):
        self._use_device(device)
        return tuple(self._tensor(values, dtype, case.layout, case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def call(self, case: Case, api: Api) -> ApiCall:
        """ops.kl_div and nn.KLDivLoss take no log_target (their Api rows say so)."""
        p = case.params
        kwargs = dict(reduction=p.reduction, log_target=p.log_target) if api.log_target else dict(reduction=p.reduction)
        if api.name.endswith(".KLDivLoss"):
            return ApiCall.module(api.name, "x", "t", **kwargs)
        return ApiCall.function(api.name, "x", "t", **kwargs)

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        """mindspore.grad of sum(loss * upstream): the vector-Jacobian product with the upstream gradient; in jit,
        a jitted training step that takes it (the module's docstring says why)."""
        x, t = self.build(case, device)
        if mode == JIT:
            call = self.call(case, api)
            shape = _result_shape(case, x, t)
            return self._compiled(api, (call, *_signature((x, t)), part),
                                  lambda: _training_step(self.ms, self._plain(call), shape, tuple(x.shape), part),
                                  (x, t))
        out = self.invoke(case, api, (x, t))
        ms = self.ms
        upstream = ms.Tensor(upstream_gradient(tuple(out.shape)), out.dtype)
        weighted = lambda a, b: (self.invoke(case, api, (a, b)) * upstream).sum()
        if part != "grad2_input":
            return ms.grad(weighted, grad_position=0 if part == "grad_input" else 1)(x, t)
        w = ms.Tensor(upstream_gradient(tuple(x.shape)), x.dtype)
        grad_input = ms.grad(weighted, grad_position=0)
        return ms.grad(lambda a, b: (grad_input(a, b) * w).sum(), grad_position=1)(x, t)  # double backward

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        return any(m in str(exc) for m in NO_KERNEL_MARKERS)

    def _use_device(self, device: str) -> None:
        if device != self._device:
            self.ms.set_context(device_target=DEVICE_TARGETS[device])
            self._device = device

    def _tensor(self, values: np.ndarray, dtype: str, layout: str, made: Construction = NUMPY_DEFAULT):
        """The tensor as the case's construction makes it (ms.Tensor of nested Python floats, ops.full, or of a
        NumPy array in its own dtype, the dtype named or inferred); a NumPy case as before."""
        buffer, view = layout_buffer(values, layout, swap=lambda t: t.swapaxes(-1, -2))
        given = {} if made.inferred else {"dtype": getattr(self.ms, dtype)}
        if made.source == "list":
            return view(self.ms.Tensor(buffer.tolist(), **given))
        if made.source == "factory":
            return view(self.ms.ops.full(buffer.shape, fill_value(buffer), **given))
        if made.inferred:
            return view(self.ms.Tensor(numpy_source(buffer, dtype)))
        if dtype == "bfloat16":  # float32 holds these values exactly
            return view(self.ms.Tensor(buffer.astype(np.float32), self.ms.float32).astype(self.ms.bfloat16))
        return view(self.ms.Tensor(buffer, getattr(self.ms, dtype)))

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        view = {"contiguous": "", "transposed": ".swapaxes(-1, -2)", "strided": "[..., ::2]"}[case.layout]

        def tensor(name, dtype):
            made = case.construction
            if not made.is_default:
                source = construction_source(name, case.input if name[0] == "x" else case.target, case, dtype)
                given = "" if made.inferred else f", dtype=ms.{dtype}"
                return f"{'ms.ops.full' if made.source == 'factory' else 'ms.Tensor'}({source}{given}){view}"
            if dtype == "bfloat16":
                return (f"ms.Tensor({layout_buffer_source(name, case.layout)}.astype(np.float32), ms.float32)"
                        f".astype(ms.bfloat16){view}")
            return f"ms.Tensor({layout_buffer_source(name, case.layout)}, ms.{dtype}){view}"
        lines = ["import mindspore",
                 "import mindspore as ms", "",
                 f"ms.set_context(device_target={DEVICE_TARGETS[device]!r})",
                 f"x = {tensor('x_values', case.dtype.input)}",
                 f"t = {tensor('t_values', case.dtype.target)}",
                 *self._kl_source(self.call(case, api), mode, part)]
        if mode == JIT and part != "forward":
            shape = _result_shape(case, case.input, case.target)
            lines += _training_step_source(shape, part)
            lines.append("result_dtype = str(grad.dtype).lower()  # as the run records it")
            lines.append(f"result = {_host_source('grad')}")
            return "\n".join(lines)
        lines.append("out = kl(x, t)")
        if part == "forward":
            lines.append("result_dtype = str(out.dtype).lower()  # as the run records it")
            lines.append(f"result = {_host_source('out')}")
        else:
            lines.append("g = ms.Tensor(upstream(tuple(out.shape)), out.dtype)")
            lines.append("weighted = lambda a, b: (kl(a, b) * g).sum()")
            if part == "grad2_input":
                lines.append("w = ms.Tensor(upstream(tuple(x.shape)), x.dtype)")
                lines.append("grad_input = ms.grad(weighted, grad_position=0)")
                lines.append("grad = ms.grad(lambda a, b: (grad_input(a, b) * w).sum(), grad_position=1)(x, t)")
            else:
                lines.append(f"grad = ms.grad(weighted, grad_position={0 if part == 'grad_input' else 1})(x, t)")
            lines.append("result_dtype = str(grad.dtype).lower()  # as the run records it")
            lines.append(f"result = {_host_source('grad')}")
        return "\n".join(lines)

    def _kl_source(self, call: ApiCall, mode: str, part: str = "forward") -> list[str]:
        """Lines defining `kl(x, t)`, the call; in jit the function compiled as the run compiles it (a loss object
        built outside it, as the run builds it), which a gradient's training step calls uncompiled."""
        if mode != JIT:
            return [f"kl = lambda x, t: {call.source()}"]
        lines = []
        if call.init is not None:
            lines.append(f"loss = {ApiCall.function(call.path, **dict(call.init)).source()}")
            call = ApiCall("loss", call.args, call.kwargs)
        compiled = ["@ms.jit(fullgraph=True)  # graph mode, as the run's mode jit"] if part == "forward" else []
        return [*lines, "", "", *compiled, "def kl(x, t):", f"    return {call.source()}", "", ""]

    def to_numpy(self, result):
        if not isinstance(result, self.ms.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).lower()
        if dtype == "bfloat16":
            result = result.astype(self.ms.float32)
        return result.asnumpy().astype(np.float64), dtype, tuple(result.shape)


def _signature(tensors) -> tuple:
    return tuple((str(a.dtype), tuple(a.shape)) for a in tensors)


def _result_shape(case: Case, x, t) -> tuple[int, ...]:
    """The loss's shape, known without running it: the inputs' broadcast shape unreduced, else a scalar."""
    return tuple(np.broadcast_shapes(tuple(x.shape), tuple(t.shape))) if case.params.reduction == "none" else ()


def _training_step(ms, kl, shape: tuple[int, ...], input_shape: tuple[int, ...], part: str):
    """The function a user jits as a training step: mindspore.grad of sum(kl(x, t) * upstream) (the upstream in the
    loss's dtype, cast inside the graph), of the input or the target; for grad2_input, the target's gradient of
    sum(grad_input * w). Every function is a `def`: graph mode parses no lambda."""
    upstream = ms.Tensor(upstream_gradient(shape))

    def weighted(a, b):
        out = kl(a, b)
        return (out * ms.ops.cast(upstream, out.dtype)).sum()
    if part != "grad2_input":
        grad_fn = ms.grad(weighted, grad_position=0 if part == "grad_input" else 1)
    else:
        grad_input = ms.grad(weighted, grad_position=0)
        w = ms.Tensor(upstream_gradient(input_shape))

        def weighted_grad(a, b):
            g = grad_input(a, b)
            return (g * ms.ops.cast(w, g.dtype)).sum()
        grad_fn = ms.grad(weighted_grad, grad_position=1)

    def train_step(x, t):
        return grad_fn(x, t)
    return train_step


def _training_step_source(shape: tuple[int, ...], part: str) -> list[str]:
    """A reproducer's lines for `_training_step`, jitted as the run jits it."""
    lines = [f"g = ms.Tensor(upstream({shape!r}))", "", "",
             "def weighted(a, b):", "    out = kl(a, b)", "    return (out * ms.ops.cast(g, out.dtype)).sum()", "", ""]
    if part != "grad2_input":
        lines.append(f"grad_fn = ms.grad(weighted, grad_position={0 if part == 'grad_input' else 1})")
    else:
        lines += ["w = ms.Tensor(upstream(tuple(x.shape)))", "grad_input = ms.grad(weighted, grad_position=0)", "",
                  "", "def weighted_grad(a, b):", "    gi = grad_input(a, b)",
                  "    return (gi * ms.ops.cast(w, gi.dtype)).sum()", "", "",
                  "grad_fn = ms.grad(weighted_grad, grad_position=1)"]
    return [*lines, "", "", "@ms.jit(fullgraph=True)  # the training step, compiled as the run's mode jit compiles it",
            "def train_step(a, b):", "    return grad_fn(a, b)", "", "", "grad = train_step(x, t)"]


def _host_source(name: str) -> str:
    """A reproducer's line that brings tensor `name` to NumPy float64 as the run does (to_numpy): a bfloat16
    tensor goes through float32, which holds every bfloat16, as NumPy has no bfloat16 of its own."""
    return f"{name}.astype(ms.float32 if {name}.dtype == ms.bfloat16 else {name}.dtype).asnumpy().astype(np.float64)"
