"""Paddle's static modes (`paddle.jit.to_static`): the program of a call, the switches a mode sets around its calls,
and the proof that SOT compiled what it ran.

adapters/paddle.py keeps each call's program per (mode, call, dtypes, shapes) and calls these; the modes themselves
are described there. Imports nothing of Paddle at module level: every function takes the loaded module.
"""

from __future__ import annotations

import types
import warnings
from contextlib import contextmanager

from conformance.adapters.base import ApiCall, Mode, ModeFallback

STATIC, DYNAMIC_BATCH, PRIM, SOT = "to-static", "to-static-dynamic-batch", "to-static-prim", "to-static-sot"
MODES = (
    Mode(STATIC, "paddle.jit.to_static(full_graph=True) with an InputSpec of the case's shapes"),
    Mode(DYNAMIC_BATCH, "paddle.jit.to_static(full_graph=True) with the first dimension None in the InputSpec"),
    Mode(PRIM, "to-static with the primitive decomposition on (core._set_prim_all_enabled, FLAGS_prim_all)"),
    Mode(SOT, "paddle.jit.to_static(full_graph=False), SOT, with MIN_GRAPH_SIZE 0 so kl_div's graph compiles"),
)


def compile_program(paddle, call: ApiCall, x, t, mode: str, number: int):
    """The to_static function of `mode` for the call on tensors like (x, t), and the code object SOT translates
    (None in the full-graph modes); `number` makes SOT's code object its own."""
    if call.args != ("x", "t"):
        raise ValueError(f"{call.path} takes {call.args}, not (x, t)")
    target = call.resolve()
    if call.init is not None:
        target = target(**dict(call.init))  # the loss layer, built once outside the program
    kwargs = dict(call.kwargs)

    def kl_div(x, t):
        return target(x, t, **kwargs)
    if mode == SOT:
        # a code object of its own per key: SOT keys what it translated (and the shapes it saw) on the code
        code = kl_div.__code__.replace(co_name=f"kl_div_{number}")
        kl_div = types.FunctionType(code, kl_div.__globals__, code.co_name, None, kl_div.__closure__)
        return paddle.jit.to_static(kl_div, full_graph=False), code
    specs = [paddle.static.InputSpec(spec_shape(v.shape, mode == DYNAMIC_BATCH), str(v.dtype).removeprefix(
        "paddle."), name) for v, name in ((x, "x"), (t, "t"))]
    return paddle.jit.to_static(kl_div, input_spec=specs, full_graph=True), None


@contextmanager
def mode_switches(paddle, mode: str, sot_min_graph_size: int):
    """The run-time switches of `mode`, on around one call and back as they were after: the prim
    decomposition for to-static-prim, SOT's graph size threshold for to-static-sot."""
    with warnings.catch_warnings():
        # building a program's backward warns this once per program, so only the first call of a key would
        # carry it: Paddle's translation machinery talking, not the call's answer
        warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface for pir graph mode")
        with _switches(paddle, mode, sot_min_graph_size):
            yield


@contextmanager
def _switches(paddle, mode: str, sot_min_graph_size: int):
    if not _to_static_enabled():
        raise ModeFallback("paddle.jit.enable_to_static is off: to_static functions run eagerly")
    if mode == SOT:
        from paddle.jit.sot.utils.envs import min_graph_size_guard
        with min_graph_size_guard(sot_min_graph_size):
            yield
        return
    if mode != PRIM:
        yield
        return
    core = paddle.framework.core
    before = core._is_fwd_prim_enabled(), core._is_bwd_prim_enabled()
    core._set_prim_all_enabled(True)
    try:
        yield
    finally:
        core._set_prim_forward_enabled(before[0])
        core._set_prim_backward_enabled(before[1])


def _to_static_enabled() -> bool:
    from paddle.jit.dy2static.program_translator import ProgramTranslator
    return bool(ProgramTranslator().enable_to_static)


def check_compiled(code, sot_min_graph_size: int, raised: bool = False) -> None:
    """SOT's cache of `code` (the per-key function SOT translated) holds the code it ran: only the original
    (None: a graph below the size threshold, a graph break, an unsupported frame) means it ran eagerly. A
    call that raised before SOT cached anything failed in the translation: that exception is the answer."""
    if code is None:
        return
    from paddle.jit.sot.opcode_translator.executor.executor_cache import OpcodeExecutorCache
    entry = OpcodeExecutorCache().cache.get(code)
    translated = [custom.code for custom, _ in entry[0]] if entry else []
    if raised and not translated:
        return
    if not any(c is not None for c in translated):
        raise ModeFallback("SOT ran the call eagerly: no compiled code for it (a graph below "
                           f"MIN_GRAPH_SIZE {sot_min_graph_size}, or a graph break)")


def spec_shape(shape, dynamic_batch: bool) -> list:
    """The InputSpec shape: the tensor's, with the first dimension None for a dynamic batch (none for 0-d)."""
    shape = list(shape)
    return [None, *shape[1:]] if dynamic_batch and shape else shape
