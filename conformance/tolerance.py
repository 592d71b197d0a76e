"""The spec's error bounds (spec: tolerance): pointwise, summation and reduction.

Owns the arithmetic of the tolerance policy and nothing else; it never widens a
bound for a case. All inputs are NumPy arrays or scalars in extended precision.
"""

from __future__ import annotations

import math

import numpy as np

from conformance.model import Spec


def pointwise_bound(magnitude: np.ndarray, sensitivity: np.ndarray, result_dtype: str, spec: Spec) -> np.ndarray:
    """factor * (u * (|term_1| + |term_2|) + tiny * (1 + s)), per element (spec: tolerance.pointwise).

    Is equivalent to ``8 * (2**-24 * (abs(t * log(t)) + abs(t * x)) + 2**-149)`` for float32
    without log_target (s = 0), and to ``8 * (2**-24 * (abs(exp(t) * t) + abs(exp(t) * x))
    + 2**-149 * (1 + abs(t - x)))`` with it.
    """
    u = spec.unit_roundoff(result_dtype)
    return spec.tolerance_factor() * (magnitude * u + spec.smallest_subnormal(result_dtype) * (1 + sensitivity))


def summation_gamma(n: int, u: float) -> float:
    """Relative error of a tree summation of n terms: (ceil(log2 n) + 1) * u; 0 for n = 0."""
    return (math.ceil(math.log2(n)) + 1) * u if n > 0 else 0.0


def reduction_bound(pointwise_bounds: np.ndarray, loss: np.ndarray, divisor: int, value, u: float):
    """(sum pointwise_bound + gamma(n) * sum |L|) / divisor + 2u |value| (spec: tolerance.reduction).

    Is equivalent to ``(b.sum() + gamma(n) * abs(L).sum()) / d + 2 * u * abs(value)``.
    """
    wide = pointwise_bounds.dtype.type
    gamma = summation_gamma(loss.size, u)
    with np.errstate(all="ignore"):
        spread = pointwise_bounds.sum(dtype=wide) + wide(gamma) * np.abs(loss).sum(dtype=wide)
        return spread / wide(divisor or 1) + wide(2 * u) * np.abs(value)

