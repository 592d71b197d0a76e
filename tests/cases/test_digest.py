"""The case digest: equal content, equal digest; any change of content, another digest."""

from __future__ import annotations

import dataclasses

import numpy as np

from conformance.cases.digest import case_digest
from conformance.cases.generate import build_case
from conformance.cases.ids import parse_id
from conformance.core.case import DtypePair, Params
from tests.helpers import make_case


def test_same_content_same_digest_whatever_the_id():
    a = make_case([-1.0, -2.0], [0.25, 0.75], case_id="a")
    b = dataclasses.replace(make_case([-1.0, -2.0], [0.25, 0.75], case_id="b"), family="user", source="x.yaml")
    assert case_digest(a) == case_digest(b)


def test_every_part_of_the_content_changes_the_digest():
    base = make_case([[-1.0, -2.0]], [[0.25, 0.75]], dtype="float32")
    variants = [
        dataclasses.replace(base, input=np.array([[-1.0, -2.5]])),
        dataclasses.replace(base, target=np.array([[0.25, -0.0]])),
        dataclasses.replace(base, input=np.array([-1.0, -2.0])),  # same values, another shape
        dataclasses.replace(base, dtype=DtypePair("float32", "float64")),
        dataclasses.replace(base, layout="strided"),
        dataclasses.replace(base, params=Params("sum")),
        dataclasses.replace(base, params=Params("none", True)),
        dataclasses.replace(base, params=Params("none", False, True, None)),
    ]
    digests = {case_digest(base)} | {case_digest(v) for v in variants}
    assert len(digests) == len(variants) + 1
    zero = dataclasses.replace(base, target=np.array([[0.25, 0.0]]))
    assert case_digest(zero) != case_digest(variants[1])  # -0.0 and 0.0 are different inputs


def test_another_seed_another_digest_same_id():
    key = parse_id("fwd/sum/log_target=0/4x6/float32/softmax/s0")
    one, other = build_case(key, 1), build_case(key, 2)
    assert one.id == other.id and case_digest(one) != case_digest(other)
    assert case_digest(build_case(key, 1)) == case_digest(one)
