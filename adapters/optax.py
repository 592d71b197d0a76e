"""optax adapter (JAX): optax.losses.kl_divergence and kl_divergence_with_log_targets on cpu and gpu.

Quirks live here:
- Both functions sum the pointwise terms over `axis` (default -1) and take no reduction
  argument: one KL divergence per distribution (spec: dialects.distribution_sum, reduction
  none only). The adapter calls them with the default axis, as a user does. log_target is
  the choice of function, not an argument: kl_divergence takes probabilities,
  kl_divergence_with_log_targets log-probabilities
  (https://optax.readthedocs.io/en/latest/api/losses.html#optax.losses.kl_divergence).
- x64: JAX turns float64 into float32 unless x64 is enabled, silently for NumPy inputs.
  `load()` sets `jax_enable_x64` before any array exists (tox also sets JAX_ENABLE_X64=1),
  so float64 cases really run in float64, and the reproducers do the same.
- Layouts: a JAX array is an immutable value with no user-visible strides. A transposed or
  strided case is built as JAX users build one: the buffer goes to the device, and
  jnp.swapaxes or [..., ::2] takes the view. In eager mode that op materialises a new
  array, so the loss sees a default-layout array: these cases check JAX's transpose or
  slice followed by the loss, not a strided kernel path (none exists to check). They are
  run rather than called unsupported, because the values a user gets from them are real.
- Compiling: eager JAX compiles every primitive once per shape and dtype, which is most of a
  run. `load()` points JAX's persistent compilation cache into the harness's cache directory
  (adapters/jaxcache.py), so the next run reads the executables back; --no-cache turns it off.
- Modes: eager calls are what a user calls first. Mode `jit` makes the call through jax.jit with the
  arrays passed as arguments: arrays closed over would be constants XLA folds at compile time, which
  bypasses the flush-to-zero the compiled kernels apply. XLA fuses and reassociates a jitted call
  (reduced-precision sums differ from eager's). Gradients in `jit` are jax.vjp (and jax.grad of it)
  under jax.jit, the upstream passed as an argument too. One jitted function per API, call and part kind,
  so a signature compiles once; adapters/compiled.py checks every call was traced, since
  jax_disable_jit silently runs a jitted function eagerly.
- Gradients: jax.vjp with the upstream gradient; the second order differentiates that
  vjp with jax.grad (double backward through JAX's own autodiff).
- Devices: `cpu`, and `gpu` where jax reports a GPU backend (a CUDA jaxlib plugin).
"""

from __future__ import annotations

import platform

import numpy as np

from conformance.adapters import jaxcache
from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, construction_source,
                                       fill_value, layout_buffer, layout_buffer_source, numpy_source)
from conformance.adapters.compiled import jax_jit_gradient, jax_jit_repro_lines, jax_traced
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

JIT = "jit"


class OptaxAdapter(Adapter):
    name = "optax"
    apis = (
        Api("optax.losses.kl_divergence", grads=("input", "target"), log_target=False,
            dialect="distribution_sum", reductions=("none",)),
        Api("optax.losses.kl_divergence_with_log_targets", grads=("input", "target"), only_log_target=True,
            dialect="distribution_sum", reductions=("none",)),
    )
    known_devices = ("cpu", "gpu")
    modes = (Mode(JIT, "jax.jit of the call (and of its vjp), the arrays passed as arguments"),)

    def __init__(self) -> None:
        self.jax = self.jnp = self.optax = None
        self._compiled: dict = {}

    def load(self) -> None:
        try:
            import jax
            import jax.numpy as jnp
            import optax
        except Exception as exc:  # ImportError, or a jaxlib that does not match jax
            raise FrameworkUnavailable(f"cannot import optax: {type(exc).__name__}: {exc}") from None
        jax.config.update("jax_enable_x64", True)  # before any array: float64 stays float64
        jaxcache.enable(jax, self.compile_cache_dir, self.degraded)  # before anything compiles
        self.jax, self.jnp, self.optax = jax, jnp, optax

    def api_unavailable(self, api: Api) -> str | None:
        """optax before 0.1.8 has no public optax.losses: its kl_divergence lives in the private optax._src.loss,
        which no user calls, so the API is not run there (the reason says so)."""
        why = super().api_unavailable(api)
        if why and not hasattr(self.optax, "losses"):
            return (f"{why}: the public optax.losses came in optax 0.1.8; this release keeps kl_divergence in its "
                    "private optax._src.loss")
        return why

    def version(self) -> str:
        import jaxlib

        x64 = ", x64" if self.jax.config.jax_enable_x64 else ", x64 off: float64 runs as float32"
        return f"{self.optax.__version__} (jax {self.jax.__version__}, jaxlib {jaxlib.__version__}{x64})"

    def devices(self) -> tuple[str, ...]:
        return tuple(d for d in self.known_devices if self._platform_devices(d))

    def device_name(self, device: str) -> str:
        if device == "gpu":
            return self._platform_devices("gpu")[0].device_kind
        return platform.processor() or platform.machine()

    def _platform_devices(self, device: str) -> list:
        try:
            return self.jax.devices(device)
        except RuntimeError:  # "Unknown backend: 'gpu' requested, but no platforms ... are present"
            return []

    def build(self, case: Case, device: str):
        return tuple(self._array(values, dtype, case.layout, device, case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def _array(self, values: np.ndarray, dtype: str, layout: str, device: str, made: Construction = NUMPY_DEFAULT):
        """The case's values as a JAX array of `dtype` on `device`, the view taken by JAX (see the module doc).
        A construction case makes it with jnp.array of nested Python floats, jnp.full, or jnp.asarray of a NumPy
        array in its own dtype (the dtype named, or left to JAX: under x64, float64 for Python floats)."""
        jnp = self.jnp
        buffer, view = layout_buffer(values, layout, swap=lambda a: jnp.swapaxes(a, -1, -2))
        given = {} if made.inferred else {"dtype": jnp.dtype(dtype)}
        if made.source == "list":
            array = jnp.array(buffer.tolist(), **given)
        elif made.source == "factory":
            array = jnp.full(buffer.shape, fill_value(buffer), **given)
        elif made.inferred:
            array = jnp.asarray(numpy_source(buffer, dtype))
        else:
            array = buffer.astype(jnp.dtype(dtype))
        return view(self.jax.device_put(array, self._platform_devices(device)[0]))

    def call(self, case: Case, api: Api) -> ApiCall:
        """The default axis=-1 (one value per distribution); log_target is the choice of function."""
        return ApiCall.function(api.name, "x", "t")

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        if mode == EAGER:
            return super().invoke(case, api, inputs)
        call = self.call(case, api)
        return self._jit(call, "forward", lambda: call.resolve())(*inputs)

    def _jit(self, call: ApiCall, kind: str, body):
        """The jitted function of `call` for `kind` ("forward", "vjp", "grad2"), made once from `body()` (in the
        one mode, `jit`)."""
        key = (call, kind)
        if key not in self._compiled:
            self._compiled[key] = jax_traced(self.jax, body())
        return self._compiled[key]

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        """jax.vjp of the call with the upstream gradient; grad2_input is jax.grad, with respect to target,
        of sum(w * grad_input). In `jit` both run under jax.jit."""
        jax, jnp = self.jax, self.jnp
        x, t = self._cache.get(case, device, self.build)  # JAX arrays are immutable: shared safely
        call = self.call(case, api)
        loss = call.resolve()  # the function itself: jax.vjp differentiates what the run calls
        if mode != EAGER:
            return jax_jit_gradient(jax, loss, x, t, part, lambda kind, body: self._jit(call, kind, body))
        out, pullback = jax.vjp(loss, x, t)
        upstream = jnp.asarray(upstream_gradient(tuple(out.shape)), dtype=out.dtype)
        grad_input, grad_target = pullback(upstream)
        if part == "grad_input":
            return grad_input
        if part == "grad_target":
            return grad_target
        w = jnp.asarray(upstream_gradient(tuple(grad_input.shape)), dtype=grad_input.dtype)

        def weighted_grad_input(b):
            return jnp.sum(jax.vjp(loss, x, b)[1](upstream)[0] * w)
        return jax.grad(weighted_grad_input)(t)

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        view = {"contiguous": "", "transposed": "jnp.swapaxes({}, -1, -2)", "strided": "{}[..., ::2]"}[case.layout]

        def array(name: str, dtype: str) -> str:
            made = case.construction
            made_source = construction_source(name, case.input if name[0] == "x" else case.target, case, dtype)
            given = "" if made.inferred else f", dtype=jnp.{dtype}"
            made_source = {"list": f"jnp.array({made_source}{given})", "factory": f"jnp.full({made_source}{given})",
                           "numpy": f"jnp.asarray({made_source})"}[made.source]
            placed = (f"jax.device_put({layout_buffer_source(name, case.layout)}.astype(jnp.{dtype}), device)"
                      if made.is_default else f"jax.device_put({made_source}, device)")
            return view.format(placed) if view else placed
        lines = ["import jax",
                 "jax.config.update('jax_enable_x64', True)  # else float64 is silently float32",
                 "import jax.numpy as jnp",
                 "import optax",
                 "",
                 f"device = jax.devices({device!r})[0]",
                 f"x = {array('x_values', case.dtype.input)}",
                 f"t = {array('t_values', case.dtype.target)}",
                 f"loss = lambda x, t: {self.call(case, api).source()}  # default axis=-1: one value per distribution"]
        if mode != EAGER:
            return "\n".join(lines + jax_jit_repro_lines(part))
        lines.append("out = loss(x, t)")
        if part == "forward":
            lines.append("result_dtype = str(out.dtype)  # as the run records it")
            lines.append("result = np.asarray(out).astype(np.float64)")
            return "\n".join(lines)
        lines += ["g = jnp.asarray(upstream(out.shape), dtype=out.dtype)",
                  "grad_input, grad_target = jax.vjp(loss, x, t)[1](g)"]
        if part == "grad2_input":
            lines += ["w = jnp.asarray(upstream(grad_input.shape), dtype=grad_input.dtype)",
                      "grad = jax.grad(lambda b: jnp.sum(jax.vjp(loss, x, b)[1](g)[0] * w))(t)"]
        else:
            lines.append(f"grad = {part}")
        lines.append("result_dtype = str(grad.dtype)  # as the run records it")
        lines.append("result = np.asarray(grad).astype(np.float64)")
        return "\n".join(lines)

    def to_numpy(self, result):
        if not isinstance(result, self.jax.Array):
            raise TypeError(f"{type(result).__name__} returned, not a jax.Array")
        value = np.asarray(result)  # waits for the computation (JAX dispatches asynchronously)
        return value.astype(np.float64), str(result.dtype), tuple(result.shape)

