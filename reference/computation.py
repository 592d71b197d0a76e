"""The dtypes a call is made and computed in: what the framework infers for values given without a dtype (spec:
dtypes.inferred), the dtype it computes in (spec: dtypes.computation), the result dtype or one fixed dtype
that the API casts both arguments to first, whatever the caller's dtypes, and whether that arithmetic keeps
subnormals (spec: dtypes.subnormals).

An inferred dtype makes another call: its tensors have that dtype, and it is judged as that call. Under a fixed
computation dtype the call is the same call made with both arguments cast to it, so the forward's expectation
is that call's, and each gradient is that call's, cast back to its argument's dtype as the cast's derivative
returns it. Never imports a framework.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from conformance.core.case import NUMPY_DEFAULT, Case, DtypePair
from conformance.core.model import Expected, Spec
from conformance.core.rounding import round_to_dtype, smallest_normal


def as_inferred(case: Case, spec: Spec) -> Case:
    """The call as the framework makes it: for values given without a dtype, in the dtype the spec's choices infer
    (spec: dtypes.inferred), which is the case's own under the spec's; the case itself otherwise."""
    made = case.construction
    if not made.inferred:
        return case
    inferred = spec.data["dtypes"]["inferred"]
    if made.source == "numpy":  # a floating choice narrows a wider array to it; the other keeps the array's dtype
        dtype = inferred["numpy_array"]["choice"]
        if dtype not in spec.floating_dtypes or spec.unit_roundoff(case.dtype.input) >= spec.unit_roundoff(dtype):
            return case
    else:
        dtype = inferred["python_float"]["choice"]
    if case.dtype == DtypePair(dtype, dtype):
        return case
    return dataclasses.replace(case, dtype=DtypePair(dtype, dtype), construction=NUMPY_DEFAULT)


def computed_case(case: Case, spec: Spec) -> Case | None:
    """The call as the spec's computation dtype makes it: both arguments, in their own dtypes, cast to that dtype
    (overflowing to +-inf as a cast does); None where the spec computes in the result dtype, or the arguments
    already have it."""
    dtype = spec.data["dtypes"]["computation"]["choice"]  # a floating dtype's name, or the result dtype's choice
    if dtype not in spec.floating_dtypes or case.dtype == DtypePair(dtype, dtype):
        return None
    # each argument as the caller's dtype holds it, then cast
    cast = {name: round_to_dtype(round_to_dtype(getattr(case, name), getattr(case.dtype, name)), dtype)
            for name in ("input", "target")}
    return dataclasses.replace(case, **cast, dtype=DtypePair(dtype, dtype), construction=NUMPY_DEFAULT)


def read_flushed(case: Case, spec: Spec) -> Case:
    """The call as arithmetic that flushes subnormals reads it (spec: dtypes.subnormals = flushed): each argument
    below the smallest normal of the dtype it is computed in is a zero of its sign; the case itself under the
    spec's choice, or where no argument is."""
    if spec.data["dtypes"]["subnormals"]["choice"] != "flushed":
        return case
    read = {name: _flushed(getattr(case, name), getattr(case.dtype, name)) for name in ("input", "target")}
    if all(np.array_equal(read[name], getattr(case, name), equal_nan=True) for name in read):
        return case
    return dataclasses.replace(case, **read)


def flushed_result(expected: Expected, spec: Spec) -> Expected:
    """The expectation as arithmetic that flushes subnormals returns it (spec: dtypes.subnormals = flushed): each
    element below the smallest normal of the dtype its result is computed in is a zero of its sign, within the
    bound it had; `expected` itself under the spec's choice."""
    if spec.data["dtypes"]["subnormals"]["choice"] != "flushed" or expected.value is None:
        return expected
    dtype = expected.result_dtype
    return dataclasses.replace(expected, value=_flushed(expected.value, dtype),
                               alternate=None if expected.alternate is None else _flushed(expected.alternate, dtype))


def _flushed(values, dtype: str) -> np.ndarray:
    """`values` with those below the smallest normal of the dtype a CPU computes `dtype` in (float64 for float64,
    float32 for the narrower ones, so a float16 subnormal is not one there) made zeros of their signs."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(v) < smallest_normal("float64" if dtype == "float64" else "float32"),
                        np.copysign(0.0, v), v)


def cast_back(computed: Expected, dtype: str, spec: Spec) -> Expected:
    """A gradient of the computed call, returned in its argument's `dtype`: rounded to it once more (spec:
    dtypes.computation), so twice its unit roundoff times the magnitude, plus its smallest subnormal, is added to
    the bound; a magnitude past the dtype's range is +-inf, as the cast gives it."""
    if computed.error_id is not None or computed.result_dtype == dtype:
        return computed
    wide = np.asarray(computed.value, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        value = round_to_dtype(wide, dtype)  # NaN and +-inf as they are
        bound = np.asarray(computed.bound, dtype=np.float64)
        bound = bound * (1 + spec.unit_roundoff(dtype)) + 2 * spec.unit_roundoff(dtype) * np.abs(wide) \
            + spec.smallest_subnormal(dtype)
        bound = np.where(np.isfinite(value) | ~np.isfinite(wide), bound, 0.0)  # an overflow is judged by identity
    return dataclasses.replace(computed, result_dtype=dtype, value=value, bound=bound, alternate=None)
