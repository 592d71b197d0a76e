"""A framework's call recorded as an `Observation`: the value converted to NumPy, or the exception exactly as
raised (a ModeFallback, a missing gradient, a kernel the device lacks), with the warnings the call gave.

Records what happened and judges nothing: it knows no spec, tolerance or verdict, and imports no framework.
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any, Callable

import numpy as np

from conformance.core.model import Observation
from conformance.core.text import without_escapes


class MissingGradient(Exception):
    """The framework's autograd returned no gradient (None) where the loss depends on the argument."""


# Each gradient part in the words a missing one is reported by: a defect is named by an error's plain first words
# (core/defects.py: raised_words), so the part comes first, in words, and each part's is a defect of its own
_GRADIENT_WORDS = {"grad_input": "gradient with respect to input", "grad_target": "gradient with respect to target",
                   "grad2_input": "double backward"}


def missing_gradient(api_name: str, part: str) -> str:
    """What MissingGradient says, in a run and in a reproducer alike: "no gradient with respect to target (None)
    from paddle.nn.functional.kl_div"."""
    return f"no {_GRADIENT_WORDS.get(part, part)} (None) from {api_name}"


class ModeFallback(Exception):
    """A compiled or graph mode's call ran eagerly instead (a recompile limit, a graph break, a jit that traced
    nothing): the adapter raises it once its framework's counters show it, and the row's verdict is `fallback`,
    never the eager answer's."""


# Warnings the harness's own machinery causes during a call, not the framework's answer: JAX's
# persistent compilation cache (adapters/jaxcache.py) warns when it meets an entry another run is
# still writing, and compiles again.
HARNESS_WARNINGS = re.compile(r"Error (reading|writing) persistent compilation cache entry")


def call_observed(fn: Callable[[], Any], to_numpy: Callable[[Any], tuple[np.ndarray, str, tuple[int, ...]]],
                  is_no_kernel: Callable[[Exception], bool] = lambda exc: False,
                  describe: Callable[[Exception], str] = str) -> Observation:
    """Call `fn` (which builds the tensors and calls the API), recording warnings and exceptions as data.

    An exception that `is_no_kernel` recognises as the framework saying it has no
    kernel for this device or dtype becomes `unsupported`, with the framework's message.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        try:
            result = fn()
            value, dtype, shape = to_numpy(result)
        except Exception as exc:  # a framework's exception is data, not control flow
            elapsed = time.perf_counter() - start
            if isinstance(exc, ModeFallback):
                return Observation(fallback=_first_lines(str(exc), 300), elapsed_s=elapsed)
            if is_no_kernel(exc):
                return Observation(unsupported=f"no kernel for this device: {type(exc).__name__}: "
                                               f"{_first_lines(describe(exc), 300)}", elapsed_s=elapsed)
            return Observation(exception_type=type(exc).__name__, exception_message=_first_lines(describe(exc)),
                               warnings=_texts(caught), elapsed_s=elapsed)
        elapsed = time.perf_counter() - start
    return Observation(value=value, dtype=dtype, shape=shape, warnings=_texts(caught), elapsed_s=elapsed)


def _texts(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    return tuple(f"{w.category.__name__}: {w.message}" for w in caught if not HARNESS_WARNINGS.match(str(w.message)))


# An object's address in its repr ("<function kl_div at 0x7f3a...>", Dynamo's errors name the function they
# traced): it differs in every process, so a message that holds one would differ in every run and baseline.
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _first_lines(text: str, limit: int = 600) -> str:
    """The message as plain text (no terminal colours or control characters, no object addresses), cut to
    `limit`."""
    text = ADDRESS.sub("", without_escapes(text))
    return text if len(text) <= limit else text[:limit] + " ..."
