"""Maps framework names to adapter classes, validating each adapter when it is loaded.

Adapters outside this repository register under the entry-point group
`kl_conformance.adapters` (name = "module:Class"). Listing names never imports a framework.
"""

from __future__ import annotations

import importlib
import inspect
from importlib import metadata
from pathlib import Path

from conformance.adapters.base import Adapter, Api
from conformance.adapters.port import FunctionAdapter, function_problem
from conformance.core.errors import UsageError

BUILTIN = {
    "torch": "conformance.adapters.torch:TorchAdapter",
    "oneflow": "conformance.adapters.oneflow:OneFlowAdapter",
    "mindspore": "conformance.adapters.mindspore:MindSporeAdapter",
    "mlx": "conformance.adapters.mlx:MlxAdapter",
    "paddle": "conformance.adapters.paddle:PaddleAdapter",
    "rtorch": "conformance.adapters.rtorch:RTorchAdapter",
    "optax": "conformance.adapters.optax:OptaxAdapter",
    "keras": "conformance.adapters.keras:KerasAdapter",
}
ENTRY_POINT_GROUP = "kl_conformance.adapters"


def known_adapters() -> dict[str, str]:
    """Every adapter name with its "module:Class" path, built-in and from entry points."""
    found = dict(BUILTIN)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def is_known(name: str) -> bool:
    """A registered name, or an explicit "module:Class" path to an adapter outside the registry."""
    return name in known_adapters() or ":" in name


def unknown_framework(name: str, where: str = "--framework") -> UsageError:
    """The error for a framework name that is neither registered nor a "module:name" path."""
    return UsageError(f"unknown framework {name!r}", where=where,
                      fix=f"use one of {sorted(known_adapters())}, package.module:AdapterClass or "
                          "package.module:function (a kl_div of torch's signature on NumPy arrays)")


def get_adapter(name: str) -> Adapter:
    """Instantiate and validate the adapter called `name` (its framework is not imported yet).

    `name` is a registered framework name, "package.module:Class" for an adapter that is not registered (a
    private build, a test adapter), or "package.module:function" for a function with torch's kl_div signature
    on NumPy arrays, judged as a FunctionAdapter (adapters/port.py: the forward only).
    """
    if not is_known(name):
        raise unknown_framework(name)
    target = known_adapters().get(name, name)
    module_name, _, attr = target.partition(":")
    origin = "" if target == name else f" (framework {name!r} is {target!r})"  # a registered name
    obj = getattr(_imported(module_name, origin), attr, None)  # any text: a module's __getattr__ may make the name
    if obj is None:
        raise UsageError(f"module {module_name!r} has no {attr!r}{origin}", where="--framework",
                         fix=f"name an Adapter class or a kl_div function defined in {module_name} after the colon")
    if inspect.isclass(obj):
        validate_adapter(obj, source=module_name)
        return obj()
    problem = function_problem(target, obj)
    if problem is not None:
        raise UsageError(f"{attr} {problem}", file=module_name, where=attr,
                         fix="name a function of torch's signature, or an Adapter class (docs/guide/ports.md)")
    return type(f"FunctionAdapter({target})", (FunctionAdapter,), {"function": target})()


def _imported(module_name: str, origin: str):
    """The module an adapter or function is named from; a module that does not exist and one whose own import
    fails are told apart (the fixes differ)."""
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise UsageError(f"{module_name!r} is not a module path{origin}", where="--framework",
                         fix="write package.module:AdapterClass or package.module:function")
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise UsageError(f"no module named {module_name!r}{origin}", where="--framework",
                             fix="check the module path: the module must be importable here (installed, or on "
                                 "PYTHONPATH: PYTHONPATH=. for one in the current directory)") from None
        failure = exc
    except Exception as exc:  # the module exists, and its own code raised
        failure = exc
    said = (str(failure).splitlines() or [""])[0][:300]
    raise UsageError(f"importing module {module_name!r} failed: {type(failure).__name__}"
                     + (f": {said}" if said else "") + origin, where="--framework",
                     fix=f"install what {module_name} imports, or fix the module (--debug shows the traceback)"
                     ) from failure


def validate_adapter(cls: type, source: str) -> None:
    """Check an adapter class has every piece the runner needs, as pluggy checks plugins."""
    def bad(problem: str, fix: str) -> UsageError:
        return UsageError(problem, file=source, where=getattr(cls, "__name__", str(cls)), fix=fix)

    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise bad("is not a subclass of conformance.adapters.base.Adapter", "derive the adapter from Adapter")
    for attr in ("name", "apis", "known_devices"):
        if not hasattr(cls, attr):
            raise bad(f"missing class attribute {attr!r}", f"define {attr} on the adapter class")
    for method in ("load", "version", "devices"):
        if getattr(cls, method) is getattr(Adapter, method):
            raise bad(f"does not implement {method}()", f"implement {method}() (see adapters/base.py)")
    if cls.run is Adapter.run:  # the default run() composes build(), invoke() and to_numpy()
        for method in ("build", "to_numpy"):
            if getattr(cls, method) is getattr(Adapter, method):
                raise bad(f"does not implement {method}() (or run())", f"implement {method}() (see adapters/base.py)")
        if cls.invoke is Adapter.invoke and cls.call is Adapter.call:  # the default invoke() makes call()'s call
            raise bad("does not implement call() (or invoke(), or run())", "implement call() (see adapters/base.py)")
    if not cls.apis or not all(isinstance(api, Api) for api in cls.apis):
        raise bad("apis must be a non-empty tuple of Api", "list each API as Api('package.path.name', ...)")
    if cls.profile is not None and not isinstance(cls.profile, (str, Path, dict)):
        raise bad("profile must be a file path or a dict", "name the profile file (relative to the adapter's "
                                                          "module) or give the profile as a dict")
    if not all(api.mirrors is None or isinstance(api.mirrors, str) for api in cls.apis):
        raise bad("an Api's mirrors must be an API name", "write mirrors='package.path.name' or leave it out")
    names = [api.name for api in cls.apis]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise bad(f"duplicate API names {duplicates}", "give each API row a unique dotted name")
    foreign = sorted({api.implementation for api in cls.apis if api.implementation is not None} - set(names))
    if foreign:
        raise bad(f"an Api's implementation names {foreign}, which is not one of its APIs {names}",
                  "name the API whose implementation it calls (implementation='package.path.kl_div'), or leave it out")
