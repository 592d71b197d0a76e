"""A divergence the profile explains in part is named by what remains (issue 38, residual causes): judged against
the spec with the framework's profile applied, its cause is the alternatives still needed, never `unexplained`
because the profile's own choices took up the explanation's room (two alternatives at most)."""

from __future__ import annotations

import math

import numpy as np

from conformance.core.model import UNEXPLAINED, Observation
from conformance.judge.casejudge import CaseJudge
from conformance.judge.profiles import DeviationLedger
from tests.helpers import make_case

API = "port.kl_div"
PROFILE = ("framework: port\ndeviations:\n- {id: ieee-zero-target, apis: [port.kl_div], "
           "set: {pointwise.conventions.target_zero: ieee}, rationale: r, basis: docs, reference: 'https://x'}\n")
# x = +inf at t = 0 (ieee: NaN, the spec: 0), t = -0.5 (zero: 0, the spec: NaN), x = NaN at t = 0 (masked by the
# zero target: 0, the spec: NaN), and an ordinary element, 0.5 * (log 0.5 + 1), worked out by hand
CASE = make_case([[math.inf, -1.0, math.nan, -1.0]], [[0.0, -0.5, 0.0, 0.5]], reduction="none")
SEEN = Observation(value=np.array([[math.nan, 0.0, 0.0, 0.5 * (1.0 - math.log(2.0))]]), dtype="float64", shape=(1, 4))


def ledger(spec, tmp_path, profile: str | None = PROFILE) -> DeviationLedger:
    if profile is not None:
        (tmp_path / "port.yaml").write_text(profile)
    return DeviationLedger(spec, "port", [API], tmp_path)


def test_three_departures_are_unexplained_without_the_profile(spec, tmp_path):
    judge = CaseJudge(CASE, spec)
    assert judge.judgement("forward", "canonical", SEEN).cause == UNEXPLAINED
    assert judge.beyond_profile(ledger(spec, tmp_path, profile=None), API, "forward", "canonical", SEEN) is None


def test_with_the_profile_applied_what_remains_is_named(spec, tmp_path):
    judge = CaseJudge(CASE, spec)
    ports = ledger(spec, tmp_path)
    assert judge.documented(ports, API, "forward", "canonical", SEEN) == ()  # the profile states only a third
    cause, said = judge.beyond_profile(ports, API, "forward", "canonical", SEEN)
    assert cause == "pointwise.conventions.target_negative + pointwise.conventions.nan_propagation"
    assert said == ("pointwise.conventions.target_negative = zero, pointwise.conventions.nan_propagation = "
                    "masked_by_zero_target beside the profile (ieee-zero-target)")


def test_an_api_without_deviations_gets_no_residual(spec, tmp_path):
    judge = CaseJudge(CASE, spec)
    assert judge.beyond_profile(ledger(spec, tmp_path), "port.other", "forward", "canonical", SEEN) is None


def test_what_even_the_profile_does_not_reach_stays_unexplained(spec, tmp_path):
    wrong = Observation(value=np.array([[math.nan, 0.0, 0.0, 7.0]]), dtype="float64", shape=(1, 4))
    judge = CaseJudge(CASE, spec)
    assert judge.beyond_profile(ledger(spec, tmp_path), API, "forward", "canonical", wrong) is None


SHAPES_PROFILE = ("framework: port\ndeviations:\n- {id: runtime-error-for-shapes, apis: [port.kl_div], exceptions: "
                  "{incompatible_shapes: {type: RuntimeError, match: '^size mismatch'}}, rationale: r, basis: docs, "
                  "reference: 'https://x'}\n")
BROADCAST = make_case([[-1.0, -2.0]], [[0.25, 0.75], [0.5, 0.5]], reduction="sum")  # (1, 2) against (2, 2)


def test_a_raise_beside_the_profile_must_be_the_profile_s_own_words(spec, tmp_path):
    """A raise is explained by its type alone (judge/explain.py); beside the profile, the type the profile maps an
    error to is not enough: the message must be the one its entry states, else the profile says nothing of it."""
    ports = ledger(spec, tmp_path, SHAPES_PROFILE)
    judge = CaseJudge(BROADCAST, spec)
    stated = Observation(exception_type="RuntimeError", exception_message="size mismatch: (1, 2) against (2, 2)")
    other = Observation(exception_type="RuntimeError", exception_message="refused a valid call")
    for observed in (stated, other):
        assert judge.judgement("forward", "canonical", observed).cause == UNEXPLAINED
    assert judge.beyond_profile(ports, API, "forward", "canonical", stated) == (
        "shapes.broadcasting", "shapes.broadcasting = none beside the profile (runtime-error-for-shapes)")
    assert judge.beyond_profile(ports, API, "forward", "canonical", other) is None
