"""MindSpore adapter: mint.nn.KLDivLoss, mint.nn.functional.kl_div, ops.kl_div and nn.KLDivLoss.

Quirks live here:
- The mint APIs are documented for Ascend only; on CPU and GPU MindSpore raises
  "The kernel KLDiv unregistered", reported as `unsupported` (no kernel for this
  device) with MindSpore's message (https://www.mindspore.cn/docs/en/master/api_python/mint/mindspore.mint.nn.KLDivLoss.html).
- ops.kl_div(logits, labels, reduction) and nn.KLDivLoss(reduction) have no
  log_target argument; no API takes size_average/reduce.
- The device is chosen through MindSpore's context: device_target CPU, GPU or Ascend.
- Ops run synchronously (mindspore.runtime.launch_blocking), so an error is raised by
  the call that caused it; asynchronously, errors of a failed call (a mint call with
  no kernel) surfaced in later calls and made runs nondeterministic.
"""

from __future__ import annotations

import numpy as np

from conformance.adapters.base import Adapter, Api, ApiCall, FrameworkUnavailable, layout_buffer, layout_buffer_source
from conformance.core.model import Case, upstream_gradient

DEVICE_TARGETS = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}
NO_KERNEL_MARKERS = ("unregistered",)  # "The kernel KLDiv unregistered."


class MindSporeAdapter(Adapter):
    name = "mindspore"
    apis = (
        Api("mindspore.mint.nn.KLDivLoss", grads=("input", "target")),
        Api("mindspore.mint.nn.functional.kl_div", grads=("input", "target")),
        # no double backward: "Illegal primitive KLDivLossGrad's bprop not defined" (mindspore 2.10.0)
        Api("mindspore.ops.kl_div", grads=("input", "target"), log_target=False, second_order=False),
        Api("mindspore.nn.KLDivLoss", grads=("input", "target"), log_target=False, second_order=False),
    )
    known_devices = tuple(DEVICE_TARGETS)

    def __init__(self) -> None:
        self.ms = None
        self._device: str | None = None

    def load(self) -> None:
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
        return tuple(self._tensor(values, dtype, case.layout)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def call(self, case: Case, api: Api) -> ApiCall:
        """ops.kl_div and nn.KLDivLoss take no log_target (their Api rows say so)."""
        p = case.params
        kwargs = dict(reduction=p.reduction, log_target=p.log_target) if api.log_target else dict(reduction=p.reduction)
        if api.name.endswith(".KLDivLoss"):
            return ApiCall.module(api.name, "x", "t", **kwargs)
        return ApiCall.function(api.name, "x", "t", **kwargs)

    def gradient(self, case: Case, api: Api, device: str, part: str):
        """mindspore.grad of sum(loss * upstream): the vector-Jacobian product with the upstream gradient."""
        x, t = self.build(case, device)
        out = self.invoke(case, api, (x, t))
        ms = self.ms
        upstream = ms.Tensor(upstream_gradient(tuple(out.shape)), out.dtype)
        weighted = lambda a, b: (self.invoke(case, api, (a, b)) * upstream).sum()
        if part != "grad2_input":
            return ms.grad(weighted, grad_position=0 if part == "grad_input" else 1)(x, t)
        w = ms.Tensor(upstream_gradient(tuple(x.shape)), x.dtype)
        grad_input = ms.grad(weighted, grad_position=0)
        return ms.grad(lambda a, b: (grad_input(a, b) * w).sum(), grad_position=1)(x, t)  # double backward

    def is_no_kernel(self, exc: Exception) -> bool:
        return any(m in str(exc) for m in NO_KERNEL_MARKERS)

    def _use_device(self, device: str) -> None:
        if device != self._device:
            self.ms.set_context(device_target=DEVICE_TARGETS[device])
            self._device = device

    def _tensor(self, values: np.ndarray, dtype: str, layout: str):
        buffer, view = layout_buffer(values, layout, swap=lambda t: t.swapaxes(-1, -2))
        if dtype == "bfloat16":  # float32 holds these values exactly
            return view(self.ms.Tensor(buffer.astype(np.float32), self.ms.float32).astype(self.ms.bfloat16))
        return view(self.ms.Tensor(buffer, getattr(self.ms, dtype)))

    def repro_source(self, case: Case, api: Api, device: str, part: str) -> str:
        view = {"contiguous": "", "transposed": ".swapaxes(-1, -2)", "strided": "[..., ::2]"}[case.layout]

        def tensor(name, dtype):
            if dtype == "bfloat16":
                return (f"ms.Tensor({layout_buffer_source(name, case.layout)}.astype(np.float32), ms.float32)"
                        f".astype(ms.bfloat16){view}")
            return f"ms.Tensor({layout_buffer_source(name, case.layout)}, ms.{dtype}){view}"
        lines = ["import mindspore",
                 "import mindspore as ms", "",
                 f"ms.set_context(device_target={DEVICE_TARGETS[device]!r})",
                 f"x = {tensor('x_values', case.dtype.input)}",
                 f"t = {tensor('t_values', case.dtype.target)}",
                 f"kl = lambda x, t: {self.call(case, api).source()}",
                 "out = kl(x, t)"]
        if part == "forward":
            lines.append("result = out.astype(ms.float32 if out.dtype == ms.bfloat16 else out.dtype).asnumpy().astype(np.float64)")
        else:
            lines.append("g = ms.Tensor(upstream(tuple(out.shape)), out.dtype)")
            lines.append("weighted = lambda a, b: (kl(a, b) * g).sum()")
            if part == "grad2_input":
                lines.append("w = ms.Tensor(upstream(tuple(x.shape)), x.dtype)")
                lines.append("grad_input = ms.grad(weighted, grad_position=0)")
                lines.append("grad = ms.grad(lambda a, b: (grad_input(a, b) * w).sum(), grad_position=1)(x, t)")
            else:
                lines.append(f"grad = ms.grad(weighted, grad_position={0 if part == 'grad_input' else 1})(x, t)")
            lines.append("result = grad.asnumpy().astype(np.float64)")
        return "\n".join(lines)

    def to_numpy(self, result):
        if not isinstance(result, self.ms.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).lower()
        if dtype == "bfloat16":
            result = result.astype(self.ms.float32)
        return result.asnumpy().astype(np.float64), dtype, tuple(result.shape)
