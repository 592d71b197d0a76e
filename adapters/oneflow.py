"""OneFlow adapter: oneflow.nn.functional.kl_div and oneflow.nn.KLDivLoss on cpu and cuda.

Quirks live here:
- OneFlow 0.9.0 (the newest real build, CPython 3.8-3.10) links CUDA 11 libraries
  even for CPU use; the pip packages nvidia-cublas-cu11 and nvidia-cudnn-cu11 provide
  them and `load()` preloads them with RTLD_GLOBAL before `import oneflow`.
- Neither API takes size_average/reduce (https://oneflow.readthedocs.io/en/master/generated/oneflow.nn.KLDivLoss.html).
- "Cannot find the kernel" (e.g. float16 on CPU) means no kernel for this device; for an integral or bool
  argument it is kl_div refusing the dtype, an error the spec judges.

Mode `graph`: the call is the `build` of a `oneflow.nn.Graph` (a loss module registered in it), one graph per
(API, arguments, input signature), compiled at its first call. It has no gradients: a graph differentiates only
in training, its parameters through an optimizer added to it; `flow.autograd.grad` in `build` fails ("job has
no TrainConf"). A graph cannot run its `build` eagerly (OneFlow traces it in lazy mode or raises), and each call
checks the graph says it compiled (`_is_compiled`), raising ModeFallback otherwise.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import site
import sys

import numpy as np

from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, ModeFallback,
                                       construction_source, fill_value, layout_buffer, layout_buffer_source,
                                       numpy_source)
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient
from conformance.core.text import with_sorted_entries

CUDA_LIBRARIES = ("cublas", "cudnn")  # load order: cuDNN needs cuBLAS
GRAPH = "graph"
# "Cannot find the kernel" names each argument's DataType; an integral or bool one is kl_div refusing that dtype
INTEGRAL_DATA_TYPE = re.compile(r"DataType_Name of \w+: k(?:U?Int\d+|Bool|Char)\b")


def preload_cuda_libraries() -> list[str]:
    """dlopen the pip-installed CUDA 11 libraries globally so OneFlow's extension resolves them."""
    loaded = []
    roots = site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("site-packages")]
    for lib in CUDA_LIBRARIES:
        for root in dict.fromkeys(roots):
            for so in sorted(glob.glob(os.path.join(root, "nvidia", lib, "lib", "*.so*"))):
                try:
                    ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)
                    loaded.append(so)
                except OSError:
                    pass  # a library needing another not yet loaded; OneFlow reports what is missing
    return loaded


class OneFlowAdapter(Adapter):
    name = "oneflow"
    apis = (
        Api("oneflow.nn.functional.kl_div", grads=("input", "target")),
        Api("oneflow.nn.KLDivLoss", grads=("input", "target"), implementation="oneflow.nn.functional.kl_div"),
    )
    known_devices = ("cpu", "cuda")
    modes = (Mode(GRAPH, "oneflow.nn.Graph whose build makes the call; a graph differentiates only its parameters, "
                         "in training with an optimizer", gradients=False),)

    def __init__(self) -> None:
        self.flow = None
        self._graphs: dict[tuple, object] = {}  # (API, call, input signature) -> nn.Graph

    def mode_unavailable(self, mode: str) -> str | None:
        """graph: None once a one-element graph of kl_div compiles and runs on the CPU here, else what failed."""
        if mode != GRAPH:
            return None
        flow = self.flow
        try:
            one = flow.tensor([-1.0], dtype=flow.float32)
            self._graph(ApiCall.function("oneflow.nn.functional.kl_div", "x", "t", reduction="sum"))(one, one)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            return f"a oneflow.nn.Graph of kl_div on cpu raised {type(exc).__name__}: {first[:200]}"
        return None

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        """Eager: the call as stated. graph: the nn.Graph of this call and signature, proved compiled."""
        if mode != GRAPH:
            return super().invoke(case, api, inputs)
        x, t = inputs
        call = self.call(case, api)
        key = (api.name, call, *((str(a.dtype), tuple(a.shape), str(a.device)) for a in (x, t)))
        if key not in self._graphs:
            self._graphs[key] = self._graph(call)
        graph = self._graphs[key]
        try:
            out = graph(x, t)
        except Exception:
            if not getattr(graph, "_is_compiled", False):  # a graph whose build failed cannot build again
                del self._graphs[key]
            raise
        if not getattr(graph, "_is_compiled", False):
            raise ModeFallback(f"the oneflow.nn.Graph of {api.name} returned without compiling")
        return out

    def _graph(self, call: ApiCall):
        """A oneflow.nn.Graph whose build makes `call` (a loss object built once, registered in the graph)."""
        flow = self.flow
        fn = call.resolve()
        kwargs, swapped = dict(call.kwargs), call.args != ("x", "t")

        class KLGraph(flow.nn.Graph):
            def __init__(self):
                super().__init__()
                self.loss = fn(**dict(call.init)) if call.init is not None else None

            def build(self, x, t):
                f = self.loss if self.loss is not None else fn
                return f(t, x, **kwargs) if swapped else f(x, t, **kwargs)
        return KLGraph()

    def load(self) -> None:
        preload_cuda_libraries()
        try:
            import oneflow
        except Exception as exc:  # ImportError, or OSError for a missing CUDA library
            raise FrameworkUnavailable(f"cannot import oneflow: {type(exc).__name__}: {exc}") from None
        self.flow = oneflow

    def version(self) -> str:
        return self.flow.__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "cuda") if self.flow.cuda.is_available() else ("cpu",)

    def dtype_unavailable(self, dtype: str) -> str | None:
        """OneFlow 0.8.0 has no int16: its cases are unsupported there, not errors of building a tensor."""
        return None if hasattr(self.flow, dtype) else f"oneflow {self.flow.__version__} has no dtype oneflow.{dtype}"

    def build(self, case: Case, device: str):
        return tuple(self._tensor(values, dtype, case.layout, device, made=case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def call(self, case: Case, api: Api) -> ApiCall:
        p = case.params
        if api.name == "oneflow.nn.functional.kl_div":
            return ApiCall.function(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)
        return ApiCall.module(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        """"Cannot find the kernel" for a floating dtype (float16 on the CPU); for an integral or bool argument the
        same message is the refusal the spec judges (errors.integral_dtype), not a device without a kernel."""
        text = str(exc)
        return "Cannot find the kernel" in text and INTEGRAL_DATA_TYPE.search(text) is None

    def describe_exception(self, exc: Exception, mode: str = EAGER) -> str:
        # OneFlow numbers the ops a process creates ("op_name: kl_div_loss2"): the number counts what ran
        # before, so a shard and the whole run would record one refusal with two messages
        # and its graphs ("KLGraph_3"), in mode graph; and it lists an op's argument dtypes ("DataType_Name of
        # input_0: kFloat16") in the order of a hash map, which changes from process to process
        text = re.sub(r"(op_name: [A-Za-z_]+?|\bKLGraph_)\d+\b", r"\1", str(exc))
        return "\n".join(with_sorted_entries(text.split("\n")))

    def _tensor(self, values: np.ndarray, dtype: str, layout: str, device: str, requires_grad: bool = False,
                made: Construction = NUMPY_DEFAULT):
        """The tensor as the case's construction makes it (flow.tensor of nested Python floats, flow.full, or of a
        NumPy array in its own dtype, the dtype named or inferred); a NumPy case as before."""
        buffer, view = layout_buffer(values, layout)
        given = {} if made.inferred else {"dtype": getattr(self.flow, dtype)}
        if made.source == "list":
            tensor = self.flow.tensor(buffer.tolist(), device=device, **given)
        elif made.source == "factory":
            tensor = self.flow.full(buffer.shape, fill_value(buffer), device=device, **given)
        elif made.inferred:
            tensor = self.flow.tensor(numpy_source(buffer, dtype), device=device)
        elif dtype == "bfloat16":  # no float64 -> bfloat16 cast kernel on CPU; float32 holds these values exactly
            tensor = self.flow.tensor(buffer.astype(np.float32), device=device).to(self.flow.bfloat16)
        else:
            tensor = self.flow.tensor(buffer, dtype=getattr(self.flow, dtype), device=device)
        return view(tensor.requires_grad_(requires_grad))

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        flow = self.flow
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, part != "grad_target", case.construction)
        t = self._tensor(case.target, case.dtype.target, case.layout, device, part != "grad_input", case.construction)
        out = self.invoke(case, api, (x, t), mode)
        upstream = flow.tensor(upstream_gradient(tuple(out.shape)), dtype=out.dtype, device=device)
        (grad,) = flow.autograd.grad(out, [t if part == "grad_target" else x], grad_outputs=upstream,
                                     create_graph=second, retain_graph=second)
        if not second or grad is None:
            return grad
        w = flow.tensor(upstream_gradient(tuple(grad.shape)), dtype=grad.dtype, device=device)
        (grad2,) = flow.autograd.grad((grad * w).sum(), [t])
        return grad2

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        view = {"contiguous": "", "transposed": ".transpose(-1, -2)", "strided": "[..., ::2]"}[case.layout]

        def tensor(name, dtype, grad):  # requires_grad_ only on what a gradient part differentiates, as the run
            grad = ".requires_grad_(True)" if grad and part != "forward" else ""
            if not case.construction.is_default:
                made = case.construction
                source = construction_source(name, case.input if name[0] == "x" else case.target, case, dtype)
                given = "" if made.inferred else f", dtype=flow.{dtype}"
                maker = {"list": "tensor", "factory": "full", "numpy": "tensor"}[made.source]
                return f"flow.{maker}({source}{given}, device={device!r}){grad}{view}"
            base = f"flow.tensor({layout_buffer_source(name, case.layout)}.astype(np.float32), device={device!r})"
            if dtype == "bfloat16":
                return f"{base}.to(flow.bfloat16){grad}{view}"
            return (f"flow.tensor({layout_buffer_source(name, case.layout)}, dtype=flow.{dtype}, device={device!r})"
                    f"{grad}{view}")
        lines = [
            "import ctypes, glob, os, site",
            "for lib in ('cublas', 'cudnn'):  # OneFlow 0.9 links CUDA 11 libraries even on CPU",
            "    for root in site.getsitepackages():",
            "        for so in sorted(glob.glob(os.path.join(root, 'nvidia', lib, 'lib', '*.so*'))):",
            "            ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)",
            "import oneflow",
            "import oneflow as flow", "",
            f"x = {tensor('x_values', case.dtype.input, part != 'grad_target')}",
            f"t = {tensor('t_values', case.dtype.target, part != 'grad_input')}",
            *self._call_source(self.call(case, api), mode)]
        if part == "forward":
            lines.append("result_dtype = str(out.dtype).removeprefix('oneflow.')  # as the run records it")
            lines.append(f"result = {_host_source('out')}")
        else:
            wrt = "t" if part == "grad_target" else "x"
            lines.append("g = flow.tensor(upstream(tuple(out.shape)), dtype=out.dtype, device=out.device)")
            second = part == "grad2_input"
            lines.append(f"(grad,) = flow.autograd.grad(out, [{wrt}], grad_outputs=g, create_graph={second}, "
                         f"retain_graph={second})")
            if second:
                lines.append("w = flow.tensor(upstream(tuple(grad.shape)), dtype=grad.dtype, device=grad.device)")
                lines.append("(grad,) = flow.autograd.grad((grad * w).sum(), [t])")
            lines.append("result_dtype = str(grad.dtype).removeprefix('oneflow.')  # as the run records it")
            lines.append(f"result = {_host_source('grad')}")
        return "\n".join(lines)

    def _call_source(self, call: ApiCall, mode: str) -> list[str]:
        """Lines setting `out`: the call itself, or in graph mode the nn.Graph the run builds around it."""
        if mode != GRAPH:
            return [f"out = {call.source()}"]
        lines = ["", "", "class KLGraph(flow.nn.Graph):  # the run's mode graph: the call compiled as a graph",
                 "    def __init__(self):", "        super().__init__()"]
        if call.init is not None:
            lines.append(f"        self.loss = {ApiCall.function(call.path, **dict(call.init)).source()}")
            call = ApiCall("self.loss", call.args, call.kwargs)
        return [*lines, "", "    def build(self, x, t):", f"        return {call.source()}", "", "",
                "out = KLGraph()(x, t)"]

    def to_numpy(self, result):
        if not isinstance(result, self.flow.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).removeprefix("oneflow.")
        host = result.to("cpu")
        if dtype == "bfloat16":
            host = host.to(self.flow.float32)
        return host.numpy().astype(np.float64), dtype, tuple(result.shape)


def _host_source(name: str) -> str:
    """A reproducer's line that brings tensor `name` to NumPy float64 as the run does (to_numpy): a bfloat16
    tensor goes through float32, which holds every bfloat16, as NumPy has no bfloat16 of its own."""
    return f"{name}.to(flow.float32 if {name}.dtype == flow.bfloat16 else {name}.dtype).numpy().astype(np.float64)"
