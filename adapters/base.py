"""The adapter interface one file per framework implements, and what adapters share.

An adapter knows nothing of the spec, tolerances or verdicts: it builds the
framework's tensors from a case once, calls the API, and returns what it saw as an
`Observation` (a value, or the exception exactly as raised, plus warnings).

What an adapter calls lives by what it is, and is exported here too: adapters/apicall.py (`ApiCall`),
construction.py (a case's buffers and views), observation.py (a call recorded), reproducer.py (the script's
text). An adapter outside this repository may use what REPRODUCER_HELPERS names to write its reproducer (they
are public and kept); every other name starting with an underscore is private and may change.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from conformance.adapters.apicall import ApiCall
from conformance.adapters.construction import (NUMPY_FLOATS, construction_source, fill_value, layout_buffer,
                                               layout_buffer_source, layout_view_source, numpy_source)
from conformance.adapters.observation import HARNESS_WARNINGS, MissingGradient, ModeFallback, call_observed
from conformance.adapters.reproducer import (check_script_names, hex_floats, python_comment, python_docstring,
                                             python_repro_script, python_snippet, script_devices)
from conformance.core.model import EAGER, FLOAT_DTYPES, Case, Expected, Observation
from conformance.core.rounding import INTEGER_DTYPES

__all__ = ["Adapter", "Api", "Mode", "Offer", "FrameworkUnavailable", "TensorCache", "REPRODUCER_HELPERS",
           "signature_arguments", "ApiCall", "MissingGradient", "ModeFallback", "HARNESS_WARNINGS", "call_observed",
           "NUMPY_FLOATS", "layout_buffer", "layout_buffer_source", "layout_view_source", "numpy_source", "fill_value",
           "construction_source", "check_script_names", "script_devices", "python_comment", "python_docstring",
           "python_repro_script", "python_snippet", "hex_floats"]


class FrameworkUnavailable(Exception):
    """The framework cannot be imported here; carries the reason for the report."""


@dataclass(frozen=True)
class Mode:
    """A way of making the call other than eager that an adapter offers (torch `inductor`, paddle `to-static`).

    `about` says in one line what the mode wraps the call in (`modes` lists it); `gradients` False says the mode
    has no autograd (an exported graph run by onnxruntime), so every gradient part is unsupported with that
    reason. The adapter reads its `mode` attribute in `invoke`, `gradient` and `repro_source`.
    """

    name: str
    about: str
    gradients: bool = True


@dataclass(frozen=True)
class Api:
    """One API row of a framework: the dotted path a user types, and what it differentiates.

    `dialect` names how the API states the loss (spec: dialects): canonical for torch's form,
    distribution_sum for a sum over the last axis (optax, MLX), keras for Keras' probabilities.
    `prob_input` says the API takes probabilities as input (the dialect's input space);
    `reductions` the reduction arguments it takes, where it does not take every one.
    """

    name: str
    grads: tuple[str, ...] = ()
    log_target: bool = True
    legacy_args: bool = False
    second_order: bool = True
    dialect: str = "canonical"
    prob_input: bool = False
    only_log_target: bool = False
    reductions: tuple[str, ...] | None = None  # None: any string is passed on (unknown ones test the error path)
    # the APIs that are one implementation (a module and the functional form it calls) name the same one, so a
    # behaviour of both is one defect (core/defects.py); None: the API is an implementation of its own
    implementation: str | None = None
    # a port's API: the API of the framework it is judged like (--like, a profile's extends:) that this one
    # mirrors; None: the API of the same name
    mirrors: str | None = None


@dataclass(frozen=True)
class Offer:
    """What the installed release of a framework offers, learnt once it is loaded (`Adapter.learn_release`).

    `missing_apis`: each API the release lacks, with the reason (it is not run: no rows, one line in the
    report). `arguments`: per API, the argument names its installed signature takes; an API absent here has a
    signature that could not be read, and every argument is passed as before (the call itself tells).
    `notes`: the harness's own options that degraded on this release (a compile cache left off), one line each.
    `missing_dtypes`: each dtype of the spec the release has no tensors of, with the reason (the cases that need
    it are unsupported, not errors). Plain strings only: the worker sends it to the parent.
    """

    release: str = ""
    missing_apis: dict[str, str] = field(default_factory=dict)
    arguments: dict[str, frozenset[str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    missing_dtypes: dict[str, str] = field(default_factory=dict)


def signature_arguments(obj: Any) -> frozenset[str] | None:
    """The argument names `obj` takes by name: a function's parameters, or a class's constructor's and its
    `forward`'s (a loss object is built, then called). None where that cannot be read (a builtin without a
    signature) or where `**kwargs` takes any name: such an API is passed every argument, as before."""
    targets = [obj]
    if inspect.isclass(obj):
        targets = [obj.__init__] + [getattr(obj, m) for m in ("forward", "call") if callable(getattr(obj, m, None))]
    names: set[str] = set()
    for target in targets:
        try:
            params = inspect.signature(target).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        names |= {p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    return frozenset(names - {"self"})


class Adapter:
    """Base class of the framework adapters; subclasses fill in the class attributes and methods."""

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
    # The mode of the calls that follow: the worker sets it before each call (and a reproducer before its
    # source), so `invoke`, `gradient` and `repro_source` keep their signatures.
    mode: str = EAGER

    # What the installed release offers (Offer): set once loaded (the worker's learn_release, sent to the
    # parent); None before, when every API is taken as present and every argument is passed.
    offer: Offer | None = None
    # The value an optional argument has when a call leaves it out, in every release: a call whose release
    # lacks the argument leaves it out at this value (Paddle 2.6's kl_div has no log_target; False is its
    # behaviour), and a case that needs another value is unsupported on that release.
    argument_defaults: ClassVar[dict[str, Any]] = {"log_target": False}

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

    def mode_unavailable(self, mode: str) -> str | None:
        """Why `mode` cannot run here (a package it needs is not installed), or None; called after `load`."""
        return None

    def release(self) -> str:
        """The framework and its installed release in words ("paddle 2.6.2"), for the reasons given."""
        return f"{self.name} {str(self.version()).split(' ')[0]}"

    def api_object(self, api: Api) -> tuple[Any, str | None]:
        """The installed object of `api` and None, or None and why it is missing. An API whose dotted path starts
        with the adapter's own name (the framework's module) is looked up attribute by attribute; any other
        (R torch's, a stand-in's) is taken as present, with no object."""
        first, *rest = api.name.split(".")
        obj = sys.modules.get(first) if first == self.name and rest else None
        if obj is None:
            return None, None
        for depth, name in enumerate(rest, 1):
            dotted = ".".join([first, *rest[:depth]])
            try:
                obj = getattr(obj, name)
            except Exception:  # AttributeError: a submodule not imported yet (mlx.nn), or none in this release
                try:
                    obj = importlib.import_module(dotted)
                except Exception:
                    return None, f"{self.release()} has no {dotted}"
        return obj, None

    def api_unavailable(self, api: Api) -> str | None:
        """Why the installed release has no `api` (it is not run, with this reason), or None; called after `load`.
        The default looks its path up (`api_object`); an adapter may say more (where the API went)."""
        return self.api_object(api)[1]

    def dtype_unavailable(self, dtype: str) -> str | None:
        """Why the installed release cannot make a tensor of `dtype` at all (it has no such dtype), or None;
        called after `load`. A dtype an API or a device refuses is the call's to tell, not this."""
        return None

    def api_arguments(self, api: Api) -> frozenset[str] | None:
        """The argument names the installed `api` takes (read from its signature), or None where unknown."""
        obj, _ = self.api_object(api)
        return None if obj is None else signature_arguments(obj)

    def degraded(self, note: str) -> None:
        """Record that one of the harness's own options could not be used on this release (run.json `notes`)."""
        self.__dict__.setdefault("_notes", []).append(note)

    def learn_release(self) -> Offer:
        """What the loaded release offers (`offer`): the APIs it lacks, the arguments of those it has, the
        harness options that degraded. Called once after `load`, before any call."""
        missing = {api.name: str(why) for api in self.apis if (why := self.api_unavailable(api))}
        arguments = {api.name: args for api in self.apis if api.name not in missing
                     and (args := self.api_arguments(api)) is not None}
        dtypes = {dtype: str(why) for dtype in (*FLOAT_DTYPES, *INTEGER_DTYPES)
                  if (why := self.dtype_unavailable(dtype))}
        self.offer = Offer(self.release(), missing, arguments, tuple(self.__dict__.get("_notes", ())), dtypes)
        return self.offer

    def fit_call(self, call: Any, api: Api) -> Any:
        """`call` as the installed release takes it: an argument the release's `api` lacks is left out where the
        case asks for its default value (`argument_defaults`), which is what the release computes without it."""
        known = self.offer.arguments.get(api.name) if self.offer is not None else None
        if known is None or not isinstance(call, ApiCall):
            return call

        def kept(pairs):
            return tuple((k, v) for k, v in pairs if k in known or k not in self.argument_defaults
                         or not _same_value(v, self.argument_defaults[k]))
        return ApiCall(call.path, call.args, kept(call.kwargs), None if call.init is None else kept(call.init))

    def missing_argument(self, case: Case, api: Api) -> str | None:
        """Why the installed release cannot make `case`'s call: an argument it needs that the release's `api`
        does not take (at a value other than the default), or None."""
        known = self.offer.arguments.get(api.name) if self.offer is not None else None
        if known is None:
            return None
        call = self.call(case, api)
        if not isinstance(call, ApiCall):
            return None
        for name, value in (*call.kwargs, *(call.init or ())):
            if name not in known:
                return f"{self.offer.release}'s {api.name} has no argument {name} (the case needs {name}={value!r})"
        return None

    def load(self) -> None:
        """Import the framework; raise FrameworkUnavailable(reason) when it cannot be."""
        raise NotImplementedError

    def close(self) -> None:
        """End what `load` started outside this process (R torch's R); the worker calls it when the run is done."""

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

    def unsupported_part(self, api: Api, part: str) -> str | None:
        """Why `api` cannot produce `part`: a gradient with respect to an argument it does not differentiate, or
        one in a mode without autograd."""
        if part != "forward" and self.mode != EAGER:
            mode = next((m for m in self.modes if m.name == self.mode), None)
            if mode is not None and not mode.gradients:
                return f"mode {mode.name} has no gradients ({mode.about})"
        needs = {"grad_input": ("input",), "grad_target": ("target",), "grad2_input": ("input", "target")}
        missing = [arg for arg in needs.get(part, ()) if arg not in api.grads]
        if missing:
            return f"{api.name} does not differentiate with respect to {missing[0]}"
        if part == "grad2_input" and not api.second_order:
            return f"{api.name} has no double backward"
        return None

    def build(self, case: Case, device: str) -> tuple[Any, Any]:
        """The framework's (input, target) tensors for `case` on `device`, in the case's layout."""
        raise NotImplementedError

    def call(self, case: Case, api: Api) -> ApiCall:
        """The call `api` makes for `case`: what `invoke` runs and what the reproducer shows."""
        raise NotImplementedError

    def invoke(self, case: Case, api: Api, inputs: tuple[Any, Any]) -> Any:
        """Call `api` on already built inputs and return the framework's raw result: by default the
        adapter's `call`, made as stated (an adapter wraps this in what its framework needs around it)."""
        x, t = inputs
        return self.call(case, api).apply(x, t)

    def to_numpy(self, result: Any) -> tuple[np.ndarray, str, tuple[int, ...]]:
        """The raw result as (float64 values, dtype name, shape)."""
        raise NotImplementedError

    def gradient(self, case: Case, api: Api, device: str, part: str) -> Any:
        """The framework's own autograd gradient for `part` ("grad_input" or "grad_target"), with the
        upstream gradient `model.upstream_gradient(result shape)`; None if the framework gives none."""
        raise NotImplementedError

    def is_no_kernel(self, exc: Exception) -> bool:
        """Whether `exc` is the framework saying it has no kernel for this device or dtype."""
        return False

    def describe_exception(self, exc: Exception) -> str:
        """The message recorded for `exc`: the framework's own, less anything that depends on what ran
        before it in the process (so one call gives one message in any run, shard or baseline)."""
        return str(exc)

    def repro_source(self, case: Case, api: Api, device: str, part: str) -> str:
        """Python lines, for a standalone script, that turn the float64 arrays `x_values` and
        `t_values` into the framework's tensors, call `api` (and its autograd for a gradient
        part, with `upstream(shape)` as the upstream gradient) and leave a float64 NumPy
        array in `result` (and the framework's dtype name, as the run records it, in `result_dtype` where
        they can). They may import only the framework and NumPy. The API call itself is
        `self.call(case, api).source()`, so the reproducer makes the call the run made."""
        raise NotImplementedError

    def repro_script(self, case: Case, api: Api, device: str, part: str, about: tuple[str, ...],
                     expected: Expected, recorded: str = "a value") -> tuple[str, str]:
        """A standalone reproducer script and its file suffix. `about` is what it opens with (the case,
        the API, the verdict), `expected` the spec's value or error, which it prints beside the result;
        `recorded` what the run's call gave ("a value", "a value of another dtype" or "raises <type>"),
        which decides its exit status.

        The default is a Python script around `repro_source`; an adapter of a framework in another
        language (R torch) writes the whole script in that language instead."""
        check_script_names(case, device, part, self.known_devices)
        return python_repro_script(self.name, self.repro_source(case, api, device, part), case, about, expected,
                                   recorded), ".py"

    def snippet(self, case: Case, api: Api, device: str, part: str, expected: Expected) -> str | None:
        """A short standalone snippet for an upstream issue: the case's values as decimal literals, the
        reproducer's framework lines (`repro_source`) without their scaffolding, and the result printed beside
        the spec's expected value. None for an adapter whose reproducer is in another language."""
        if type(self).repro_source is Adapter.repro_source:
            return None
        check_script_names(case, device, part, self.known_devices)
        return python_snippet(self.repro_source(case, api, device, part), case, part, expected)

    def run(self, case: Case, api: Api, device: str, part: str) -> Observation:
        """Forward: build (once per case and device), invoke, convert. Gradients: the framework's autograd.
        Exceptions come back as data; a None gradient is a MissingGradient observation, a ModeFallback one a
        fallback observation."""
        if part == "forward":
            return call_observed(lambda: self.invoke(case, api, self._cache.get(case, device, self.build)),
                                 self.to_numpy, self.is_no_kernel, self.describe_exception)

        def grad():
            value = self.gradient(case, api, device, part)
            if value is None:
                raise MissingGradient(f"{api.name} returned no gradient (None) for {part}")
            return value
        return call_observed(grad, self.to_numpy, self.is_no_kernel, self.describe_exception)

    @property
    def _cache(self) -> "TensorCache":
        cache = self.__dict__.get("_tensor_cache")
        if cache is None:
            cache = self.__dict__["_tensor_cache"] = TensorCache()
        return cache

    def carried_profile(self) -> Path | dict | None:
        """The profile the adapter carries (`profile`), a relative path taken from its module's folder."""
        profile = type(self).profile
        if profile is None or isinstance(profile, dict):
            return profile
        path = Path(profile)
        module = sys.modules.get(type(self).__module__)
        if not path.is_absolute() and getattr(module, "__file__", None):
            path = Path(module.__file__).parent / path
        return path

    def mode_names(self) -> tuple[str, ...]:
        """Every mode the adapter can make its calls in, eager first."""
        return (EAGER, *(m.name for m in self.modes))

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


# What an adapter needs to write its reproducer (docs/guide/ports.md): public, kept across releases.
REPRODUCER_HELPERS = ("ApiCall", "layout_buffer", "layout_buffer_source", "layout_view_source", "check_script_names",
                      "script_devices", "python_repro_script", "python_docstring", "python_comment", "hex_floats",
                      "call_observed", "numpy_source", "fill_value", "construction_source")


def _same_value(value: Any, default: Any) -> bool:
    """Whether a call's literal is the default (False is not 0, nor None False)."""
    return type(value) is type(default) and value == default
