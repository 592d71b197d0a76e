"""What the installed release of a framework offers (`Offer`: the APIs it lacks, the arguments each API takes,
the dtypes it has no tensors of, the harness options that degraded), how an adapter learns it once loaded, and
how a call is fitted to it (`OfferDefaults`, which `Adapter` derives from).

Reads the already loaded framework by attribute lookup and signatures only: it never imports a framework that
load() did not, and never calls an API.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from conformance.adapters.apicall import ApiCall
from conformance.adapters.declaration import Api
from conformance.core.case import Case
from conformance.core.defects import release_of
from conformance.core.model import FLOAT_DTYPES
from conformance.core.rounding import INTEGER_DTYPES


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


class OfferDefaults:
    """What an adapter may override about its release, and the machinery that learns the release once loaded.

    An adapter may override `api_unavailable` (to say where an API went) and `dtype_unavailable`, and calls
    `degraded` for an option of the harness's own that the release does not take; `learn_release`, `fit_call`
    and `missing_argument` are the harness's. They read the adapter's protocol: `name`, `apis`, `version()`
    and `call()`.
    """

    # What the installed release offers (Offer): set once loaded (the worker's learn_release, sent to the
    # parent); None before, when every API is taken as present and every argument is passed.
    offer: Offer | None = None
    # The value an optional argument has when a call leaves it out, in every release: a call whose release
    # lacks the argument leaves it out at this value (Paddle 2.6's kl_div has no log_target; False is its
    # behaviour), and a case that needs another value is unsupported on that release.
    argument_defaults: ClassVar[dict[str, Any]] = {"log_target": False}

    def release(self) -> str:
        """The framework and its installed release in words ("paddle 2.6.2"), for the reasons given."""
        return f"{self.name} {release_of(str(self.version()))}"

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


def _same_value(value: Any, default: Any) -> bool:
    """Whether a call's literal is the default (False is not 0, nor None False)."""
    return type(value) is type(default) and value == default
