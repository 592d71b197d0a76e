"""dtypes.subnormals: arithmetic that flushes subnormals (x86's DAZ and FTZ modes, which XLA's CPU kernels run in).

Each expected number is worked out here by hand: a target below 2**-126 (float32, bfloat16) or 2**-1022 (float64)
is read as 0, so its term is the zero target's (0) and its input gradient -0 * scale; a gradient below that
smallest normal comes back 0. float16 is computed in float32, where its subnormals are normal: they stay.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.choices import Alternative, touched_paths, with_alternatives
from conformance.core.model import Observation
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from tests.helpers import make_case

FLUSHED = (Alternative("dtypes.subnormals", "flushed"),)
X = -1.0
UPSTREAM = (0.75, 0.875, 1.0)  # spec: gradients.upstream, unreduced: 0.75 + 0.125 * (i % 5)


@pytest.mark.parametrize("dtype, tiny", [("float32", 1e-40), ("bfloat16", 2.0**-130), ("float64", 1e-310)])
def test_a_subnormal_target_is_read_as_zero(spec, dtype, tiny):
    case = make_case([X, X], [float(np.float32(tiny)) if dtype == "float32" else tiny, 0.5], dtype=dtype)
    flushed = with_alternatives(spec, FLUSHED)
    assert "dtypes.subnormals" in touched_paths(case)
    # the spec: t * (log t - x), a tiny negative term; flushed: the zero target's term, 0
    assert expected_forward(case, spec).value[0] < 0
    assert expected_forward(case, flushed).value[0] == 0
    # grad_input = -t * upstream: subnormal under the spec, -0 flushed
    assert expected_grad(case, spec, "grad_input").value[0] == pytest.approx(-case.target[0] * UPSTREAM[0], rel=1e-12)
    assert expected_grad(case, flushed, "grad_input").value[0] == 0
    # the normal element is the spec's own
    assert expected_forward(case, flushed).value[1] == expected_forward(case, spec).value[1]


def test_a_result_below_the_smallest_normal_is_zero_though_its_arguments_are_normal(spec):
    """t = 2**-126 is float32's smallest normal: -t * 0.75 is subnormal, flushed to -0."""
    t = 2.0**-126
    case = make_case([X], [t], dtype="float32")
    assert expected_grad(case, spec, "grad_input").value[0] == -0.75 * t
    got = expected_grad(case, with_alternatives(spec, FLUSHED), "grad_input").value[0]
    assert got == 0 and np.signbit(got)


def test_float16_keeps_its_subnormals(spec):
    """2**-20 is a float16 subnormal, and a normal float32 value: computed in float32, nothing is flushed."""
    case = make_case([np.float16(X)], [2.0**-20], dtype="float16")
    flushed = with_alternatives(spec, FLUSHED)
    for part in ("grad_input", "grad_target"):
        assert expected_grad(case, flushed, part).value[0] == expected_grad(case, spec, part).value[0]
    assert expected_forward(case, flushed).value[0] == expected_forward(case, spec).value[0]


def test_explain_names_flushed_subnormals(spec):
    case = make_case([X, X], [1e-310, 0.5], dtype="float64")
    canonical = expected_grad(case, spec, "grad_input").value
    observed = Observation(value=np.array([-0.0, canonical[1]]), dtype="float64", shape=(2,))
    assert explain(case, observed, spec, "grad_input") == FLUSHED
