"""The content digest of a case: what makes two cases of one id the same case.

An id names a case; the digest says what it held. Rows carry both, so a merge can
refuse two draws (another --seed, an edited user file) filed under one id. The digest
covers everything a framework is given: parameters, dtypes, layout, shapes and the
exact value bytes (float64, little-endian; -0.0 and NaN payloads count). It leaves out
the id, the family and the file the case came from, which say nothing of its content.

Never imports a framework or the reference.
"""

from __future__ import annotations

import hashlib

import numpy as np

from conformance.core.case import Case

DIGEST_BYTES = 12


def case_digest(case: Case) -> str:
    """A hex digest of the case's content.

    Is equivalent to hashing ``repr((params, dtypes, layout, shapes))`` (with the construction's token after
    the shapes where it is not the default, so every earlier case keeps its digest) followed by the
    bytes of ``input`` and ``target`` as little-endian float64.
    """
    p = case.params
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    made = () if case.construction.is_default else (str(case.construction),)
    digest.update(repr((p.reduction, p.log_target, p.size_average, p.reduce, p.prob_input, case.dtype.input,
                        case.dtype.target, case.layout, tuple(case.input.shape),
                        tuple(case.target.shape), *made)).encode("utf-8"))
    for values in (case.input, case.target):
        digest.update(np.ascontiguousarray(values, dtype="<f8").view(np.uint8))
    return digest.hexdigest()
