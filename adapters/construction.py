"""How a case's float64 values become what a framework's constructor is handed: the C-contiguous buffer and
the view that give the case's layout, the NumPy array of its dtype, the value of a fill, and the same as
reproducer source.

Works on NumPy arrays and source text only: each framework makes its own tensors from them (in its adapter's
build()), and nothing here imports a framework.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from conformance.core.case import Case


def layout_buffer(array: np.ndarray, layout: str,
                  swap: Callable[[Any], Any] = lambda t: t.transpose(-1, -2)) -> tuple[np.ndarray, Callable[[Any], Any]]:
    """A C-contiguous buffer and the view to take of it so the view holds `array` in `layout`.

    transposed: the buffer holds the last two axes swapped and the view, `swap`, swaps
    them back (each framework passes its own swap of the last two axes).
    strided: the buffer doubles the last axis and the view takes every other element.
    """
    if layout == "contiguous":
        return np.array(array, order="C"), lambda t: t  # not ascontiguousarray: it makes 0-d arrays 1-d
    if layout == "transposed":
        return np.ascontiguousarray(np.swapaxes(array, -1, -2)), swap
    if layout == "strided":
        buffer = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), dtype=array.dtype)
        buffer[..., ::2] = array
        return buffer, lambda t: t[..., ::2]
    raise ValueError(f"unknown layout {layout!r}")


def layout_buffer_source(name: str, layout: str) -> str:
    """Python source for the buffer `layout_buffer` builds from the NumPy array called `name` (a
    reproducer's own variable), for the reproducer to take the same view of."""
    if layout == "transposed":
        return f"np.ascontiguousarray(np.swapaxes({name}, -1, -2))"
    if layout == "strided":
        return f"np.repeat({name}, 2, axis=-1)"  # every other element of the view is the value
    return f"np.array({name}, order='C')"


def layout_view_source(expr: str, layout: str, swap: str = "{}.transpose(-1, -2)") -> str:
    """Python source for the view `layout_buffer` takes of the tensor `expr` built from `layout_buffer_source`'s
    buffer: `swap` (a format string of `expr`) swaps the last two axes back for transposed, every other element
    of the last axis for strided."""
    if layout == "transposed":
        return swap.format(expr)
    if layout == "strided":
        return f"{expr}[..., ::2]"
    if layout == "contiguous":
        return expr
    raise ValueError(f"unknown layout {layout!r}")


NUMPY_FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def numpy_source(buffer: np.ndarray, dtype: str) -> np.ndarray:
    """The NumPy array a case of construction `from=numpy,inferred` hands its framework: `buffer` (float64, the
    case's values) in the case's own dtype, so the framework infers that dtype from the array (spec:
    dtypes.inferred.numpy_array)."""
    return np.asarray(buffer).astype(NUMPY_FLOATS[dtype])


def fill_value(buffer: np.ndarray) -> float:
    """The one value a fill factory (`full(shape, value)`) is given to make `buffer`: its only element, or 0.0
    for an empty one. A buffer of several values has no fill (the generator gives a factory none)."""
    flat = np.asarray(buffer, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        return 0.0
    if np.unique(flat.view(np.uint64)).size > 1:
        raise ValueError("a fill factory makes one value; this tensor holds several")
    return float(flat[0])


def construction_source(name: str, values: np.ndarray, case: Case, dtype: str) -> str:
    """Python source for what a reproducer hands the framework's constructor for the case's construction, from
    its NumPy array `name` holding `values` (in the case's layout): the buffer `layout_buffer_source` makes
    (from=numpy), that buffer in the case's dtype (from=numpy,inferred), its nested lists of Python floats
    (from=list: `.tolist()`, a bare float for a 0-d one), or the shape and the value of a fill (from=factory:
    "(3, 0), float.fromhex(...)", both literals)."""
    made = case.construction
    buffer = layout_buffer_source(name, case.layout)
    if made.source == "list":
        return f"{buffer}.tolist()"
    if made.source == "factory":
        array, _ = layout_buffer(values, case.layout)
        return f"{tuple(array.shape)!r}, float.fromhex({fill_value(array).hex()!r})"
    if made.inferred:
        return f"{buffer}.astype(np.{NUMPY_FLOATS[dtype].__name__})"
    return buffer
