"""The adapter interface one file per framework implements, and what adapters share.

An adapter knows nothing of the spec, tolerances or verdicts: it builds the
framework's tensors from a case once, calls the API, and returns what it saw as an
`Observation` (a value, or the exception exactly as raised, plus warnings).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from conformance.model import Case, Observation


class FrameworkUnavailable(Exception):
    """The framework cannot be imported here; carries the reason for the report."""


@dataclass(frozen=True)
class Api:
    """One API row of a framework: the dotted path a user types, and what it differentiates."""

    name: str
    grads: tuple[str, ...] = ()
    log_target: bool = True
    legacy_args: bool = False


class Adapter:
    """Base class of the framework adapters; subclasses fill in the class attributes and methods."""

    name: ClassVar[str]
    apis: ClassVar[tuple[Api, ...]]
    known_devices: ClassVar[tuple[str, ...]]

    def load(self) -> None:
        """Import the framework; raise FrameworkUnavailable(reason) when it cannot be."""
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def devices(self) -> tuple[str, ...]:
        """The devices present on this machine, a subset of `known_devices`."""
        raise NotImplementedError

    def device_name(self, device: str) -> str:
        """A human name for the device (the GPU model, the CPU)."""
        return device

    def unsupported_reason(self, case: Case, api: Api) -> str | None:
        """Why `api` cannot express `case`, or None: the default covers the shared API traits."""
        if case.params.log_target and not api.log_target:
            return f"{api.name} has no log_target argument"
        if case.params.has_legacy and not api.legacy_args:
            return f"{api.name} has no size_average/reduce arguments"
        return None

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        raise NotImplementedError

    def api(self, name: str) -> Api:
        for api in self.apis:
            if api.name == name:
                return api
        raise KeyError(name)


def layout_buffer(array: np.ndarray, layout: str) -> tuple[np.ndarray, Callable[[Any], Any]]:
    """A contiguous buffer and the view to take of it so the view holds `array` in `layout`.

    transposed: the buffer holds the last two axes swapped and the view swaps them back.
    strided: the buffer doubles the last axis and the view takes every other element.
    The view is framework-neutral: it uses only `.transpose(-2, -1)`-style swaps via
    `swap` and basic slicing, which torch, OneFlow and MindSpore tensors all support.
    """
    if layout == "contiguous":
        return array, lambda t: t
    if layout == "transposed":
        return np.ascontiguousarray(np.swapaxes(array, -1, -2)), lambda t: t.transpose(-1, -2)
    if layout == "strided":
        buffer = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), dtype=array.dtype)
        buffer[..., ::2] = array
        return buffer, lambda t: t[..., ::2]
    raise ValueError(f"unknown layout {layout!r}")


def call_observed(fn: Callable[[], Any], to_numpy: Callable[[Any], tuple[np.ndarray, str, tuple[int, ...]]]) -> Observation:
    """Call `fn`, recording its warnings and any exception as data."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        try:
            result = fn()
            value, dtype, shape = to_numpy(result)
        except Exception as exc:  # a framework's exception is data, not control flow
            elapsed = time.perf_counter() - start
            return Observation(exception_type=type(exc).__name__, exception_message=_first_lines(str(exc)),
                               warnings=_texts(caught), elapsed_s=elapsed)
        elapsed = time.perf_counter() - start
    return Observation(value=value, dtype=dtype, shape=shape, warnings=_texts(caught), elapsed_s=elapsed)


def _texts(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    return tuple(f"{w.category.__name__}: {w.message}" for w in caught)


def _first_lines(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."
