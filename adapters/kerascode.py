"""The Python source of a Keras reproducer's call: backend, tensors, call and part, as the run made them.

Written from the case and the call alone, without Keras: a run's reproducers are written by the parent, which never
imports a framework. adapters/keras.py makes the same calls in the run; adapters/reproducer.py wraps this body into a
script that judges its result as the run did.
"""

from __future__ import annotations

from conformance.adapters.base import ApiCall, construction_source
from conformance.adapters.compiled import RECOMPILE_LIMIT, jax_jit_repro_lines
from conformance.adapters.observation import missing_gradient
from conformance.core.case import Case
from conformance.core.model import EAGER

VIEWS = {"contiguous": "{}", "transposed": "keras.ops.swapaxes({}, -1, -2)", "strided": "{}[..., ::2]"}


def repro_source(case: Case, call: ApiCall, api_name: str, scope: str, backend: str, part: str,
                 mode: str = EAGER) -> str:
    """The body of a Keras reproducer: the backend chosen before Keras imports, the tensors built in the device's
    scope (`scope`, Keras' name for it) as the run built them, the call as a user writes it, and the part's
    value left in `grad`; for mode `jit`, compiled as the run compiles it."""
    lines = ["import os",
             f"os.environ['KERAS_BACKEND'] = {backend!r}  # Keras fixes its backend at import",
             {"tensorflow": "import tensorflow as tf", "jax": "import jax", "torch": "import torch"}[backend]]
    if backend == "jax":
        lines += ["jax.config.update('jax_enable_x64', True)  # else float64 is silently float32"]
    lines += ["import keras", ""]
    no_double = backend == "torch" and mode != EAGER and part == "grad2_input"
    if (backend == "tensorflow" and part != "forward") or no_double:
        lines += ["", "class MissingGradient(Exception):", "    \"\"\"The tape gave no gradient (None).\"\"\"", ""]
    lines += [f"with keras.device({scope!r}):"]
    body = []

    def tensor(name: str, dtype: str, grad: bool) -> str:
        made = case.construction
        source = construction_source(name, case.input if name[0] == "x" else case.target, case, dtype)
        given = "" if made.inferred else f", dtype={dtype!r}"
        leaf = f"keras.ops.{'full' if made.source == 'factory' else 'convert_to_tensor'}({source}{given})"
        if backend == "torch" and part != "forward":
            leaf += f".requires_grad_({grad})"
        return VIEWS[case.layout].format(leaf)
    body += [f"x = {tensor('x_values', case.dtype.input, part != 'grad_target')}  # y_pred",
             f"t = {tensor('t_values', case.dtype.target, part != 'grad_input')}  # y_true"]
    body.append(f"loss = lambda x, t: {call.source()}")
    if mode != EAGER:
        body += _jit_lines(backend, part)
    missing = f"raise MissingGradient({missing_gradient(api_name, part)!r})"
    body += (_part_lines(part, backend, missing) if mode == EAGER or backend == "torch"
             else _jit_part_lines(part, backend, missing))
    if no_double:  # the compiled backward is not differentiable: autograd gives no second gradient
        body[-1] = body[-1].replace("[t])", "[t], allow_unused=True)")
        body += ["if grad is None:  # the harness records this as MissingGradient", "    " + missing]
    if backend == "tensorflow" and part != "forward":  # a tape answers None where it has no gradient
        body += ["if grad is None:  # the harness records this as MissingGradient", "    " + missing]
    # JAX answers a float0 array, not a tensor, for an integer argument's gradient: the harness records a TypeError
    body += ["if not keras.ops.is_tensor(grad):",
             f"    raise TypeError('the loss returned ' + type(grad).__name__ + {f', not a {backend} tensor'!r})"]
    body.append("result_dtype = keras.backend.standardize_dtype(grad.dtype)  # as the run records it")
    body.append("result = " + {"tensorflow": "grad.numpy().astype(np.float64)",
                               "jax": "np.asarray(grad).astype(np.float64)",
                               "torch": "grad.detach().to('cpu', torch.float64).numpy()"}[backend])
    return "\n".join(lines + ["    " + line if line else "" for line in body])


def _jit_lines(backend: str, part: str) -> list[str]:
    """Mode `jit` lines after `loss`: torch compiles the loss itself (autograd differentiates it as in
    eager); TF and JAX compile the part's function (`_jit_part_lines`)."""
    if backend != "torch":
        return []
    return ["import torch._dynamo",
            f"torch._dynamo.config.recompile_limit = {RECOMPILE_LIMIT}  # else Dynamo runs eagerly past it",
            "loss = torch.compile(loss, fullgraph=True, dynamic=False)  # Inductor"]


def _jit_part_lines(part: str, backend: str, missing: str) -> list[str]:
    """The lines of mode `jit` on TF or JAX that leave the part's value in `grad`, every tensor an argument
    of the compiled function."""
    if backend == "jax":
        lines = jax_jit_repro_lines(part)
        return ["import jax.numpy as jnp", *lines[:-1]] if part != "forward" else \
            [lines[0], lines[1].replace("out =", "grad =")]
    lines = ["compiled = tf.function(loss, jit_compile=True)  # XLA; the tensors passed as arguments",
             "out = compiled(x, t)"]
    if part == "forward":
        return lines + ["grad = out"]
    lines += ["g = tf.constant(upstream(tuple(out.shape)), dtype=out.dtype)",
              "def first(a, b, g):",
              "    with tf.GradientTape() as tape:",
              "        tape.watch([a, b])",
              "        value = loss(a, b)",
              "    return tape.gradient(value, [a, b], output_gradients=g)",
              "grad_input, grad_target = tf.function(first, jit_compile=True)(x, t, g)"]
    if part != "grad2_input":
        return lines + [f"grad = {part}"]
    return lines + ["if grad_input is None:", "    " + missing,
                    "def second(a, b, g, w):",
                    "    with tf.GradientTape() as outer:",
                    "        outer.watch(b)",
                    "        with tf.GradientTape() as inner:",
                    "            inner.watch([a, b])",
                    "            value = loss(a, b)",
                    "        weighted = tf.reduce_sum(inner.gradient(value, a, output_gradients=g) * w)",
                    "    return outer.gradient(weighted, b)",
                    "w = tf.constant(upstream(tuple(grad_input.shape)), dtype=grad_input.dtype)",
                    "grad = tf.function(second, jit_compile=True)(x, t, g, w)"]


def _part_lines(part: str, backend: str, missing: str) -> list[str]:
    """The lines, in the device's scope, that leave the part's value in `grad`; `missing` is the line that
    raises where a tape gives no gradient."""
    if part == "forward":
        return ["grad = loss(x, t)"]
    wrt = "t" if part == "grad_target" else "x"
    if backend == "tensorflow":
        lines = ["with tf.GradientTape() as outer:",
                 "    outer.watch(t)",
                 "    with tf.GradientTape() as inner:",
                 "        inner.watch([x, t])",
                 "        out = loss(x, t)",
                 f"    grad = inner.gradient(out, {wrt}, output_gradients=tf.constant(upstream(tuple(out.shape)), "
                 "dtype=out.dtype))"]
        if part == "grad2_input":
            lines += ["    if grad is None:", "        " + missing,
                      "    w = tf.constant(upstream(tuple(grad.shape)), dtype=grad.dtype)",
                      "    weighted = tf.reduce_sum(grad * w)",
                      "grad = outer.gradient(weighted, t)"]
        return lines
    if backend == "jax":
        lines = ["import jax.numpy as jnp",
                 "out, pullback = jax.vjp(loss, x, t)",
                 "g = jnp.asarray(upstream(tuple(out.shape)), dtype=out.dtype)",
                 "grad_input, grad_target = pullback(g)"]
        if part == "grad2_input":
            return lines + ["w = jnp.asarray(upstream(tuple(grad_input.shape)), dtype=grad_input.dtype)",
                            "grad = jax.grad(lambda b: jnp.sum(jax.vjp(loss, x, b)[1](g)[0] * w))(t)"]
        return lines + [f"grad = {part}"]
    lines = ["out = loss(x, t)",
             "g = torch.from_numpy(upstream(tuple(out.shape))).to(out.device, out.dtype)",
             f"(grad,) = torch.autograd.grad(out, [{wrt}], grad_outputs=g, create_graph={part == 'grad2_input'})"]
    if part == "grad2_input":
        lines += ["w = torch.from_numpy(upstream(tuple(grad.shape))).to(grad.device, grad.dtype)",
                  "(grad,) = torch.autograd.grad((grad * w).sum(), [t])"]
    return lines
