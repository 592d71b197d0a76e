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
"""

from __future__ import annotations

import os
import platform
import re
import warnings

import numpy as np

from conformance.adapters.base import Adapter, Api, ApiCall, FrameworkUnavailable, layout_buffer, layout_buffer_source
from conformance.core.model import Case, upstream_gradient

PLACES = {"cpu": "cpu", "gpu": "gpu:0"}
# "(NotFound) The kernel with key (CPU, Undefined(AnyLayout), float16) of kernel `kldiv_loss` is not registered."
NO_KERNEL = re.compile(r"The kernel with key \(\w+, .*\b(float16|bfloat16)\) of kernel `\w+` is not registered")


class PaddleAdapter(Adapter):
    name = "paddle"
    apis = (
        Api("paddle.nn.functional.kl_div", grads=("input", "target")),
        Api("paddle.nn.KLDivLoss", grads=("input", "target")),
    )
    known_devices = tuple(PLACES)

    def __init__(self) -> None:
        self.paddle = None
        self._device: str | None = None

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
        return tuple(self._tensor(values, dtype, case.layout, device)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def _use_device(self, device: str) -> None:
        """Paddle's global device, set besides each tensor's place, for anything Paddle creates on its own."""
        if device != self._device:
            self.paddle.set_device(PLACES[device])
            self._device = device

    def _tensor(self, values: np.ndarray, dtype: str, layout: str, device: str, differentiated: bool = False):
        buffer, view = layout_buffer(values, layout, swap=_swap_last_two)
        leaf = self.paddle.to_tensor(buffer, dtype=dtype, place=PLACES[device], stop_gradient=not differentiated)
        return view(leaf)

    def call(self, case: Case, api: Api) -> ApiCall:
        p = case.params
        if api.name == "paddle.nn.functional.kl_div":
            return ApiCall.function(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)
        return ApiCall.module(api.name, "x", "t", reduction=p.reduction, log_target=p.log_target)

    def gradient(self, case: Case, api: Api, device: str, part: str):
        """paddle.grad with the upstream gradient as grad_outputs; double backward with create_graph=True."""
        paddle = self.paddle
        self._use_device(device)
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, differentiated=part != "grad_target")
        t = self._tensor(case.target, case.dtype.target, case.layout, device, differentiated=part != "grad_input")
        out = self.invoke(case, api, (x, t))
        upstream = paddle.to_tensor(upstream_gradient(tuple(out.shape)), dtype=out.dtype, place=PLACES[device])
        (grad,) = paddle.grad([out], [t if part == "grad_target" else x], grad_outputs=[upstream],
                              allow_unused=True, create_graph=second)
        if not second or grad is None:
            return grad
        w = paddle.to_tensor(upstream_gradient(tuple(grad.shape)), dtype=grad.dtype, place=PLACES[device])
        (grad2,) = paddle.grad([(grad * w).sum()], [t], allow_unused=True)
        return grad2

    def is_no_kernel(self, exc: Exception) -> bool:
        return NO_KERNEL.search(str(exc)) is not None

    def repro_source(self, case: Case, api: Api, device: str, part: str) -> str:
        place = PLACES[device]

        def tensor(name, values, dtype, differentiated):
            ndim = np.ndim(values)
            view = {"contiguous": "", "strided": "[..., ::2]",
                    "transposed": f".transpose({list(range(ndim - 2)) + [ndim - 1, ndim - 2]})"}[case.layout]
            return (f"paddle.to_tensor({layout_buffer_source(name, case.layout)}, dtype={dtype!r}, place={place!r}, "
                    f"stop_gradient={not differentiated}){view}")
        lines = ["import paddle  # warns 'No ccache found' on stderr", ""]
        if part != "forward":
            lines += ["", "class MissingGradient(Exception):", "    \"\"\"paddle.grad gave no gradient (None).\"\"\"",
                      ""]
        lines += [f"paddle.set_device({place!r})",
                  f"x = {tensor('x_values', case.input, case.dtype.input, part != 'grad_target')}",
                  f"t = {tensor('t_values', case.target, case.dtype.target, part != 'grad_input')}",
                  f"out = {self.call(case, api).source()}"]
        if part == "forward":
            lines.append("result = out.astype('float32' if out.dtype == paddle.bfloat16 else out.dtype).numpy().astype(np.float64)")
        else:
            wrt = "t" if part == "grad_target" else "x"
            second = part == "grad2_input"
            lines.append(f"g = paddle.to_tensor(upstream(tuple(out.shape)), dtype=out.dtype, place={place!r})")
            lines.append(f"(grad,) = paddle.grad([out], [{wrt}], grad_outputs=[g], allow_unused=True, create_graph={second})")
            if second:
                lines.append(f"w = paddle.to_tensor(upstream(tuple(grad.shape)), dtype=grad.dtype, place={place!r})")
                lines.append("(grad,) = paddle.grad([(grad * w).sum()], [t], allow_unused=True)")
            missing = f"raise MissingGradient({f'{api.name} returned no gradient (None) for {part}'!r})"
            lines += ["if grad is None:  # the harness records this as MissingGradient", "    " + missing,
                      "result = grad.numpy().astype(np.float64)"]
        return "\n".join(lines)

    def to_numpy(self, result):
        if not isinstance(result, self.paddle.Tensor):
            raise TypeError(f"kl_div returned {type(result).__name__}, not a tensor")
        dtype = str(result.dtype).removeprefix("paddle.")
        host = result.detach().cpu()
        if dtype == "bfloat16":  # .numpy() gives its raw bits as uint16; float32 holds every bfloat16
            host = host.astype("float32")
        return host.numpy().astype(np.float64), dtype, tuple(result.shape)


def _swap_last_two(tensor):
    """A transposed view of the last two axes (Paddle's transpose takes the whole permutation)."""
    perm = list(range(tensor.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return tensor.transpose(perm)
