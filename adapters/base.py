"""The adapter protocol: what one file per framework must write, and the defaults composed from it.

An adapter knows nothing of the spec, tolerances or verdicts: it builds the framework's tensors from a case
once, calls the API, and returns what it saw as an `Observation` (a value, or the exception exactly as raised,
plus warnings). It imports its framework in `load()` and nowhere else; this module imports none.

The protocol, what every adapter must write: the class attributes `name`, `apis` and `known_devices`; `load`
(import the framework), `version` and `devices`; `build` (the tensors), `call` (the API call, an `ApiCall`) and
`to_numpy` (the result back), which an adapter's own `invoke` or `run` may stand in for; `gradient` (its
autograd; not where its APIs differentiate nothing); and `repro_source` (the reproducer's framework lines; or a
whole `repro_script` in another language). adapters/registry.py refuses an adapter that lacks one the run needs.

What an adapter may override has a default: here those composed from the protocol (`run`, `invoke`,
`unsupported_reason`, `unsupported_part`, `repro_script`, ...), in adapters/offer.py those about the installed
release (`OfferDefaults`). What an adapter declares and calls lives by what it is: adapters/declaration.py
(`Api`, `Mode`), apicall.py (`ApiCall`), construction.py (a case's buffers and views), observation.py (a call
recorded), reproducer.py (the script's text).

Every name this module exports (`__all__`) is public and kept, the ones it takes from those modules included;
REPRODUCER_HELPERS names those a reproducer is written with. Every other name starting with an underscore is
private and may change.
"""

from __future__ import annotations

import functools
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from conformance.adapters.apicall import ApiCall
from conformance.adapters.construction import (NUMPY_FLOATS, construction_source, fill_value, layout_buffer,
                                               layout_buffer_source, layout_view_source, numpy_source)
from conformance.adapters.declaration import Api, Mode
from conformance.adapters.observation import (HARNESS_WARNINGS, MissingGradient, ModeFallback, call_observed,
                                             missing_gradient)
from conformance.adapters.offer import Offer, OfferDefaults, signature_arguments
from conformance.adapters.reproducer import (check_script_names, hex_floats, python_comment, python_docstring,
                                             python_repro_script, python_snippet, script_devices)
from conformance.core.case import Case
from conformance.core.model import EAGER, Expected, Observation

__all__ = ["Adapter", "FrameworkUnavailable", "TensorCache", "REPRODUCER_HELPERS", "in_mode",
           "Api", "Mode", "ApiCall", "Offer", "OfferDefaults", "signature_arguments",
           "MissingGradient", "ModeFallback", "HARNESS_WARNINGS", "call_observed",
           "NUMPY_FLOATS", "layout_buffer", "layout_buffer_source", "layout_view_source", "numpy_source", "fill_value",
           "construction_source", "check_script_names", "script_devices", "python_comment", "python_docstring",
           "python_repro_script", "python_snippet", "hex_floats"]

# What an adapter needs to write its reproducer (docs/guide/ports.md): public, kept across releases.
REPRODUCER_HELPERS = ("ApiCall", "layout_buffer", "layout_buffer_source", "layout_view_source", "check_script_names",
                      "script_devices", "python_repro_script", "python_docstring", "python_comment", "hex_floats",
                      "call_observed", "numpy_source", "fill_value", "construction_source")


# The methods the run calls with the mode of the call (`in_mode`): an adapter with modes takes `mode` in each it
# overrides, or its calls in a mode are refused.
MODE_METHODS = ("run", "invoke", "gradient", "repro_source", "repro_script", "snippet", "unsupported_part",
                "is_no_kernel", "describe_exception")


class FrameworkUnavailable(Exception):
    """The framework cannot be imported here; carries the reason for the report."""


class Adapter(OfferDefaults):
    """Base class of the framework adapters: a subclass fills in the class attributes and the methods under
    "Must write"; every other method has a default it may override (and OfferDefaults adds those about the
    installed release)."""

    name: ClassVar[str]
    apis: ClassVar[tuple[Api, ...]]
    known_devices: ClassVar[tuple[str, ...]]
    # Where the framework may keep what it compiles between runs (set by the worker before load():
    # the harness's cache directory, None with --no-cache). Only frameworks that compile eagerly use it.
    compile_cache_dir: Path | None = None
    # A directory for what the framework's helper processes leave on disk (set by the worker before load()):
    # the harness removes it once the worker has ended, even if the worker was killed and could not clean up.
    scratch_dir: Path | None = None
    # A profile of documented deviations the adapter carries (an adapter outside this repository, registered by
    # entry point): a file path, relative to the adapter's module, or the profile itself as a dict. A
    # <name>.yaml in --profiles (or shipped) comes first.
    profile: ClassVar[str | Path | dict | None] = None
    # The modes beside eager this adapter can make its calls in (Mode); an adapter without any is eager only.
    modes: ClassVar[tuple[Mode, ...]] = ()
    # The most worker processes a run may spread its cases over (--jobs), for a framework two of whose processes
    # cannot run at once; None: as many as the run asks for.
    max_jobs: ClassVar[int | None] = None
    # The kinds of device (a device's name after any "backend:") that several worker processes can use at once: a
    # run on any other device has one worker, since a framework that claims an accelerator's memory whole when it
    # loads (JAX's and TensorFlow's preallocation, Paddle's) would leave the second worker none.
    shared_device_kinds: ClassVar[tuple[str, ...]] = ("cpu",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every adapter's `call` is fitted to the installed release (`fit_call`), wherever it is called from:
        the run, its compiled modes and the reproducer then make one and the same call."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("call")
        if own is not None and not getattr(own, "fits_release", False):
            @functools.wraps(own)
            def call(self, case: Case, api: Api):
                return self.fit_call(own(self, case, api), api)
            call.fits_release = True
            cls.call = call

    # What every adapter must write (the protocol): each raises NotImplementedError here.

    def load(self) -> None:
        """Import the framework; raise FrameworkUnavailable(reason) when it cannot be."""
        raise NotImplementedError

    def version(self) -> str:
        """The framework's installed version, as the framework states it ("2.13.0+cpu"): its release as the first
        word, then, where the framework runs on a runtime of its own choosing, that runtime ("3.15.1 (jax 0.12.0.1,
        x64)"); one behaviour of a release is one defect on each runtime (core/defects.py: release_of)."""
        raise NotImplementedError

    def devices(self) -> tuple[str, ...]:
        """The devices present on this machine, a subset of `known_devices`."""
        raise NotImplementedError

    def build(self, case: Case, device: str) -> tuple[Any, Any]:
        """The framework's (input, target) tensors for `case` on `device`, in the case's layout."""
        raise NotImplementedError

    def call(self, case: Case, api: Api) -> ApiCall:
        """The call `api` makes for `case`: what `invoke` runs and what the reproducer shows."""
        raise NotImplementedError

    def to_numpy(self, result: Any) -> tuple[np.ndarray, str, tuple[int, ...]]:
        """The raw result as (float64 values, dtype name, shape)."""
        raise NotImplementedError

    def gradient(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> Any:
        """The framework's own autograd gradient for `part` ("grad_input" or "grad_target"), with the
        upstream gradient `model.upstream_gradient(result shape)`; None if the framework gives none. An adapter
        with `modes` takes `mode` (see `in_mode`); an eager-only one may leave it out."""
        raise NotImplementedError

    def repro_source(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> str:
        """Python lines, for a standalone script, that turn the float64 arrays `x_values` and
        `t_values` into the framework's tensors, call `api` (and its autograd for a gradient
        part, with `upstream(shape)` as the upstream gradient) and leave a float64 NumPy
        array in `result` (and the framework's dtype name, as the run records it, in `result_dtype` where
        they can). They may import only the framework and NumPy. The API call itself is
        `self.call(case, api).source()`, so the reproducer makes the call the run made; in `mode`, wrapped as the
        run wrapped it."""
        raise NotImplementedError

    # What an adapter may override: each has a default, most of them composed from the methods above.

    def close(self) -> None:
        """End what `load` started outside this process (R torch's R); the worker calls it when the run is done."""

    def device_name(self, device: str) -> str:
        """A human name for the device (the GPU model, the CPU)."""
        return device

    def mode_unavailable(self, mode: str) -> str | None:
        """Why `mode` cannot run here (a package it needs is not installed), or None; called after `load`."""
        return None

    def unsupported_reason(self, case: Case, api: Api) -> str | None:
        """Why `api` cannot express `case`, or None: the default covers the shared API traits."""
        if case.params.log_target and not api.log_target:
            return f"{api.name} has no log_target argument"
        if not case.params.log_target and api.only_log_target:
            return f"{api.name} takes the target as log-probabilities only"
        if case.params.has_legacy and not api.legacy_args:
            return f"{api.name} has no size_average/reduce arguments"
        if case.params.prob_input != api.prob_input:
            return (f"{api.name} takes probabilities as input, not log-probabilities" if api.prob_input
                    else f"{api.name} takes log-probabilities as input, not probabilities")
        if api.reductions is not None and case.params.reduction not in api.reductions:
            return f"{api.name} has no reduction {case.params.reduction!r} (it takes {list(api.reductions)})"
        lacking = self.offer.missing_dtypes if self.offer is not None else {}
        for dtype in dict.fromkeys((case.dtype.input, case.dtype.target)):
            if dtype in lacking:
                return lacking[dtype]
        return self.missing_argument(case, api)

    def unsupported_part(self, api: Api, part: str, mode: str = EAGER) -> str | None:
        """Why `api` cannot produce `part` in `mode`: a gradient with respect to an argument it does not
        differentiate, or one in a mode without autograd."""
        declared = self.declared_mode(mode)
        if part != "forward" and declared is not None and not declared.gradients:
            return f"mode {declared.name} has no gradients ({declared.about})"
        needs = {"grad_input": ("input",), "grad_target": ("target",), "grad2_input": ("input", "target")}
        missing = [arg for arg in needs.get(part, ()) if arg not in api.grads]
        if missing:
            return f"{api.name} does not differentiate with respect to {missing[0]}"
        if part == "grad2_input" and not api.second_order:
            return f"{api.name} has no double backward"
        return None

    def invoke(self, case: Case, api: Api, inputs: tuple[Any, Any], mode: str = EAGER) -> Any:
        """Call `api` on already built inputs and return the framework's raw result: by default the
        adapter's `call`, made as stated (an adapter wraps this in what its framework needs around it, and an
        adapter with `modes` in what `mode` compiles or exports it to)."""
        x, t = inputs
        return self.call(case, api).apply(x, t)

    def is_no_kernel(self, exc: Exception, mode: str = EAGER) -> bool:
        """Whether `exc` is the framework saying it has no kernel for this device or dtype (in `mode`)."""
        return False

    def describe_exception(self, exc: Exception, mode: str = EAGER) -> str:
        """The message recorded for `exc` (raised in `mode`): the framework's own, less anything that depends on
        what ran before it in the process (so one call gives one message in any run, shard or baseline)."""
        return str(exc)

    def run(self, case: Case, api: Api, device: str, part: str, mode: str = EAGER) -> Observation:
        """Forward: build (once per case and device), invoke, convert. Gradients: the framework's autograd.
        Exceptions come back as data; a None gradient is a MissingGradient observation, a ModeFallback one a
        fallback observation. `mode` is the run's mode of this call (see `in_mode`)."""
        self.declared_mode(mode)
        no_kernel = functools.partial(in_mode, self.is_no_kernel, mode)
        described = functools.partial(in_mode, self.describe_exception, mode)
        if part == "forward":
            return call_observed(lambda: in_mode(self.invoke, mode, case, api,
                                                 self._cache.get(case, device, self.build)),
                                 self.to_numpy, no_kernel, described)

        def grad():
            value = in_mode(self.gradient, mode, case, api, device, part)
            if value is None:
                raise MissingGradient(missing_gradient(api.name, part))
            return value
        return call_observed(grad, self.to_numpy, no_kernel, described)

    def repro_script(self, case: Case, api: Api, device: str, part: str, about: tuple[str, ...],
                     expected: Expected, recorded: str = "a value", mode: str = EAGER) -> tuple[str, str]:
        """A standalone reproducer script and its file suffix. `about` is what it opens with (the case,
        the API, the verdict), `expected` the spec's value or error, which it prints beside the result;
        `recorded` what the run's call gave ("a value", "a value of another dtype" or "raises <type>"),
        which decides its exit status; `mode` the run's mode of the call.

        The default is a Python script around `repro_source`; an adapter of a framework in another
        language (R torch) writes the whole script in that language instead."""
        self.declared_mode(mode)
        check_script_names(case, device, part, self.known_devices)
        source = in_mode(self.repro_source, mode, case, api, device, part)
        return python_repro_script(self.name, source, case, about, expected, recorded), ".py"

    def snippet(self, case: Case, api: Api, device: str, part: str, expected: Expected,
                mode: str = EAGER) -> str | None:
        """A short standalone snippet for an upstream issue: the case's values as decimal literals, the
        reproducer's framework lines (`repro_source`, in `mode`) without their scaffolding, and the result
        printed beside the spec's expected value. None for an adapter whose reproducer is in another language."""
        if type(self).repro_source is Adapter.repro_source:
            return None
        self.declared_mode(mode)
        check_script_names(case, device, part, self.known_devices)
        return python_snippet(in_mode(self.repro_source, mode, case, api, device, part), case, part, expected)

    # What the class attributes declare, read by the run; an adapter has no need to override these.

    def carried_profile(self) -> Path | dict | None:
        """The profile the adapter carries (`profile`), a relative path taken from the folder of the module whose
        class states it: a subclass elsewhere (the self-test's planted adapter) reads the same file."""
        profile = type(self).profile
        if profile is None or isinstance(profile, dict):
            return profile
        path = Path(profile)
        stating = next(c for c in type(self).__mro__ if "profile" in vars(c))
        module = sys.modules.get(stating.__module__)
        if not path.is_absolute() and getattr(module, "__file__", None):
            path = Path(module.__file__).parent / path
        return path

    def mode_names(self) -> tuple[str, ...]:
        """Every mode the adapter can make its calls in, eager first."""
        return (EAGER, *(m.name for m in self.modes))

    def declared_mode(self, mode: str) -> Mode | None:
        """The declaration of `mode` (None for eager): the one place a mode is checked, by every entry that takes
        one (`run`, `unsupported_part`, `repro_script`, `snippet`), so an adapter's own branches on the mode's
        name need no case for a name it does not declare.

        Raises
        ------
        ValueError
            naming the adapter's modes, for a mode it does not declare.
        """
        if mode == EAGER:
            return None
        found = next((m for m in self.modes if m.name == mode), None)
        if found is None:
            raise ValueError(f"{self.name} has no mode {mode!r} (one of {list(self.mode_names())})")
        return found

    def implementations(self) -> dict[str, str]:
        """Each API's name to the name of the implementation it calls (its own where it declares none)."""
        return {api.name: api.implementation or api.name for api in self.apis}

    def mirrored(self) -> dict[str, str]:
        """Each API's name to the name of the API it mirrors in the framework it is judged like."""
        return {api.name: api.mirrors or api.name for api in self.apis}

    def api(self, name: str) -> Api:
        for api in self.apis:
            if api.name == name:
                return api
        raise KeyError(name)

    @property
    def _cache(self) -> "TensorCache":
        cache = self.__dict__.get("_tensor_cache")
        if cache is None:
            cache = self.__dict__["_tensor_cache"] = TensorCache()
        return cache


def in_mode(method: Callable[..., Any], mode: str, *args: Any) -> Any:
    """`method(*args)` made in `mode`: a mode is passed as the keyword `mode`, and an eager call passes none, so an
    eager-only adapter (a port, or a subclass of a framework's adapter that overrides `run`) keeps the signatures of
    `invoke`, `gradient`, `repro_source`, `is_no_kernel` and `describe_exception` it was written with, and an adapter
    with `modes` takes the mode as an argument, never as state.

    Raises
    ------
    TypeError
        for a call in a mode to a method that takes no `mode`: it would make the call eagerly under the mode's
        name, so it is refused (the run records the call as an adapter error) with the fix.
    """
    if mode == EAGER:
        return method(*args)
    if not _takes_mode(getattr(method, "__func__", method)):
        raise TypeError(f"{getattr(method, '__qualname__', method)} takes no `mode`, so it cannot make a call in mode "
                        f"{mode!r}; add `mode: str = EAGER` to it (an adapter with modes takes it in each of "
                        f"{', '.join(MODE_METHODS)} it overrides)")
    return method(*args, mode=mode)


@functools.lru_cache(maxsize=None)
def _takes_mode(function: Callable[..., Any]) -> bool:
    try:
        return "mode" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read: let the call say
        return True


class TensorCache:
    """Inputs built once per (case, device) and shared by every API of a framework."""

    def __init__(self) -> None:
        self._for: tuple[Case, str] | None = None
        self._tensors: tuple[Any, Any] | None = None

    def get(self, case: Case, device: str, build: Callable[[Case, str], tuple[Any, Any]]) -> tuple[Any, Any]:
        """The (input, target) tensors of `case` on `device`, built by `build(case, device)` once."""
        if self._for is None or self._for[0] is not case or self._for[1] != device:
            self._for = None  # a failing build must not leave stale tensors behind
            self._tensors = build(case, device)
            self._for = (case, device)
        return self._tensors
