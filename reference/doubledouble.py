"""Error-free transformations of float64 arrays, the building blocks of double-double arithmetic.

Each function returns a rounded result together with its exact rounding error, so that
a sum or a product is carried as an unevaluated sum of two float64 arrays (Dekker 1971;
Knuth, TAOCP vol. 2, 4.2.2; Ogita, Rump and Oishi 2005). NumPy has no fused
multiply-add, so products split their operands (Veltkamp). Every statement holds in
binary64 with round-to-nearest-even, NumPy's only mode, as long as nothing overflows
or underflows; the ranges each function needs are stated on it, and callers keep to them.
Arguments are float64 arrays of at least one dimension: results are formed in place in each
function's own temporaries (never in an argument), and a NumPy scalar cannot be one.
Owns arithmetic only: no policy, no spec.
"""

from __future__ import annotations

import numpy as np

SPLITTER = 2.0**27 + 1.0  # Veltkamp's constant for binary64: halves of at most 26 bits
SPLIT_LIMIT = 2.0**995  # |a| below this: SPLITTER * a cannot overflow
PRODUCT_MIN = 2.0**-960  # |a * b| at least this (or 0): no partial product of two_prod underflows
PRODUCT_MAX = 2.0**1020  # |a * b| at most this: no partial product of two_prod overflows
LOW27 = ~((1 << 27) - 1)  # as int64, clears the 27 low significand bits of a float64: a 26-bit head


def two_sum(a, b):
    """s, e with s = fl(a + b) and s + e == a + b exactly, for any finite a, b (Knuth; 6 flops).

    Is equivalent to ``s = a + b; e = (a + b) - s`` with the second line in exact arithmetic.
    """
    s = a + b
    b_virtual = s - a
    e = np.subtract(a, s - b_virtual)
    np.subtract(b, b_virtual, out=b_virtual)
    return s, np.add(e, b_virtual, out=e)


def two_diff(a, b):
    """s, e with s = fl(a - b) and s + e == a - b exactly, for any finite a, b: two_sum(a, -b).

    Is equivalent to ``s = a - b; e = (a - b) - s`` with the second line in exact arithmetic.
    """
    s = a - b
    b_virtual = s - a
    e = np.subtract(a, s - b_virtual)
    np.add(b, b_virtual, out=b_virtual)
    return s, np.subtract(e, b_virtual, out=e)


def fast_two_sum(a, b):
    """s, e with s = fl(a + b) and s + e == a + b exactly (Dekker; 3 flops).

    Needs |a| >= |b| wherever a != 0, or else a + b exactly representable; callers say which.
    """
    s = a + b
    e = s - a
    return s, np.subtract(b, e, out=e)


def split(a):
    """hi, lo with a == hi + lo exactly, each of at most 26 significant bits (Veltkamp); |a| < 2**995.

    Is equivalent to rounding a to 26 bits (hi) and keeping the remainder (lo).
    """
    c = SPLITTER * a
    rest = c - a
    hi = np.subtract(c, rest, out=c)
    return hi, np.subtract(a, hi, out=rest)


def truncation_split(a):
    """hi, lo with a == hi + lo exactly: hi is a with its 27 low significand bits cleared (26 bits), lo
    the rest (27 bits). Two operations where `split` takes four; two_prod takes it as `b_parts`.

    Is equivalent to truncating a to 26 bits (hi) and keeping the remainder (lo), for normal a.
    """
    hi = (a.view(np.int64) & LOW27).view(np.float64)
    return hi, a - hi


def two_prod(a, b, a_parts=None, b_parts=None):
    """p, e with p = fl(a * b) and p + e == a * b exactly (Dekker's mul12, 17 flops).

    Exact when |a|, |b| < 2**995 and PRODUCT_MIN <= |a * b| <= PRODUCT_MAX, or a * b == 0
    (Dekker 1971, Theorem 4.7; Boldo 2006 for the underflow condition). `a_parts` and
    `b_parts` are `split(a)` and `split(b)` when the caller has them already.

    `b_parts` may instead be a truncation split of b (b_hi = b with its 27 low significand
    bits cleared, 26 bits; b_lo = b - b_hi, 27 bits): still exact. With a in [2**ea, 2**(ea+1)),
    b in [2**eb, 2**(eb+1)), g = 2**(ea+eb-77): every product of parts has at most 53 bits;
    a_hi b_hi is within 2**-23 of p (Sterbenz: exact difference); a_hi b - p is a multiple of g
    below |a_lo b| + |e| <= (2**52 + 2**25) g; a b - a_lo b_lo - p is a multiple of g below
    (2**25 + 2**26) g; so each partial sum is representable, and the last one is e.

    Is equivalent to ``p = a * b; e = a * b - p`` with the second line in exact arithmetic.
    """
    a_hi, a_lo = split(a) if a_parts is None else a_parts
    b_hi, b_lo = split(b) if b_parts is None else b_parts
    p = a * b
    e = a_hi * b_hi
    np.subtract(e, p, out=e)
    e += a_hi * b_lo
    e += a_lo * b_hi
    e += a_lo * b_lo
    return p, e
