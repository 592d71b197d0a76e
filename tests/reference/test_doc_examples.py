"""Worked examples printed in the frameworks' documentation (shared/seeds), against the reference.

Where an example falls on a convention the spec resolves otherwise, the test says so
and checks that the reference reproduces the documented number under the
framework's choice.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.core.choices import Alternative, with_alternatives
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

# oneflow.nn.KLDivLoss docs (shared/seeds/003): float32 tensors, printed to 4 decimals
ONEFLOW_INPUT = [-0.9021705, 0.08798598, 1.04686249]
ONEFLOW_TARGET = [1.22386942, -0.89729659, 0.01615712]


def test_oneflow_sum_log_target(spec):
    got = expected_forward(make_case(ONEFLOW_INPUT, ONEFLOW_TARGET, reduction="sum", log_target=True,
                                     dtype="float32"), spec)
    assert round(float(got.value), 4) == 5.7801


@pytest.mark.parametrize("reduction, documented", [("none", [1.3514, 0.0, -0.0836]), ("mean", 0.4226)])
def test_oneflow_negative_target_examples_follow_the_zero_convention(spec, reduction, documented):
    """The target -0.897 is negative: OneFlow documents 0 there; the spec says NaN
    (pointwise.conventions.target_negative = nan). Under the `zero` choice the
    reference prints OneFlow's numbers."""
    case = make_case(ONEFLOW_INPUT, ONEFLOW_TARGET, reduction=reduction, dtype="float32")
    canonical = expected_forward(case, spec).value
    assert np.isnan(canonical).any()
    oneflow_like = with_alternatives(spec, (Alternative("pointwise.conventions.target_negative", "zero"),))
    np.testing.assert_array_equal(np.round(expected_forward(case, oneflow_like).value, 4), documented)


def test_mindspore_mint_mean_example(spec):
    """mindspore.mint.nn.KLDivLoss docs (shared/seeds/004): prints -0.225."""
    x = [[0.5, 0.5], [0.4, 0.6]]
    t = [[0.0, 1.0], [1.0, 0.0]]
    got = expected_forward(make_case(x, t, reduction="mean", dtype="float32"), spec)
    np.testing.assert_allclose(got.value, -0.225, rtol=1e-6)


def test_torch_docs_batchmean_is_sum_over_batch_size(spec):
    """torch.nn.KLDivLoss docs (shared/seeds/001): batchmean = loss_pointwise.sum() / input.size(0)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 5))
    x -= np.log(np.exp(x).sum(1, keepdims=True))
    t = np.exp(rng.random((3, 5)))
    t /= t.sum(1, keepdims=True)
    pointwise = expected_forward(make_case(x, t, reduction="none"), spec).value
    batchmean = expected_forward(make_case(x, t, reduction="batchmean"), spec).value
    np.testing.assert_allclose(batchmean, pointwise.sum() / 3, rtol=1e-14)
