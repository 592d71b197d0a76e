"""Small builders shared by the tests (not a framework stand-in)."""

from __future__ import annotations

import numpy as np

from conformance.model import Case, DtypePair, Params


def make_case(x, t, *, reduction="none", log_target=False, dtype="float64", size_average=None, reduce=None,
              layout="contiguous", case_id="test") -> Case:
    """A Case from plain values; `dtype` is a name or an (input, target) pair."""
    pair = DtypePair(*dtype) if isinstance(dtype, tuple) else DtypePair(dtype, dtype)
    return Case(id=case_id, params=Params(reduction, log_target, size_average, reduce),
                input=np.asarray(x, dtype=np.float64), target=np.asarray(t, dtype=np.float64),
                dtype=pair, family="test", layout=layout)
