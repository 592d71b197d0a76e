"""PyTorch adapter: torch.nn.functional.kl_div and torch.nn.KLDivLoss on cpu and cuda.

Quirks live here: the legacy size_average/reduce arguments are passed through as
given, because torch's own mapping of them is what is under test
(https://pytorch.org/docs/stable/generated/torch.nn.functional.kl_div.html).
"""

from __future__ import annotations

import platform
import re

from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, layout_buffer, layout_buffer_source,
                                      layout_view_source)
from conformance.core.model import Case, upstream_gradient

# torch's words for a floating dtype with no kernel on a device: '"log_vml_cpu" not implemented for 'Half''
# (torch 1.12 on CPU). An integer dtype raises the same words, but that is the refusal the spec expects.
NO_KERNEL = re.compile(r"not implemented for '(Half|BFloat16)'")


class TorchAdapter(Adapter):
    name = "torch"
    apis = (
        Api("torch.nn.functional.kl_div", grads=("input", "target"), legacy_args=True),
        Api("torch.nn.KLDivLoss", grads=("input", "target"), legacy_args=True),
    )
    known_devices = ("cpu", "cuda")

    def __init__(self) -> None:
        self.torch = None

    def load(self) -> None:
        try:
            import torch
        except ImportError as exc:
            raise FrameworkUnavailable(f"cannot import torch: {exc}") from None
        self.torch = torch

    def version(self) -> str:
        return self.torch.__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "cuda") if self.torch.cuda.is_available() else ("cpu",)

    def device_name(self, device: str) -> str:
        if device == "cuda":
            return self.torch.cuda.get_device_name()
        return platform.processor() or platform.machine()

    def build(self, case: Case, device: str):
        return tuple(self._tensor(values, dtype, case.layout, device)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def _tensor(self, values, dtype: str, layout: str, device: str, requires_grad: bool = False):
        buffer, view = layout_buffer(values, layout)
        leaf = self.torch.from_numpy(buffer).to(device=device, dtype=getattr(self.torch, dtype))
        return view(leaf.requires_grad_(requires_grad))

    def gradient(self, case: Case, api: Api, device: str, part: str):
        """The vector-Jacobian product with the upstream gradient g, as the gradient of sum(out * g).

        Not `grad_outputs=g`: torch checks a given grad_output's shape with its symbolic-shapes module,
        whose first import (sympy) is slow, and it would be paid in every fresh process: most of torch's
        first pass over the suite. The product's backward hands kl_div's backward exactly g (1 * g in out's dtype), so
        every gradient is bitwise the same as with grad_outputs (checked on the exhaustive suite).
        """
        torch = self.torch
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, requires_grad=part != "grad_target")
        t = self._tensor(case.target, case.dtype.target, case.layout, device, requires_grad=part != "grad_input")
        out = self.invoke(case, api, (x, t))
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

    def repro_source(self, case: Case, api: Api, device: str, part: str) -> str:
        """The tensors as the run built them: `requires_grad_` only on what a gradient part differentiates, as
        in `gradient` (an integer tensor refuses it, so a forward reproducer that called it would show that
        refusal instead of the run's finding)."""
        def tensor(name: str, dtype: str, differentiated: bool) -> str:
            grad = ".requires_grad_(True)" if differentiated and part != "forward" else ""
            leaf = (f"torch.from_numpy({layout_buffer_source(name + '_values', case.layout)})"
                    f".to({device!r}, torch.{dtype}){grad}")
            return f"{name} = {layout_view_source(leaf, case.layout)}"
        lines = ["import torch", "",
                 tensor("x", case.dtype.input, part != "grad_target"),
                 tensor("t", case.dtype.target, part != "grad_input"),
                 f"out = {self.call(case, api).source()}"]
        if part == "forward":
            lines.append("result = out.detach().double().cpu().numpy()")
            lines.append("result_dtype = str(out.dtype).removeprefix('torch.')")
        else:
            wrt = "t" if part == "grad_target" else "x"
            lines.append("g = torch.from_numpy(upstream(tuple(out.shape))).to(out.device, out.dtype)")
            lines.append(f"(grad,) = torch.autograd.grad((out * g).sum(), [{wrt}], create_graph={part == 'grad2_input'})")
            if part == "grad2_input":
                lines.append("w = torch.from_numpy(upstream(tuple(grad.shape))).to(grad.device, grad.dtype)")
                lines.append("(grad,) = torch.autograd.grad((grad * w).sum(), [t])")
            lines.append("result = grad.detach().double().cpu().numpy()")
            lines.append("result_dtype = str(grad.dtype).removeprefix('torch.')")
        return "\n".join(lines)

    def is_no_kernel(self, exc: Exception) -> bool:
        return NO_KERNEL.search(str(exc)) is not None

    def to_numpy(self, result):
        if not isinstance(result, self.torch.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).removeprefix("torch.")
        return result.detach().to("cpu", self.torch.float64).numpy(), dtype, tuple(result.shape)
