"""The generator's exp, exp2 and log are correctly rounded, so cases are the same under every NumPy."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from conformance.cases import rounded_math
from tests.helpers import DEFAULT_SUITE_DIGEST, default_suite_digest

mpmath.mp.prec = 200


def _correct(value) -> float:
    """mpmath's value rounded once to float64 (through a 60-digit string: mpmath's own float() double-rounds
    subnormals)."""
    return float(mpmath.nstr(value, 60))


RNG = np.random.default_rng(20261124)
CASES = {
    "exp": (rounded_math.exp, mpmath.exp, np.concatenate([RNG.uniform(-745.2, 709.7, 3000), RNG.normal(0, 3, 3000),
                                                          RNG.uniform(-745.2, -708.0, 500)])),
    "exp2": (rounded_math.exp2, lambda v: mpmath.mpf(2) ** v, np.concatenate([RNG.uniform(-1074.5, 1023.9, 3000),
                                                                               RNG.uniform(-160.0, -10.0, 3000)])),
    "log": (rounded_math.log, mpmath.log, np.concatenate([np.exp(RNG.uniform(-744, 709, 3000)), RNG.uniform(0, 2, 3000),
                                                          1 + RNG.normal(0, 1e-9, 500), [5e-324, 1.0]])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_value_is_correctly_rounded(name):
    ours, exact, points = CASES[name]
    got = ours(points)
    wrong = [(float(p), float(g), _correct(exact(mpmath.mpf(float(p))))) for p, g in zip(points, got)
             if g != _correct(exact(mpmath.mpf(float(p))))]
    assert not wrong, wrong[:5]
    # NumPy's own function is not (the reason this module exists); if it were, the check above would prove little
    numpy_fn = {"exp": np.exp, "exp2": np.exp2, "log": np.log}[name]
    with np.errstate(all="ignore"):
        assert (numpy_fn(points) != got).any() or name == "exp2"


def test_specials_take_ieee_values_and_shapes_are_kept():
    with np.errstate(all="ignore"):
        specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 800.0, -800.0, -1.0])
        assert np.array_equal(rounded_math.exp(specials), np.exp(specials), equal_nan=True)
        assert np.array_equal(rounded_math.log(specials), np.log(specials), equal_nan=True)
    assert rounded_math.exp(np.zeros((2, 0, 3))).shape == (2, 0, 3)
    assert rounded_math.log(2.0).shape == () and float(rounded_math.log(2.0)) == 0.6931471805599453


def test_the_default_suite_is_the_pinned_one():
    # the same digest is checked in every framework's environment (tests/e2e/test_case_values.py)
    assert default_suite_digest() == DEFAULT_SUITE_DIGEST
