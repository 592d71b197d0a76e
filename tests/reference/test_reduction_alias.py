"""signature.parameters.reduction.alias: the spec rejects a reduction that is not one, unless it chooses to take
torch's deprecated name for mean ('elementwise_mean'); the explanation names that choice for an API that takes it,
and only for that name."""

from __future__ import annotations

import numpy as np

from conformance.core.choices import Alternative, touched_paths, with_alternatives
from conformance.core.model import Observation
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

ALIAS = Alternative("signature.parameters.reduction.alias", "elementwise_mean")


def test_an_alias_is_an_error_unless_the_spec_takes_it_and_then_it_is_the_mean(spec):
    x, t = np.array([[-1.0, -2.0]]), np.array([[0.25, 0.75]])
    aliased = make_case(x, t, reduction="elementwise_mean", dtype="float64")
    assert expected_forward(aliased, spec).error_id == "unknown_reduction"
    taking = with_alternatives(spec, (ALIAS,))
    got = expected_forward(aliased, taking)
    # by hand: the mean of the two terms t * (log t - x)
    terms = t * (np.log(t) - x)
    assert got.error_id is None and np.isclose(float(got.value), terms.mean(), rtol=1e-15)
    # any other name stays an error under that choice, and a reduction that is one is untouched by it
    assert expected_forward(make_case(x, t, reduction="avg", dtype="float64"), taking).error_id == "unknown_reduction"
    assert "signature.parameters.reduction.alias" in touched_paths(aliased)
    assert "signature.parameters.reduction.alias" not in touched_paths(make_case(x, t, reduction="sum",
                                                                                 dtype="float64"))


def test_an_api_that_takes_the_alias_is_explained_by_it(spec):
    x, t = np.array([[-1.0, -2.0]]), np.array([[0.25, 0.75]])
    case = make_case(x, t, reduction="elementwise_mean", dtype="float64")
    mean = (t * (np.log(t) - x)).mean()
    observed = Observation(value=np.asarray(mean), dtype="float64", shape=())
    assert [str(a) for a in explain(case, observed, spec)] == [str(ALIAS)]
    summed = Observation(value=np.asarray(mean * 2), dtype="float64", shape=())  # another reduction: not the alias
    assert explain(case, summed, spec) is None or ALIAS not in explain(case, summed, spec)
