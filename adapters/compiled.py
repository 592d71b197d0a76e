"""Proof that a compiled mode's call was compiled: for the adapters whose modes trace a Python function (optax's and
Keras' `jit`, MLX's `compile`; `Traced`), and for torch.compile with Inductor (torch's `inductor` modes,
`InductorCall`; Keras' `jit` on torch, `TorchCompiled`).

jax.jit, tf.function and mx.compile each run the Python function once per new input signature to trace it,
and afterwards run what they compiled without it. Each of them also has a switch that silently runs the
function eagerly instead (jax_disable_jit, tf.config.run_functions_eagerly, mx.disable_compile or
MLX_DISABLE_COMPILE), from the user's code or the environment, where a run would report eager's answers as the
mode's. So the traced function records, each time its body runs, whether it ran on the framework's
placeholders (traced) or on the real arrays (eager), and a call raises ModeFallback when its body ran eagerly,
or when a signature never seen before was not traced at all.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any, Callable

from conformance.adapters.base import ModeFallback
from conformance.core.model import upstream_gradient


# TorchCompiled's Dynamo limit per function, past which Dynamo runs it eagerly: one compile per signature
RECOMPILE_LIMIT = 1 << 20


def signature(args: tuple[Any, ...]) -> tuple[tuple[tuple[int, ...], str], ...]:
    """The arguments' shapes and dtypes: a new one is a signature every framework here must trace again (each
    keys its compiled functions by at least these)."""
    return tuple((tuple(int(n) for n in a.shape), str(a.dtype)) for a in args)


class Traced:
    """One compiled function and the proof of its calls: `compile(body)` wraps the function the framework
    compiles (the body's first argument's kind, through `traced`, says whether the framework was tracing),
    and calling the object calls the compiled function, checks the proof, and returns its result.

    `what` names the wrapper in the fallback's message ("jax.jit", "mx.compile").
    """

    def __init__(self, body: Callable[..., Any], compile: Callable[[Callable[..., Any]], Callable[..., Any]],
                 traced: Callable[[tuple[Any, ...]], bool], what: str) -> None:
        self._runs: list[bool] = []  # one entry per run of the body: True traced, False eager
        self._seen: set = set()
        self.what = what

        def recorded(*args):
            self._runs.append(traced(args))
            return body(*args)
        self._compiled = compile(recorded)

    def __call__(self, *args: Any) -> Any:
        before, key = len(self._runs), signature(args)
        result = self._compiled(*args)
        runs = self._runs[before:]
        if not all(runs):
            raise ModeFallback(f"{self.what} ran the call eagerly: its function ran on the arrays themselves, "
                               f"not traced (compilation is switched off in this process)")
        if key not in self._seen and not runs:
            raise ModeFallback(f"{self.what} traced nothing for the new signature {key}: the call did not "
                               f"compile what it ran")
        self._seen.add(key)
        return result

    @property
    def traces(self) -> int:
        """How often the body was traced so far."""
        return sum(self._runs)


def jax_traced(jax, fn):
    """jax.jit of `fn`, each call checked to have been traced (adapters/compiled.py)."""
    return Traced(fn, jax.jit, lambda args: isinstance(args[0], jax.core.Tracer), "jax.jit")


def jax_jit_gradient(jax, loss, x, t, part: str, jitted):
    """`part` of `loss` at (x, t) the way the eager gradient computes it, each step under jax.jit with every
    array an argument: jitted(kind, body) gives the jitted function of `body()` for kind "vjp" or "grad2".
    The upstream's shape and dtype come from jax.eval_shape, which compiles nothing."""
    jnp = jax.numpy

    def vjp(a, b, g):
        return jax.vjp(loss, a, b)[1](g)
    out = jax.eval_shape(loss, x, t)
    upstream = jnp.asarray(upstream_gradient(tuple(out.shape)), dtype=out.dtype)
    if part != "grad2_input":
        grad_input, grad_target = jitted("vjp", lambda: vjp)(x, t, upstream)
        return grad_input if part == "grad_input" else grad_target
    shape = jax.eval_shape(vjp, x, t, upstream)[0]
    w = jnp.asarray(upstream_gradient(tuple(shape.shape)), dtype=shape.dtype)

    def grad2(a, b, g, v):
        return jax.grad(lambda c: jnp.sum(vjp(a, c, g)[0] * v))(b)
    return jitted("grad2", lambda: grad2)(x, t, upstream, w)


def jax_jit_repro_lines(part: str) -> list[str]:
    """A reproducer's lines for `part` in mode `jit`, after `loss`, `x` and `t`: the jax.jit calls the run made,
    every array an argument, leaving the value in `result`."""
    if part == "forward":
        return ["# jax.jit, the arrays passed as arguments: arrays closed over are constants XLA folds",
                "out = jax.jit(loss)(x, t)",
                "result = np.asarray(out).astype(np.float64)"]
    lines = ["vjp = lambda a, b, g: jax.vjp(loss, a, b)[1](g)",
             "out = jax.eval_shape(loss, x, t)  # the shape and dtype only: compiles nothing",
             "g = jnp.asarray(upstream(out.shape), dtype=out.dtype)"]
    if part == "grad2_input":
        lines += ["shape = jax.eval_shape(vjp, x, t, g)[0]",
                  "w = jnp.asarray(upstream(shape.shape), dtype=shape.dtype)",
                  "grad2 = lambda a, b, g, v: jax.grad(lambda c: jnp.sum(vjp(a, c, g)[0] * v))(b)",
                  "grad = jax.jit(grad2)(x, t, g, w)  # the arrays passed as arguments"]
    else:
        lines += ["grad_input, grad_target = jax.jit(vjp)(x, t, g)  # the arrays passed as arguments",
                  f"grad = {part}"]
    return lines + ["result = np.asarray(grad).astype(np.float64)"]


def keep_inductor_cache(cache_dir: Path | None) -> None:
    """Inductor's compiled artifacts (its FX graph cache and the kernels it builds) under the harness's cache
    directory, where a second run of a mode finds them, instead of the system's temporary folder; called before
    torch is imported. Nothing changes without a cache directory (--no-cache)."""
    if cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_dir) / "torchinductor")


class InductorCall:
    """One API call compiled by Inductor (`dynamic=False`) through a backend that calls Inductor's compile_fx with
    the mode's options and marks each run of a compiled graph: a call after which no compiled graph ran (Dynamo
    skipped the frame: its recompile limit, a graph break that left no graph), or whose compile broke the graph,
    raises ModeFallback instead of returning eager's answer as the mode's."""

    def __init__(self, torch, bound, options: dict) -> None:
        self.torch = torch
        self.options = dict(options)
        self.ran = False
        self.broken: dict[tuple, str] = {}  # input signature -> the graph break its compile met
        # a code object of its own: Dynamo keeps compiled code, and counts recompiles, per code object
        fn = _through(bound)
        fn = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, None, fn.__closure__)
        self.fn = torch.compile(fn, backend=self._backend, dynamic=False)

    def _backend(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(gm, example_inputs, config_patches=dict(self.options))

        def run(*args):
            self.ran = True
            return compiled(*args)
        return run

    def __call__(self, x, t):
        from torch._dynamo.utils import counters

        signature = tuple((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad) for a in (x, t))
        breaks = dict(counters["graph_break"])
        skipped = dict(counters["unimplemented"])
        self.ran = False
        out = self.fn(x, t)
        new_breaks = [reason for reason, n in counters["graph_break"].items() if n > breaks.get(reason, 0)]
        if new_breaks:
            self.broken[signature] = new_breaks[0]
        if signature in self.broken:
            raise ModeFallback(f"a graph break left part of the call to run eagerly: {_first(self.broken[signature])}")
        if not self.ran:
            why = [reason for reason, n in counters["unimplemented"].items() if n > skipped.get(reason, 0)]
            raise ModeFallback("no compiled graph ran: Dynamo ran the call eagerly"
                               + (f" ({_first(why[0])})" if why else " (it skipped the frame)"))
        return out


def _through(bound):
    def kl_div_compiled(x, t):
        return bound(x, t)
    return kl_div_compiled


def _first(text: str) -> str:
    return str(text).strip().splitlines()[0]


class TorchCompiled:
    """torch.compile of a function (Inductor, fullgraph=True so a graph break raises, static shapes), each call
    checked to have run the graph Inductor compiled: the backend given to torch.compile is Inductor's own
    compile_fx, wrapped to count the compiled graph's runs. A call during which no compiled graph ran is
    Dynamo running the function eagerly (torch.compiler.set_stance("force_eager"); without fullgraph, also a
    graph break or the recompile limit): ModeFallback. The recompile limit is raised so every signature of a
    run compiles, where with fullgraph=True it would raise."""

    def __init__(self, torch, fn) -> None:
        import torch._dynamo
        from torch._inductor.compile_fx import compile_fx

        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, RECOMPILE_LIMIT)
        self.graph_runs = 0

        def backend(gm, example_inputs):
            compiled = compile_fx(gm, example_inputs)

            def counted(*args):
                self.graph_runs += 1
                return compiled(*args)
            counted._boxed_call = getattr(compiled, "_boxed_call", False)  # Dynamo calls a boxed one with a list
            return counted
        self._fn = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)

    def __call__(self, *args):
        before = self.graph_runs
        result = self._fn(*args)
        if self.graph_runs == before:
            raise ModeFallback("torch.compile ran the call eagerly: no graph Inductor compiled ran (a stance that "
                               "forces eager, or Dynamo's recompile limit)")
        return result
