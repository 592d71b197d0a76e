"""Keras 3 adapter: keras.losses.KLDivergence and keras.losses.kl_divergence on the backend of its process.

Quirks live here:
- Keras fixes its backend when it is imported, from KERAS_BACKEND (else ~/.keras/keras.json, else
  tensorflow; https://keras.io/getting_started/#configuring-your-backend). One process runs one
  backend, so each backend is its own tox environment, and the devices name the backend
  (`tensorflow:cpu`, `jax:cpu`, `torch:cpu`; `tensorflow:gpu`, `jax:gpu`, `torch:cuda` where
  present): a merged report has one column per backend.
- Both APIs take probabilities, called as (y_true, y_pred) = (target, input) (spec: dialects.keras).
  kl_divergence has no reduction (the values per distribution); the class maps the spec's `none`,
  `mean` and `sum` to its `reduction=None`, its default "sum_over_batch_size" and "sum", and passes
  any other string as given, so an unknown one meets the class's own check.
- Inputs are built as the backend's own tensors of the case's dtypes (keras.ops.convert_to_tensor in
  the device's scope), so no NumPy-to-floatx conversion stands between the case and the call. The
  class still casts both arguments to its `dtype`, keras.config.floatx() (float32) by default, as its
  documentation says; the adapter calls it as a user does, with the default, so float16, bfloat16
  and float64 cases come back float32 (a finding, see spec/profiles/keras.yaml).
- JAX: float64 is silently float32 unless x64 is on; load() enables it before Keras imports JAX
  (tox also sets JAX_ENABLE_X64=1), and points JAX's persistent compilation cache into the
  harness's cache directory (adapters/jaxcache.py: eager JAX compiles each new shape). JAX and
  TensorFlow tensors have no user-visible strides: a transposed or strided layout is the backend's swapaxes or slice of the buffer, a new tensor
  (as in adapters/optax.py); on torch it is a real strided view.
- Gradients through the backend's own autodiff: tf.GradientTape (nested for the second order),
  jax.vjp (jax.grad of that vjp), torch.autograd.grad (create_graph=True).
- Mode `jit`: the call compiled as each backend compiles (Keras' own jit_compile=True does the same):
  tf.function(jit_compile=True), jax.jit, torch.compile (Inductor, fullgraph=True, static shapes), the
  tensors passed as arguments. Gradients: the tapes inside the tf.function, jax.vjp under jax.jit; on torch
  the compiled forward differentiated by autograd (Dynamo does not trace torch.autograd.grad), whose
  compiled backward takes no double backward. One compiled function per call and part kind. Each call
  proves it compiled: tf.function and jax.jit trace the function (tf.config.run_functions_eagerly and
  jax_disable_jit silently run it eagerly; adapters/compiled.py checks), and on torch the adapter's
  backend counts the runs of the graph Inductor compiled: with fullgraph=True a graph break or Dynamo's
  recompile limit raises (FailOnRecompileLimitHit) rather than running eagerly, but
  torch.compiler.set_stance("force_eager") still runs it eagerly without a word.
"""

from __future__ import annotations

import os
import platform

import numpy as np

from conformance.adapters import jaxcache, kerascode
from conformance.adapters.base import (Adapter, Api, ApiCall, FrameworkUnavailable, Mode, fill_value, layout_buffer,
                                       numpy_source)
from conformance.adapters.compiled import TorchCompiled, Traced, jax_jit_gradient, jax_traced, keep_inductor_cache
from conformance.core.case import NUMPY_DEFAULT, Case, Construction
from conformance.core.model import EAGER, upstream_gradient

CLASS, FUNCTION = "keras.losses.KLDivergence", "keras.losses.kl_divergence"
REDUCTIONS = {"none": None, "mean": "sum_over_batch_size", "sum": "sum"}  # spec -> KLDivergence(reduction=)
ACCELERATORS = {"tensorflow": "gpu", "jax": "gpu", "torch": "cuda"}  # each backend's own word
NO_KERNEL_MARKERS = ("No registered", "OpKernel", "not implemented for")  # TF's and torch's "no kernel" words
JIT = "jit"


def keras_reduction(reduction: str):
    """The class's reduction argument for the spec's `reduction`; any other string as given."""
    return REDUCTIONS.get(reduction, reduction)


class KerasAdapter(Adapter):
    name = "keras"
    apis = (
        Api(CLASS, grads=("input", "target"), log_target=False, dialect="keras", prob_input=True,
            implementation=FUNCTION),
        Api(FUNCTION, grads=("input", "target"), log_target=False, dialect="keras", prob_input=True,
            reductions=("none",)),
    )
    known_devices = tuple(f"{backend}:{kind}" for backend, accel in ACCELERATORS.items() for kind in ("cpu", accel))
    modes = (Mode(JIT, "the backend's compiler: tf.function(jit_compile=True), jax.jit or torch.compile"),)

    def __init__(self) -> None:
        self.keras = None
        self.backend = ""
        self._device = ""
        self._compiled: dict = {}

    def load(self) -> None:
        jax_first = os.environ.get("KERAS_BACKEND") == "jax"  # then JAX is set up before Keras imports it
        if jax_first:
            try:
                import jax
            except Exception as exc:
                raise FrameworkUnavailable(f"KERAS_BACKEND=jax, but jax cannot be imported: "
                                           f"{type(exc).__name__}: {exc}") from None
            jax.config.update("jax_enable_x64", True)  # before Keras makes any array: float64 stays float64
            jaxcache.enable(jax, self.compile_cache_dir, self.degraded)  # before anything compiles
        keep_inductor_cache(self.compile_cache_dir)  # torch.compile's, on the torch backend; before torch loads
        try:
            import keras
        except Exception as exc:  # ImportError, or the backend Keras picked cannot be imported
            chosen = os.environ.get("KERAS_BACKEND")
            backend = f"KERAS_BACKEND={chosen}" if chosen else \
                "no KERAS_BACKEND set: Keras takes the backend its keras.json names ($KERAS_HOME, else ~/.keras), " \
                "else tensorflow"
            raise FrameworkUnavailable(f"cannot import keras ({backend}): {type(exc).__name__}: {exc}") from None
        self.keras, self.backend = keras, keras.backend.backend()
        if self.backend == "jax":  # chosen by ~/.keras/keras.json, not KERAS_BACKEND: x64 now, before any case
            self._module().config.update("jax_enable_x64", True)
            if not jax_first:  # else enabled above
                jaxcache.enable(self._module(), self.compile_cache_dir, self.degraded)
        if self.backend not in ACCELERATORS:
            raise FrameworkUnavailable(f"Keras backend {self.backend!r} is not one this adapter runs "
                                       f"(KERAS_BACKEND one of {list(ACCELERATORS)})")
        self._device = f"{self.backend}:cpu"  # invoke() outside run() (bench's bare loop) calls on the CPU

    def _module(self):
        return __import__(self.backend)

    def version(self) -> str:
        extra = ""
        if self.backend == "jax":
            extra = ", x64" if self._module().config.jax_enable_x64 else ", x64 off: float64 runs as float32"
        return f"{self.keras.__version__} ({self.backend} {self._module().__version__}{extra})"

    def devices(self) -> tuple[str, ...]:
        return (f"{self.backend}:cpu",) + ((f"{self.backend}:{ACCELERATORS[self.backend]}",)
                                           if self._has_accelerator() else ())

    def _has_accelerator(self) -> bool:
        module = self._module()
        if self.backend == "tensorflow":
            return bool(module.config.list_physical_devices("GPU"))
        if self.backend == "torch":
            return module.cuda.is_available()
        try:
            return bool(module.devices("gpu"))
        except RuntimeError:  # "Unknown backend: 'gpu' requested, but no platforms ... are present"
            return False

    def device_name(self, device: str) -> str:
        if self._keras_device(device) == "cpu:0":
            return platform.processor() or platform.machine()
        module = self._module()
        if self.backend == "torch":
            return module.cuda.get_device_name()
        if self.backend == "jax":
            return module.devices("gpu")[0].device_kind
        details = module.config.experimental.get_device_details(module.config.list_physical_devices("GPU")[0])
        return details.get("device_name", "GPU")

    def _keras_device(self, device: str) -> str:
        """Keras' name ("cpu:0" or "gpu:0"; Keras turns gpu into cuda for torch) for a device of ours. A bare
        "cpu" (the CLI's default for `repro`) is this backend's CPU; another backend's device is refused."""
        backend, _, kind = device.rpartition(":")
        own = self._backend_of(device)
        if backend not in ("", own) or own not in ACCELERATORS or kind not in ("cpu", ACCELERATORS[own]):
            raise ValueError(f"device {device!r} is not one of the {own or 'loaded'} backend's "
                             f"{self.devices() if self.keras is not None else self.known_devices}")
        return "cpu:0" if kind == "cpu" else "gpu:0"

    def _backend_of(self, device: str) -> str:
        """The loaded backend; before loading (a run's reproducers are written without Keras), the one
        the device names ("jax:cpu")."""
        return self.backend or device.rpartition(":")[0]

    def _scope(self, device: str):
        return self.keras.device(self._keras_device(device))

    def _tensor(self, values: np.ndarray, dtype: str, layout: str, device: str, requires_grad: bool = False,
                made: Construction = NUMPY_DEFAULT):
        """The case's values as a tensor of the backend of `dtype` on `device`, in `layout`: converted from a NumPy
        array or from nested Python floats, or made by keras.ops.full; the dtype named, or left to Keras."""
        ops = self.keras.ops
        buffer, view = layout_buffer(values, layout, swap=lambda a: ops.swapaxes(a, -1, -2))
        given = None if made.inferred else dtype
        with self._scope(device):
            if made.source == "factory":
                leaf = ops.full(buffer.shape, fill_value(buffer), dtype=given)
            else:
                data = buffer.tolist() if made.source == "list" else numpy_source(buffer, dtype) if made.inferred \
                    else buffer
                leaf = ops.convert_to_tensor(data, dtype=given)
            if requires_grad:  # torch only: a leaf that records, its view is what the loss sees
                leaf.requires_grad_(True)
            return view(leaf)

    def build(self, case: Case, device: str):
        return tuple(self._tensor(values, dtype, case.layout, device, made=case.construction)
                     for values, dtype in ((case.input, case.dtype.input), (case.target, case.dtype.target)))

    def call(self, case: Case, api: Api) -> ApiCall:
        """Called as (y_true, y_pred) = (target, input); the class with the spec's reduction in Keras' words."""
        if api.name == FUNCTION:
            return ApiCall.function(FUNCTION, "t", "x")
        return ApiCall.module(CLASS, "t", "x", reduction=keras_reduction(case.params.reduction))

    def _loss(self, case: Case, api: Api):
        """The call as a function of (input, target)."""
        return self.call(case, api).bound()

    def run(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        self._device = device  # invoke() is not told the device; the call runs in its scope
        return super().run(case, api, device, part, mode)

    def invoke(self, case: Case, api: Api, inputs, mode: str = EAGER):
        x, t = inputs
        with self._scope(self._device):
            if mode == EAGER:
                return self._loss(case, api)(x, t)
            return self._compile(case, api, "forward", self._device, lambda: self._loss(case, api))(x, t)

    def _compile(self, case: Case, api: Api, kind: str, device: str, body):
        """The backend's compiled function of the call for `kind` on `device`, made once from `body()` (in the one
        mode, `jit`)."""
        key = (self.call(case, api), kind, device)
        if key not in self._compiled:
            module = self._module()
            if self.backend == "tensorflow":
                self._compiled[key] = Traced(body(), lambda f: module.function(f, jit_compile=True),
                                             lambda args: not module.executing_eagerly(),
                                             "tf.function(jit_compile=True)")
            elif self.backend == "jax":
                self._compiled[key] = jax_traced(module, body())
            else:
                self._compiled[key] = TorchCompiled(module, body())
        return self._compiled[key]

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER):
        loss = self._loss(case, api)
        with self._scope(device):
            if mode != EAGER:
                return getattr(self, f"_jit_gradient_{self.backend}")(case, api, loss, device, part)
            return getattr(self, f"_gradient_{self.backend}")(case, loss, device, part)

    def _jit_gradient_tensorflow(self, case: Case, api: Api, loss, device: str, part: str):
        """The eager tapes inside tf.function(jit_compile=True), the upstream and weights passed as arguments;
        the compiled forward gives the upstream's shape."""
        tf = self._module()
        x, t = self._cache.get(case, device, self.build)
        out = self._compile(case, api, "forward", device, lambda: loss)(x, t)
        upstream = tf.constant(upstream_gradient(tuple(out.shape)), dtype=out.dtype)

        def first(a, b, g):
            with tf.GradientTape() as tape:
                tape.watch([a, b])
                value = loss(a, b)
            return tape.gradient(value, [a, b], output_gradients=g)
        grad_input, grad_target = self._compile(case, api, "grad", device, lambda: first)(x, t, upstream)
        if part != "grad2_input" or grad_input is None:
            return grad_input if part != "grad_target" else grad_target

        def second(a, b, g, w):
            with tf.GradientTape() as outer:
                outer.watch(b)
                with tf.GradientTape() as inner:
                    inner.watch([a, b])
                    value = loss(a, b)
                weighted = tf.reduce_sum(inner.gradient(value, a, output_gradients=g) * w)
            return outer.gradient(weighted, b)
        w = tf.constant(upstream_gradient(tuple(grad_input.shape)), dtype=grad_input.dtype)
        return self._compile(case, api, "grad2", device, lambda: second)(x, t, upstream, w)

    def _jit_gradient_jax(self, case: Case, api: Api, loss, device: str, part: str):
        """jax.vjp (jax.grad of it) under jax.jit, as optax's mode does (adapters/compiled.py)."""
        x, t = self._cache.get(case, device, self.build)
        return jax_jit_gradient(self._module(), loss, x, t, part,
                                lambda kind, body: self._compile(case, api, kind, device, body))

    def _jit_gradient_torch(self, case: Case, api: Api, loss, device: str, part: str):
        """The eager gradient of the compiled forward: autograd runs the backward Inductor compiled with it."""
        return self._gradient_torch(case, self._compile(case, api, "forward", device, lambda: loss), device, part)

    def _gradient_tensorflow(self, case: Case, loss, device: str, part: str):
        """tf.GradientTape with the upstream as output_gradients; grad2_input is an outer tape's gradient,
        with respect to target, of sum(w * grad_input)."""
        tf = self._module()
        x, t = self._cache.get(case, device, self.build)  # TF tensors are immutable: the forward's serve
        with tf.GradientTape() as outer:
            outer.watch(t)
            with tf.GradientTape() as inner:
                inner.watch([x, t])
                out = loss(x, t)
            upstream = tf.constant(upstream_gradient(tuple(out.shape)), dtype=out.dtype)
            wrt = t if part == "grad_target" else x
            grad = inner.gradient(out, wrt, output_gradients=upstream)
            if part != "grad2_input" or grad is None:
                return grad
            weighted = tf.reduce_sum(grad * tf.constant(upstream_gradient(tuple(grad.shape)), dtype=grad.dtype))
        return outer.gradient(weighted, t)

    def _gradient_jax(self, case: Case, loss, device: str, part: str):
        """jax.vjp with the upstream; grad2_input is jax.grad, with respect to target, of sum(w * grad_input)."""
        jax, jnp = self._module(), self._module().numpy
        x, t = self._cache.get(case, device, self.build)  # JAX arrays are immutable: shared safely
        out, pullback = jax.vjp(loss, x, t)
        upstream = jnp.asarray(upstream_gradient(tuple(out.shape)), dtype=out.dtype)
        grad_input, grad_target = pullback(upstream)
        if part != "grad2_input":
            return grad_input if part == "grad_input" else grad_target
        w = jnp.asarray(upstream_gradient(tuple(grad_input.shape)), dtype=grad_input.dtype)
        return jax.grad(lambda b: jnp.sum(jax.vjp(loss, x, b)[1](upstream)[0] * w))(t)

    def _gradient_torch(self, case: Case, loss, device: str, part: str):
        """torch.autograd.grad with the upstream; create_graph=True for the second order, then the gradient,
        with respect to target, of sum(w * grad_input)."""
        torch = self._module()
        second = part == "grad2_input"
        x = self._tensor(case.input, case.dtype.input, case.layout, device, part != "grad_target", case.construction)
        t = self._tensor(case.target, case.dtype.target, case.layout, device, part != "grad_input", case.construction)
        out = loss(x, t)
        upstream = torch.from_numpy(upstream_gradient(tuple(out.shape))).to(device=out.device, dtype=out.dtype)
        (grad,) = torch.autograd.grad(out, [t if part == "grad_target" else x], grad_outputs=upstream,
                                      allow_unused=True, create_graph=second)
        if not second or grad is None:
            return grad
        w = torch.from_numpy(upstream_gradient(tuple(grad.shape))).to(device=grad.device, dtype=grad.dtype)
        (grad2,) = torch.autograd.grad((grad * w).sum(), [t], allow_unused=True)
        return grad2

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        return any(m in str(exc) for m in NO_KERNEL_MARKERS)

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        return kerascode.repro_source(case, self.call(case, api), api.name, self._keras_device(device),
                                      self._backend_of(device), part, mode)

    def to_numpy(self, result):
        if not self.keras.ops.is_tensor(result):
            raise TypeError(f"the loss returned {type(result).__name__}, not a {self.backend} tensor")
        dtype = self.keras.backend.standardize_dtype(result.dtype)
        if self.backend == "torch":  # NumPy has no bfloat16; float64 holds every dtype's values exactly
            value = result.detach().to("cpu", self._module().float64).numpy()
        elif self.backend == "tensorflow":
            value = result.numpy()  # not np.array(tensor): NumPy 2 warns about TF's __array__ (copy=)
        else:
            value = np.asarray(result)  # waits for the computation (JAX dispatches asynchronously)
        return np.asarray(value).astype(np.float64), dtype, tuple(result.shape)
