"""MLX adapter: mlx.nn.losses.kl_div_loss on cpu and gpu.

Quirks live here:
- kl_div_loss(inputs, targets, axis=-1, reduction="none") takes both arguments as
  log-probabilities and sums over the distribution axis before reducing (spec:
  dialects.distribution_sum); cases with a probability-space target are unsupported
  (https://ml-explore.github.io/mlx/build/html/python/nn/_autosummary_functions/mlx.nn.losses.kl_div_loss.html).
  It is called with its default axis, and the case's reduction string is passed as is.
- mx.array(a_float64_numpy_array) silently gives float32: arrays are built with an
  explicit dtype, which is how float64 reaches the CPU kernels.
- MLX is lazy: a result is evaluated inside the observed call, so its errors and its
  time belong to that call. Inputs are evaluated when built, so a transposed or
  strided layout is a real strided array over its buffer, not a copy.
- Arrays live in unified memory; the device is the stream an operation runs on.
  MLX has no float64 on a GPU ("float64 is not supported on the GPU"): no kernel.
- Mode `compile`: mx.compile of the call, and of the gradient function (mx.vjp, mx.grad of it), the arrays
  and the upstream passed as arguments (a compiled function's closed-over arrays are constants). One
  compiled function per call, part kind and device, so a signature compiles once. mx.disable_compile or
  MLX_DISABLE_COMPILE silently runs a compiled function eagerly: adapters/compiled.py checks each call was
  traced (a traced body's arrays are placeholders that refuse mx.eval).
"""

from __future__ import annotations

import platform

import numpy as np

from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, construction_source,
                                       fill_value, layout_buffer, numpy_source)
from conformance.adapters.compiled import Traced
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

API = "mlx.nn.losses.kl_div_loss"
COMPILE = "compile"
NO_KERNEL_MARKERS = ("is not supported on the GPU",)  # MLX's array constructor for float64 on a GPU stream
VIEWS = {"contiguous": "", "transposed": ".swapaxes(-1, -2)", "strided": "[..., ::2]"}


class MlxAdapter(Adapter):
    name = "mlx"
    apis = (Api(API, grads=("input", "target"), dialect="distribution_sum", only_log_target=True),)
    known_devices = ("cpu", "gpu")
    modes = (Mode(COMPILE, "mx.compile of the call (and of its vjp), the arrays passed as arguments"),)

    def __init__(self) -> None:
        self.mx = None
        self._device = "cpu"
        self._compiled: dict = {}

    def load(self) -> None:
        try:
            import mlx.core as mx
            import mlx.nn.losses  # noqa: F401  (the module call()'s path resolves in)
        except Exception as exc:  # `pip install mlx` without mlx[cpu] on Linux: ImportError libmlx.so
            raise FrameworkUnavailable(f"cannot import mlx: {type(exc).__name__}: {exc}") from None
        self.mx = mx

    def version(self) -> str:
        return self.mx.__version__

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "gpu") if self.mx.is_available(self.mx.gpu) else ("cpu",)

    def device_name(self, device: str) -> str:
        info = self.mx.device_info() if device == "gpu" else {}
        return str(info.get("device_name") or platform.processor() or platform.machine())

    def _stream(self, device: str):
        return self.mx.stream(self.mx.gpu if device == "gpu" else self.mx.cpu)

    def build(self, case: Case, device: str):
        with self._stream(device):
            inputs = tuple(self._array(values, dtype, case.layout, case.construction)
                           for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))
            self.mx.eval(*inputs)
        return inputs

    def _array(self, values: np.ndarray, dtype: str, layout: str, made: Construction = NUMPY_DEFAULT):
        """The array as the case's construction makes it: mx.array of a NumPy array or of nested Python floats, or
        mx.full; with the dtype named, or left to MLX (float32 for Python floats, and for a NumPy float64 array)."""
        mx = self.mx
        buffer, view = layout_buffer(values, layout, swap=lambda a: a.swapaxes(-1, -2))
        given = {} if made.inferred else {"dtype": self._dtype(dtype)}
        if made.source == "list":
            return view(mx.array(buffer.tolist(), **given))
        if made.source == "factory":
            return view(mx.full(buffer.shape, fill_value(buffer), **given))
        return view(mx.array(numpy_source(buffer, dtype) if made.inferred else buffer, **given))

    def _dtype(self, name: str):
        return getattr(self.mx, "bool_" if name == "bool" else name)

    def run(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        self._device = device  # invoke() is not told the device; its stream is the run's
        return super().run(case, api, device, part, mode)

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        x, t = inputs
        with self._stream(self._device):
            if mode == EAGER:
                result = self.call(case, api).apply(x, t)
            else:
                call = self.call(case, api)
                result = self._compile(call, "forward", self._device, call.bound)(x, t)
            self.mx.eval(result)
        return result

    def _compile(self, call: ApiCall, kind: str, device: str, body):
        """The compiled function of `call` for `kind` on `device`, made once from `body()` (in the one mode,
        `compile`)."""
        key = (call, kind, device)
        if key not in self._compiled:
            self._compiled[key] = Traced(body(), self.mx.compile, self._tracing, "mx.compile")
        return self._compiled[key]

    def _tracing(self, args) -> bool:
        """Whether mx.compile is tracing the body: a placeholder array refuses evaluation, a real one does not."""
        try:
            self.mx.eval(args[0])
        except ValueError:  # "[eval] Attempting to eval an array during function transformations like compile"
            return True
        return False

    def call(self, case: Case, api: Api) -> ApiCall:
        """The default axis, and the case's reduction string as is."""
        return ApiCall.function(API, "x", "t", reduction=case.params.reduction)

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        """mx.vjp with the upstream gradient; grad2_input differentiates sum(w * grad_input) with respect to
        target through that vjp (MLX's transforms compose)."""
        mx = self.mx
        x, t = self._cache.get(case, device, self.build)  # MLX arrays are immutable: the forward's inputs serve
        call = self.call(case, api)
        loss = call.apply
        with self._stream(device):
            out = loss(x, t)  # the shape is known before evaluation
            upstream = mx.array(upstream_gradient(tuple(out.shape)), dtype=out.dtype)
            if mode != EAGER:
                grad = self._compiled_gradient(call, loss, device, part, x, t, upstream)
                mx.eval(grad)
                return grad

            def grad_input(b):
                return mx.vjp(lambda a: loss(a, b), [x], [upstream])[1][0]
            if part == "grad_input":
                grad = grad_input(t)
            elif part == "grad_target":
                grad = mx.vjp(lambda b: loss(x, b), [t], [upstream])[1][0]
            else:
                w = mx.array(upstream_gradient(tuple(x.shape)), dtype=x.dtype)
                grad = mx.grad(lambda b: mx.sum(w * grad_input(b)))(t)
            mx.eval(grad)
        return grad

    def _compiled_gradient(self, call: ApiCall, loss, device: str, part: str, x, t, upstream):
        """The gradient as in eager, the whole of it (the vjp, and mx.grad of it) one compiled function of the
        arrays, the upstream and the weights."""
        mx = self.mx

        def grad_input(a, b, g):
            return mx.vjp(lambda c: loss(c, b), [a], [g])[1][0]
        if part == "grad_input":
            return self._compile(call, part, device, lambda: grad_input)(x, t, upstream)
        if part == "grad_target":
            def grad_target(a, b, g):
                return mx.vjp(lambda c: loss(a, c), [b], [g])[1][0]
            return self._compile(call, part, device, lambda: grad_target)(x, t, upstream)
        w = mx.array(upstream_gradient(tuple(x.shape)), dtype=x.dtype)

        def grad2(a, b, g, v):
            return mx.grad(lambda c: mx.sum(v * grad_input(a, c, g)))(b)
        return self._compile(call, part, device, lambda: grad2)(x, t, upstream, w)

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        return any(m in str(exc) for m in NO_KERNEL_MARKERS)

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        view = VIEWS[case.layout]

        def array(name, values, dtype):
            source = construction_source(name, values, case, dtype)
            given = "" if case.construction.inferred else f", dtype=mx.{'bool_' if dtype == 'bool' else dtype}"
            return f"mx.{'full' if case.construction.source == 'factory' else 'array'}({source}{given}){view}"
        lines = ["import mlx.core as mx",
                 "import mlx.nn.losses", "",
                 f"mx.set_default_device(mx.{device})",
                 f"x = {array('x_values', case.input, case.dtype.input)}"
                 + ("  # explicit dtype: mx.array(float64 NumPy) is float32" if case.construction.is_default else ""),
                 f"t = {array('t_values', case.target, case.dtype.target)}",
                 f"loss = lambda x, t: {self.call(case, api).source()}",
                 "out = loss(x, t)"]
        if mode != EAGER:
            lines += self._repro_compiled(part)
        elif part == "forward":
            lines.append("grad = out")
        else:
            lines.append("g = mx.array(upstream(tuple(out.shape)), dtype=out.dtype)")
            lines.append("grad_input = lambda b: mx.vjp(lambda a: loss(a, b), [x], [g])[1][0]")
            if part == "grad_input":
                lines.append("grad = grad_input(t)")
            elif part == "grad_target":
                lines.append("grad = mx.vjp(lambda b: loss(x, b), [t], [g])[1][0]")
            else:
                lines.append("w = mx.array(upstream(tuple(x.shape)), dtype=x.dtype)")
                lines.append("grad = mx.grad(lambda b: mx.sum(w * grad_input(b)))(t)")
        lines.append("result_dtype = str(grad.dtype).removeprefix('mlx.core.')  # as the run records it")
        lines.append("result = np.array(grad.astype(mx.float32) if grad.dtype == mx.bfloat16 else grad).astype(np.float64)")
        return "\n".join(lines)

    @staticmethod
    def _repro_compiled(part: str) -> list[str]:
        """The lines of mode `compile` that leave the part's value in `grad`: mx.compile of the call or of the
        gradient function, every array an argument (closed-over arrays are constants)."""
        if part == "forward":
            return ["grad = mx.compile(loss)(x, t)  # the arrays passed as arguments"]
        lines = ["g = mx.array(upstream(tuple(out.shape)), dtype=out.dtype)",
                 "grad_input = lambda a, b, g: mx.vjp(lambda c: loss(c, b), [a], [g])[1][0]"]
        if part == "grad_input":
            return lines + ["grad = mx.compile(grad_input)(x, t, g)  # the arrays passed as arguments"]
        if part == "grad_target":
            return lines + ["grad_target = lambda a, b, g: mx.vjp(lambda c: loss(a, c), [b], [g])[1][0]",
                            "grad = mx.compile(grad_target)(x, t, g)  # the arrays passed as arguments"]
        return lines + ["w = mx.array(upstream(tuple(x.shape)), dtype=x.dtype)",
                        "grad2 = lambda a, b, g, v: mx.grad(lambda c: mx.sum(v * grad_input(a, c, g)))(b)",
                        "grad = mx.compile(grad2)(x, t, g, w)  # the arrays passed as arguments"]

    def to_numpy(self, result):
        mx = self.mx
        if not isinstance(result, mx.array):
            raise TypeError(f"kl_div_loss returned {type(result).__name__}, not an array")
        dtype = str(result.dtype).removeprefix("mlx.core.")
        if result.dtype == mx.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
            with mx.stream(mx.cpu):
                result = result.astype(mx.float32)
        return np.array(result).astype(np.float64), dtype, tuple(result.shape)
