"""exp, exp2 and log correctly rounded to float64, so a case's values do not depend on the NumPy that drew them.

Why: NumPy's float64 exp and log are not correctly rounded, and their last bit changes
between releases and SIMD paths (NumPy 1.26 and 2.4 on one machine drew 90 of the 718
default cases with different values). A case id must name one content wherever it is
generated: the torch environment has NumPy 2, OneFlow's NumPy 1, and `report` refuses
to merge two contents under one id (cases/digest.py).

How: each value is computed in long double and rounded to float64. That rounding is the
correctly rounded result unless the exact value may lie on the other side of a rounding
boundary, i.e. the long double result is within its own error margin of the midpoint
between two float64 numbers. Those elements (a few in a thousand, all of them where long
double is no wider than float64), and subnormal results, are recomputed in `decimal`,
whose exp and ln are correctly rounded and the same on every platform. Non-finite and
exact cases (exp(+-inf), log(0), log of a negative) take IEEE's values.

Pure functions on arrays; imports nothing of the harness.
"""

from __future__ import annotations

import decimal

import numpy as np

WIDE = np.longdouble
# The wide functions' error is at most a few units of their last place (glibc: < 1 ulp for
# exp and log in x87 extended precision); 16 units is the margin that decides "safe".
WIDE_ERROR = 16 * float(np.finfo(WIDE).eps)
TINY = float(np.finfo(np.float64).tiny)
_CONTEXT = decimal.Context(prec=40, Emin=-999999, Emax=999999)


def exp(x) -> np.ndarray:
    """e**x for float64 `x`, correctly rounded to float64."""
    return _rounded(x, np.exp, lambda d: d.exp(_CONTEXT), is_exact=lambda v: ~np.isfinite(v))


def exp2(x) -> np.ndarray:
    """2**x for float64 `x`, correctly rounded to float64."""
    ln2 = decimal.Decimal(2).ln(_CONTEXT)
    return _rounded(x, np.exp2, lambda d: (d * ln2).exp(_CONTEXT), is_exact=lambda v: ~np.isfinite(v))


def log(x) -> np.ndarray:
    """The natural logarithm of float64 `x`, correctly rounded to float64."""
    return _rounded(x, np.log, lambda d: d.ln(_CONTEXT), is_exact=lambda v: ~(np.isfinite(v) & (v > 0)) | (v == 1))


def _rounded(x, wide_fn, decimal_fn, is_exact) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        wide = wide_fn(x.astype(WIDE))
        y = wide.astype(np.float64)
        # the gap to each float64 neighbour, and where the wide result sits between them
        up, down = np.nextafter(y, np.inf), np.nextafter(y, -np.inf)
        offset = wide - y.astype(WIDE)  # exact: y is wide rounded
        half_gap = np.where(offset >= 0, up.astype(WIDE) - y, y - down.astype(WIDE)) / 2
        safe = np.abs(offset) + WIDE_ERROR * np.abs(wide) < half_gap
        safe &= np.isfinite(y) & (np.abs(y) >= TINY)
        exact = is_exact(x)
        y = np.where(exact, wide_fn(x), y)  # IEEE's values at the specials, the same everywhere
    redo = np.flatnonzero(~safe & ~exact)
    flat, values = y.reshape(-1), x.reshape(-1)
    for i in redo:
        flat[i] = float(decimal_fn(decimal.Decimal(float(values[i]))))
    return y
