"""A case: one call to make. Its keyword arguments (`Params`), the dtypes of its two tensors (`DtypePair`), how an
adapter makes those tensors (`Construction`) and lays them out (`LAYOUTS`), and the `Case` that holds its values.

Types only, beside the other types that flow (core/model.py): depends on the standard library and NumPy alone, and
never draws values (cases/generate.py does) or builds ids (cases/ids.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LAYOUTS = ("contiguous", "transposed", "strided")  # how adapters lay a case's tensors out in memory
# What an adapter makes a case's tensors from: a NumPy array (every case but the construction ones), nested lists of
# Python floats, or the framework's fill factory (`full(shape, value)`, so only for tensors of one value)
SOURCES = ("numpy", "list", "factory")


@dataclass(frozen=True)
class Params:
    """The keyword arguments of one call."""

    reduction: str = "mean"
    log_target: bool = False
    size_average: bool | None = None
    reduce: bool | None = None
    prob_input: bool = False  # input holds probabilities q, not log q (spec: dialects.*.input_space)

    @property
    def has_legacy(self) -> bool:
        return self.size_average is not None or self.reduce is not None


@dataclass(frozen=True)
class DtypePair:
    """Dtypes of input and target; equal for most cases."""

    input: str
    target: str

    @property
    def is_mixed(self) -> bool:
        return self.input != self.target

    def __str__(self) -> str:
        return self.input if not self.is_mixed else f"{self.input}:{self.target}"


@dataclass(frozen=True)
class Construction:
    """How an adapter makes a case's tensors: from what (`SOURCES`), and whether it names the dtype or lets the
    framework infer it (spec: dtypes.inferred says what the framework infers, and so what the case's dtype is).

    The default, a NumPy array with the dtype given, is how every case was made before constructions existed; only
    other constructions appear in a case id (cases/ids.py)."""

    source: str = "numpy"
    inferred: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == "numpy" and not self.inferred

    def __str__(self) -> str:
        """The id's token: "" for the default, else "from=list", "from=factory,inferred" ..."""
        return "" if self.is_default else f"from={self.source}" + (",inferred" if self.inferred else "")


NUMPY_DEFAULT = Construction()


@dataclass(frozen=True, eq=False)
class Case:
    """One call to make: parameters, inputs and how to lay them out.

    `input` and `target` are float64 arrays whose values are exactly representable
    in their dtypes (integer-valued for integer dtypes).
    """

    id: str
    params: Params
    input: np.ndarray = field(repr=False)
    target: np.ndarray = field(repr=False)
    dtype: DtypePair
    family: str
    layout: str = "contiguous"
    parts: tuple[str, ...] = ("forward",)
    source: str = "generated"
    construction: Construction = NUMPY_DEFAULT  # how the adapter makes the tensors
