"""Round float64 values to the value set of a narrower dtype (float16, bfloat16, float32).

NumPy has no bfloat16, so every floating format is handled by one exact routine:
scale to the format's quantum at that binade and round half to even. It needs
nothing but NumPy, which is why the case generator may import it too.
"""

from __future__ import annotations

import numpy as np

from conformance.core.model import FLOAT_FORMATS

_FORMATS = {name: f for name, f in FLOAT_FORMATS.items() if name != "float64"}  # float64 needs no rounding
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "bool")


def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Return float64 values rounded to nearest-even in `dtype` (overflow to +-inf).

    Is equivalent to ``values.astype(np.float16).astype(np.float64)`` for float16,
    and to the same double cast through float32 for float32.

    Integer dtypes round toward zero and bool maps non-zero to 1, as a cast does.
    """
    x = np.asarray(values, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype == "bool":
        return (x != 0).astype(np.float64)
    if dtype in INTEGER_DTYPES:
        return np.trunc(x)
    if dtype not in _FORMATS:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_FORMATS) + ['float64']}")
    return _to_quantum(x, dtype, np.rint)


def _to_quantum(x: np.ndarray, dtype: str, choose) -> np.ndarray:
    """float64 values `x` as values of a floating `dtype`: each finite nonzero one scaled to the quantum of its
    binade in `dtype` (exact), given to `choose` (which picks an integer number of quanta), scaled back, and
    +-inf past the largest finite value; zeros, NaN and infinities as they are."""
    precision, min_exp, largest = _FORMATS[dtype]
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    xf = x[finite]
    _, exp = np.frexp(xf)  # xf = m * 2**exp with 0.5 <= |m| < 1, so the leading bit is 2**(exp - 1)
    quantum_exp = np.maximum(exp - 1, min_exp) - (precision - 1)
    rounded = np.ldexp(choose(np.ldexp(xf, -quantum_exp)), quantum_exp)
    out[finite] = np.where(np.abs(rounded) > largest, np.copysign(np.inf, xf), rounded)
    return out


def smallest_normal(dtype: str) -> float:
    """The smallest positive normal value of a floating `dtype` (2**-126 for float32 and bfloat16)."""
    return 2.0 ** FLOAT_FORMATS[dtype][1]


def round_other_way(values: np.ndarray, dtype: str) -> np.ndarray:
    """The other faithful rounding of float64 values in a floating `dtype`: the neighbour on the other side of
    each value from round_to_dtype's (+-inf past the largest finite value); the value itself where `dtype` holds
    it. A function accurate to one unit in the last place (a float32 exp or log) returns one of the two.

    Is equivalent to ``nextafter(r, values)`` in `dtype`, r = round_to_dtype(values, dtype), where r != values.
    """
    x = np.asarray(values, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    # one quantum past the nearest, away from the value (a step below 2**k is the lower binade's quantum)
    return _to_quantum(x, dtype, lambda scaled: np.rint(scaled) + np.sign(scaled - np.rint(scaled)))


def round_through_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to float32 and then to `dtype`: a float16 or bfloat16 result computed in float32 and
    rounded once more, as kernels that compute half precision in float32 return it. Where a value lies near the
    midpoint of two `dtype` neighbours, the first rounding may carry it to the other one."""
    return round_to_dtype(round_to_dtype(values, "float32"), dtype)


def term_through_float32(dtype: str, log_target: bool) -> bool:
    """Whether the second way the target's term evaluated in `dtype` is rounded (spec: dtypes.argument_terms.
    choices.own_dtype) is the whole t * log(t) computed in float32 and rounded once more: a float16 or bfloat16
    target without log_target. The kernel decides it, so a sum takes it at every element."""
    narrower = dtype in _FORMATS and _FORMATS[dtype][0] < _FORMATS["float32"][0]  # fewer significand bits
    return narrower and not log_target


def second_rounding(dtype: str, log_target: bool):
    """The other way an implementation rounds the target's term evaluated in `dtype` (spec: dtypes.argument_terms.
    choices.own_dtype): a float16 or bfloat16 t * log(t) computed in float32 and rounded once more
    (round_through_float32, term_through_float32); else exp or log's other neighbour (round_other_way), which also
    holds an exp(t) computed in float32 and rounded once more, since that lands on one of the two."""
    return round_through_float32 if term_through_float32(dtype, log_target) else round_other_way


def is_representable(values: np.ndarray, dtype: str) -> bool:
    """True when every value survives rounding to `dtype` unchanged (NaN counts as representable)."""
    x = np.asarray(values, dtype=np.float64)
    r = round_to_dtype(x, dtype)
    return bool(np.all((r == x) | (np.isnan(r) & np.isnan(x))))
