"""One call of a framework API, stated once (`ApiCall`): the run resolves and makes it on the loaded framework,
the reproducer prints it as source, so a reproducer makes exactly the call the run made.

Owns the call's shape and its literals only: it imports no framework (it looks the API up on a module the
adapter's load() already imported), and it never fits a call to a release (adapters/offer.py does).
"""

from __future__ import annotations

import keyword
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable


_LITERALS = (str, bool, int, float, type(None))  # values a reproducer states as their repr


@dataclass(frozen=True)
class ApiCall:
    """One call of a framework API, stated once: `invoke` resolves and calls it, `repro_source` prints it,
    so a reproducer shows exactly what the run called.

    `path` is the dotted name a user types, its first part the framework's module. `args` names the
    positional arguments in the order passed: "x" the input, "t" the target (Keras takes
    (y_true, y_pred), so ("t", "x")). `kwargs` are the call's keyword arguments. A module-style API
    (torch.nn.KLDivLoss) is built first: `init` holds its constructor's keyword arguments, and None
    says `path` is a function called directly. Every value is a plain literal, so text from a case
    file (a reduction string) enters a reproducer only as its repr, never as code.
    """

    path: str
    args: tuple[str, ...] = ("x", "t")
    kwargs: tuple[tuple[str, Any], ...] = ()
    init: tuple[tuple[str, Any], ...] | None = None

    @classmethod
    def function(cls, path: str, /, *args: str, **kwargs: Any) -> "ApiCall":
        """`path(*args, **kwargs)`."""
        return cls(path, args, tuple(kwargs.items()))

    @classmethod
    def module(cls, path: str, /, *args: str, **init: Any) -> "ApiCall":
        """`path(**init)(*args)`: a loss object built, then called."""
        return cls(path, args, (), tuple(init.items()))

    def __post_init__(self) -> None:
        names = [*self.path.split("."), *(k for k, _ in self.kwargs), *(k for k, _ in self.init or ())]
        bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n)]
        if bad or not set(self.args) <= {"x", "t"}:
            raise ValueError(f"not a plain call: {self.path} {self.args} (names {bad})")
        for name, value in (*self.kwargs, *(self.init or ())):
            if type(value) not in _LITERALS or (type(value) is float and not math.isfinite(value)):
                raise ValueError(f"{name}={value!r} is not a literal a reproducer can state")

    @property
    def root(self) -> str:
        """The framework module the path starts from ("torch")."""
        return self.path.split(".")[0]

    def resolve(self) -> Callable[..., Any]:
        """The API object, found by attribute lookup on the already imported framework module."""
        first, *rest = self.path.split(".")
        obj = sys.modules.get(first)
        if obj is None:
            raise RuntimeError(f"{first} is not imported: the adapter's load() imports it before any call")
        for name in rest:
            obj = getattr(obj, name)
        return obj

    def bound(self) -> Callable[[Any, Any], Any]:
        """The call as a function of (input, target), a module-style API built once (autodiff may call it
        again and again)."""
        fn = self.resolve()
        if self.init is not None:
            fn = fn(**dict(self.init))
        kwargs = dict(self.kwargs)
        return lambda x, t: fn(*({"x": x, "t": t}[name] for name in self.args), **kwargs)

    def apply(self, x: Any, t: Any) -> Any:
        """Make the call on the input `x` and target `t`."""
        return self.bound()(x, t)

    def source(self) -> str:
        """The call as Python source, on variables named x and t, each value as its repr."""
        def keywords(pairs):
            return [f"{name}={value!r}" for name, value in pairs]
        call = ", ".join([*self.args, *keywords(self.kwargs)])
        if self.init is None:
            return f"{self.path}({call})"
        return f"{self.path}({', '.join(keywords(self.init))})({call})"
