"""The dtypes a call is made and computed in: what the framework infers for values given without a dtype (spec:
dtypes.inferred), and the dtype it computes in (spec: dtypes.computation), the result dtype or one fixed dtype
that the API casts both arguments to first, whatever the caller's dtypes.

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
from conformance.core.rounding import round_to_dtype


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
