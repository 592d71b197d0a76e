"""Rounding to narrow dtypes: checked against NumPy's casts and bit-level bfloat16 rounding."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.rounding import is_representable, round_to_dtype


def _values(rng):
    x = rng.standard_normal(50_000) * 10.0 ** rng.integers(-45, 39, 50_000)
    return np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 2.0**-25, 3 * 2.0**-26]])


@pytest.mark.parametrize("dtype, cast", [("float16", np.float16), ("float32", np.float32)])
def test_matches_numpy_casts(dtype, cast):
    x = _values(np.random.default_rng(0))
    with np.errstate(over="ignore"):
        want = x.astype(cast).astype(np.float64)
    np.testing.assert_array_equal(round_to_dtype(x, dtype), want)


def test_bfloat16_matches_round_half_even_on_the_float32_bits():
    """bfloat16 is the top 16 bits of float32; for float32 inputs, RNE on the low 16 bits is exact."""
    rng = np.random.default_rng(1)
    x32 = (rng.standard_normal(50_000) * 10.0 ** rng.integers(-38, 38, 50_000)).astype(np.float32)
    bits = x32.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    want = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    np.testing.assert_array_equal(round_to_dtype(x32.astype(np.float64), "bfloat16"), want)


def test_bfloat16_rounds_directly_not_through_float32():
    """60032.0009 is just above the midpoint of bfloat16's 59904 and 60160: it rounds up.
    (Rounding through float32 first would land on the midpoint and tie to even, 59904.)"""
    assert round_to_dtype(np.array([60032.0009]), "bfloat16")[0] == 60160.0


def test_representability():
    assert is_representable(np.array([0.5, -2.0, np.inf, np.nan]), "bfloat16")
    assert not is_representable(np.array([0.1]), "float16")
    assert not is_representable(np.array([2.0]), "bool")
