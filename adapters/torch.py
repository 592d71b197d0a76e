"""PyTorch adapter: torch.nn.functional.kl_div and torch.nn.KLDivLoss on cpu and cuda, eager and in the modes
people deploy: compiled by Inductor (`torch.compile`) and exported to ONNX, run by onnxruntime.

Quirks live here: the legacy size_average/reduce arguments are passed through as
given, because torch's own mapping of them is what is under test
(https://pytorch.org/docs/stable/generated/torch.nn.functional.kl_div.html).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import platform
import re
import sys
import warnings
from pathlib import Path

from conformance.adapters import apicall
from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, construction_source,
                                      fill_value, layout_buffer, layout_view_source, numpy_source)
from conformance.adapters.compiled import InductorCall, keep_inductor_cache
from conformance.adapters.observation import missing_gradient
from conformance.adapters.onnxcache import ModelCache
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

# torch's words for a floating dtype with no kernel on a device: '"log_vml_cpu" not implemented for 'Half''
# (torch 1.12 on CPU). An integer dtype raises the same words, but that is the refusal the spec expects.
NO_KERNEL = re.compile(r"not implemented for '(Half|BFloat16)'")
# onnxruntime's words for a dtype its CPU build has no kernel for (bfloat16 Log, Mul): the session refuses the model
ORT_NO_KERNEL = re.compile(r"NOT_IMPLEMENTED : Could not find an implementation for")

# Inductor's options per compiled mode, passed to each compile (never set globally), so the two modes never
# share compiled code: the emulated one rounds every float16/bfloat16 intermediate as eager does
# (https://pytorch.org/docs/stable/torch.compiler_faq.html, torch._inductor.config.emulate_precision_casts).
INDUCTOR_OPTIONS = {"inductor": {}, "inductor-emulated": {"emulate_precision_casts": True}}
# Each ONNX mode's exporter (torch.onnx.export's `dynamo` argument) and the packages it needs beside torch.
ONNX_EXPORTERS = {"onnx-torchscript": (False, ("onnx", "onnxruntime")),
                  "onnx-dynamo": (True, ("onnx", "onnxruntime", "onnxscript"))}
MODES = (
    Mode("inductor", "torch.compile(backend='inductor', dynamic=False)"),
    Mode("inductor-emulated", "torch.compile(backend='inductor', dynamic=False, "
                              "options={'emulate_precision_casts': True})"),
    Mode("onnx-torchscript", "torch.onnx.export(dynamo=False), run by an onnxruntime InferenceSession on CPU",
         gradients=False),
    Mode("onnx-dynamo", "torch.onnx.export(dynamo=True), run by an onnxruntime InferenceSession on CPU",
         gradients=False),
)


class OrtUnsupported(Exception):
    """What an ONNX mode cannot hand onnxruntime's CPU build: a device it does not run on, or a bfloat16 input (it
    is fed NumPy arrays, and NumPy has no bfloat16)."""


class TorchAdapter(Adapter):
    name = "torch"
    apis = (
        Api("torch.nn.functional.kl_div", grads=("input", "target"), legacy_args=True),
        Api("torch.nn.KLDivLoss", grads=("input", "target"), legacy_args=True,
            implementation="torch.nn.functional.kl_div"),
    )
    known_devices = ("cpu", "cuda")
    shared_device_kinds = ("cpu", "cuda")  # CUDA memory is taken as tensors need it
    modes = MODES
    # Dynamo compiles a function again for each new signature (dtype, shape, layout) and, past its recompile
    # limit, silently runs it eagerly: raised so a suite compiles (each compiled function serves one API and
    # call's arguments); a call that still ran eagerly is a `fallback` row
    recompile_limit = 1_000_000

    def __init__(self) -> None:
        self.torch = None
        self._compiled: dict = {}  # (mode, api, ApiCall) -> InductorCall
        self._exported: dict = {}  # (mode, api, ApiCall, input signature) -> onnxruntime InferenceSession
        self._models: ModelCache | None = None

    def load(self) -> None:
        keep_inductor_cache(self.compile_cache_dir)
        self._models = ModelCache(self.compile_cache_dir, self._export_depends_on)
        try:
            import torch
        except ImportError as exc:
            raise FrameworkUnavailable(f"cannot import torch: {exc}") from None
        self.torch = torch

    def mode_unavailable(self, mode: str) -> str | None:
        if mode in ONNX_EXPORTERS:
            missing = [name for name in ONNX_EXPORTERS[mode][1] if importlib.util.find_spec(name) is None]
            if missing:
                return f"{', '.join(missing)} not importable (pip install {' '.join(missing)})"
        return None

    def version(self) -> str:
        return self.torch.__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "cuda") if self.torch.cuda.is_available() else ("cpu",)

    def device_name(self, device: str) -> str:
        if device == "cuda":
            return self.torch.cuda.get_device_name()
        return platform.processor() or platform.machine()

    def build(self, case: Case, device: str):
        return tuple(self._tensor(values, dtype, case.layout, device, made=case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def _tensor(self, values, dtype: str, layout: str, device: str, requires_grad: bool = False,
                made: Construction = NUMPY_DEFAULT):
        """The tensor as the case's construction makes it: torch.from_numpy, torch.tensor of nested Python floats,
        or torch.full; with the dtype named, or left to torch (its default dtype, or the NumPy array's)."""
        torch = self.torch
        buffer, view = layout_buffer(values, layout)
        given = None if made.inferred else getattr(torch, dtype)
        if made.source == "list":
            leaf = torch.tensor(buffer.tolist(), dtype=given, device=device)
        elif made.source == "factory":
            leaf = torch.full(buffer.shape, fill_value(buffer), dtype=given, device=device)
        elif made.inferred:
            leaf = torch.from_numpy(numpy_source(buffer, dtype)).to(device=device)
        else:
            leaf = torch.from_numpy(buffer).to(device=device, dtype=given)
        return view(leaf.requires_grad_(requires_grad))

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        """The vector-Jacobian product with the upstream gradient g, as the gradient of sum(out * g).

        Not `grad_outputs=g`: torch checks a given grad_output's shape with its symbolic-shapes module,
        whose first import (sympy) is slow, and it would be paid in every fresh process: most of torch's
        first pass over the suite. The product's backward hands kl_div's backward exactly g (1 * g in out's dtype), so
        every gradient is bitwise the same as with grad_outputs (checked on the exhaustive suite).
        """
        torch = self.torch
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, part != "grad_target", case.construction)
        t = self._tensor(case.target, case.dtype.target, case.layout, device, part != "grad_input", case.construction)
        out = self.invoke(case, api, (x, t), mode)  # in a compiled mode, the forward graph must have run
        upstream = torch.from_numpy(upstream_gradient(tuple(out.shape))).to(device=device, dtype=out.dtype)
        (grad,) = torch.autograd.grad((out * upstream).sum(), [t if part == "grad_target" else x],
                                      allow_unused=True, create_graph=second)
        if not second or grad is None:
            return grad
        w = torch.from_numpy(upstream_gradient(tuple(grad.shape))).to(device=device, dtype=grad.dtype)
        (grad2,) = torch.autograd.grad((grad * w).sum(), [t], allow_unused=True)
        return grad2

    def call(self, case: Case, api: Api) -> ApiCall:
        """size_average and reduce are passed only where the case sets one (both default to None)."""
        p = case.params
        kwargs = dict(reduction=p.reduction, log_target=p.log_target)
        if p.has_legacy:
            kwargs.update(size_average=p.size_average, reduce=p.reduce)
        if api.name == "torch.nn.functional.kl_div":
            return ApiCall.function(api.name, "x", "t", **kwargs)
        return ApiCall.module(api.name, "x", "t", **kwargs)

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        """Eager: the call. Inductor modes: the call compiled once per (mode, API, call), raising ModeFallback
        where its compiled graph did not run. ONNX modes: the call exported once per input signature and run by
        onnxruntime on CPU (its result as a torch tensor of onnxruntime's dtype)."""
        if mode == EAGER:
            return super().invoke(case, api, inputs)
        if mode in INDUCTOR_OPTIONS:
            return self._inductor_call(case, api, inputs, mode)
        return self._onnx_call(case, api, inputs, mode)

    def _inductor_call(self, case: Case, api: Api, inputs, mode: str):
        """The call compiled by Inductor, with the recompile limits raised for this call only (a subclass may
        lower them). Warnings are not recorded: they fire while Dynamo traces, once per compile, so which case
        saw them would depend on the order the cases ran in."""
        torch = self.torch
        call = self.call(case, api)
        key = (mode, api.name, call)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = InductorCall(torch, call.bound(), INDUCTOR_OPTIONS[mode])
        limit = self.recompile_limit
        with torch._dynamo.config.patch(recompile_limit=limit, accumulated_recompile_limit=limit), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compiled(*inputs)

    def _onnx_call(self, case: Case, api: Api, inputs, mode: str):
        """The call exported (a module wrapping it) and run in an onnxruntime InferenceSession on CPU; one export
        per (mode, API, call, input shapes and dtypes). Warnings are not recorded: the exporter's fire once per
        export."""
        torch = self.torch
        x, t = inputs
        if x.device.type != "cpu":
            raise OrtUnsupported(f"mode {mode} runs in onnxruntime's CPU build (CPUExecutionProvider), "
                                       f"not on {x.device.type}")
        import onnxruntime

        call = self.call(case, api)
        key = (mode, api.name, call, tuple((tuple(a.shape), a.dtype) for a in inputs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = self._exported.get(key)
            if session is None:
                model = self._models.model(repr(key), lambda: _export(torch, call.bound(), inputs,
                                                                       ONNX_EXPORTERS[mode][0]))
                session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
                self._exported[key] = session
            given = {"x": x, "t": t}
            # an exporter may fold an input the result does not depend on (an empty one) out of the graph
            fed = {i.name: given[i.name] for i in session.get_inputs()}
            if any(v.dtype == torch.bfloat16 for v in fed.values()):  # a graph that casts it at once exports
                raise OrtUnsupported(f"mode {mode} feeds onnxruntime NumPy arrays, and NumPy has no bfloat16: the "
                                     "exported graph's bfloat16 input cannot be given")
            feeds = {name: v.detach().contiguous().numpy() for name, v in fed.items()}
            (out,) = session.run(None, feeds)
        return torch.from_numpy(_np_array(out))

    def _export_depends_on(self) -> str:
        """What an exported model depends on beyond its key (adapters/onnxcache.py): the exporters' versions and
        the source that wraps and exports the call."""
        import onnx

        onnxscript = importlib.util.find_spec("onnxscript") and importlib.import_module("onnxscript").__version__
        sources = (Path(__file__), Path(apicall.__file__))
        digest = hashlib.blake2b(b"".join(path.read_bytes() for path in sources), digest_size=16).hexdigest()
        return (f"python {sys.version_info[:2]} torch {self.torch.__version__} onnx {onnx.__version__} "
                f"onnxscript {onnxscript} source {digest}")

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        """The tensors as the run built them: `requires_grad_` only on what a gradient part differentiates, as
        in `gradient` (an integer tensor refuses it, so a forward reproducer that called it would show that
        refusal instead of the run's finding). In a mode, the call is wrapped as the run wrapped it."""
        def tensor(name: str, values, dtype: str, differentiated: bool) -> str:
            grad = ".requires_grad_(True)" if differentiated and part != "forward" else ""
            made, given = case.construction, ("" if case.construction.inferred else f", dtype=torch.{dtype}")
            source = construction_source(name + "_values", values, case, dtype)
            if made.source == "list":  # nested lists of Python floats
                leaf = f"torch.tensor({source}{given}, device={device!r}){grad}"
            elif made.source == "factory":
                leaf = f"torch.full({source}{given}, device={device!r}){grad}"
            elif made.inferred:
                leaf = f"torch.from_numpy({source}).to({device!r}){grad}"
            else:
                leaf = f"torch.from_numpy({source}).to({device!r}, torch.{dtype}){grad}"
            return f"{name} = {layout_view_source(leaf, case.layout)}"
        if mode in ONNX_EXPORTERS and part != "forward":
            raise ValueError(f"mode {mode} has no gradients")
        source = self.call(case, api).source()
        missing = ["class MissingGradient(Exception):", '    """torch.autograd.grad gave no gradient (None)."""', "",
                   ""] if part != "forward" else []
        lines = ["import torch", "", *missing,
                 tensor("x", case.input, case.dtype.input, part != "grad_target"),
                 tensor("t", case.target, case.dtype.target, part != "grad_input")]
        if mode in INDUCTOR_OPTIONS:
            lines += self._inductor_repro(source, mode)
        elif mode in ONNX_EXPORTERS:
            return "\n".join(lines + self._onnx_repro(source, mode))
        else:
            lines.append(f"out = {source}")
        if part == "forward":
            lines.append("result = out.detach().double().cpu().numpy()")
            lines.append("result_dtype = str(out.dtype).removeprefix('torch.')")
        else:
            # as `gradient` differentiates: a gradient that does not come back is MissingGradient, not an error
            wrt, second = ("t" if part == "grad_target" else "x"), part == "grad2_input"
            lines.append("g = torch.from_numpy(upstream(tuple(out.shape))).to(out.device, out.dtype)")
            lines.append(f"(grad,) = torch.autograd.grad((out * g).sum(), [{wrt}], allow_unused=True, "
                         f"create_graph={second})")
            if second:
                lines += ["if grad is not None:",
                          "    w = torch.from_numpy(upstream(tuple(grad.shape))).to(grad.device, grad.dtype)",
                          "    (grad,) = torch.autograd.grad((grad * w).sum(), [t], allow_unused=True)"]
            lines += ["if grad is None:  # the harness records this as MissingGradient",
                      f"    raise MissingGradient({missing_gradient(api.name, part)!r})"]
            lines.append("result = grad.detach().double().cpu().numpy()")
            lines.append("result_dtype = str(grad.dtype).removeprefix('torch.')")
        return "\n".join(lines)

    def _inductor_repro(self, source: str, mode: str) -> list[str]:
        """The compiled call as a user writes it: torch.compile with the mode's options and the raised limits;
        it fails where no compiled graph ran (Dynamo ran the call eagerly), which the script reads as cannot
        tell."""
        options = INDUCTOR_OPTIONS[mode]
        given = f", options={options!r}" if options else ""
        return [f"# mode {mode}: the call compiled by Inductor, as the run compiled it",
                "import torch._dynamo",
                f"torch._dynamo.config.recompile_limit = {self.recompile_limit!r}",
                f"torch._dynamo.config.accumulated_recompile_limit = {self.recompile_limit!r}",
                "",
                "",
                "def kl_div(x, t):",
                f"    return {source}",
                "",
                "",
                f"kl_div = torch.compile(kl_div, backend='inductor', dynamic=False{given})",
                "out = kl_div(x, t)",
                "if not torch._dynamo.utils.counters['stats']['unique_graphs']:",
                "    raise RuntimeError('Dynamo ran the call eagerly: no compiled graph')"]

    def _onnx_repro(self, source: str, mode: str) -> list[str]:
        """The call exported to ONNX as the run exported it, and run by an onnxruntime InferenceSession on CPU."""
        dynamo = ONNX_EXPORTERS[mode][0]
        export = "torch.onnx.export(Call().eval(), (x, t), {}input_names=['x', 't'], output_names=['out'], " \
                 f"dynamo={dynamo!r})"
        lines = [f"# mode {mode}: the call exported to ONNX and run by onnxruntime (pip install onnxruntime "
                 f"onnx{' onnxscript' if dynamo else ''})",
                 "import onnxruntime",
                 "",
                 "",
                 "class Call(torch.nn.Module):",
                 "    def forward(self, x, t):",
                 f"        return {source}",
                 ""]
        if dynamo:
            lines.append(f"model = {export.format('')}.model_proto.SerializeToString()")
        else:
            lines += ["import io", "buffer = io.BytesIO()", export.format("buffer, "), "model = buffer.getvalue()"]
        return lines + [
            "session = onnxruntime.InferenceSession(model, providers=['CPUExecutionProvider'])",
            "feeds = {i.name: {'x': x, 't': t}[i.name].detach().contiguous().numpy() for i in session.get_inputs()}",
            "(out,) = session.run(None, feeds)",
            "result = np.asarray(out, dtype=np.float64)",
            "result_dtype = str(out.dtype)"]

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        """torch's no-kernel words; in the ONNX modes onnxruntime's, and a device its CPU build has not."""
        return (NO_KERNEL.search(str(exc)) is not None or isinstance(exc, OrtUnsupported)
                or (mode in ONNX_EXPORTERS and ORT_NO_KERNEL.search(str(exc)) is not None))

    def to_numpy(self, result):
        if not isinstance(result, self.torch.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).removeprefix("torch.")
        return result.detach().to("cpu", self.torch.float64).numpy(), dtype, tuple(result.shape)


def _export(torch, bound, inputs, dynamo: bool) -> bytes:
    """The ONNX model of a module wrapping the call, traced on `inputs` (static shapes)."""
    class Call(torch.nn.Module):
        def forward(self, x, t):
            return bound(x, t)

    kwargs = dict(input_names=["x", "t"], output_names=["out"], dynamo=dynamo)
    if dynamo:
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines, printed on every export
            program = torch.onnx.export(Call().eval(), tuple(inputs), verbose=False, **kwargs)
        return program.model_proto.SerializeToString()
    buffer = io.BytesIO()
    torch.onnx.export(Call().eval(), tuple(inputs), buffer, **kwargs)
    return buffer.getvalue()


def _np_array(out):
    import numpy as np

    return np.array(out, copy=True)  # a 0-d result too; a writable copy, which torch.from_numpy wants
