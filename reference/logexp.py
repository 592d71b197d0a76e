"""log(t) - x and exp(t) in float64 arithmetic with proven error bounds, vectorised.

Owns the evaluation of the two ill-conditioned pieces of the pointwise loss: the
difference d = log(t) - x, which cancels where x ~ log t, and exp(t). Both return
double-double values (an unevaluated sum hi + lo of float64 arrays) and never round a
result to float64 themselves; `klterm` multiplies and rounds. Everything is plain
float64 NumPy (plus integer bit manipulation): no long double, no per-element Python.

Notation: u = 2**-53 (unit roundoff), fl() a rounded operation. Inputs are float64
arrays of one shape and at least one dimension (doubledouble works in place); the callers
pass only the elements each function states.

log(t) - x, the identity used by both tiers. With t = f * 2**E (f in [1/2, 1), E an
integer, |E| <= 1073) and table constants c1, c2, c3 whose product C is an exact float64
(reference/tablegen.py),

    log t - x = (E ln2 + L1 + L2 + L3 - x) + log1p(f C - 1),   Lk = ln(1 / ck),

which holds for any choice of the table entries; the choice only decides how small
r = f C - 1 is. ln2 and each Lk are stored as pieces on the grains 2**-42, 2**-85 and
2**-128 (|E| < 2**11 times a 42-bit piece is exact, and the sums of pieces on one grain
stay below 2**53 grain units), so the large part E ln2 + L - x is formed without error
and the cancellation where x ~ log t costs nothing. What is left is small: log1p(r).
"""

from __future__ import annotations

import numpy as np

from conformance.reference import logexp_tables as T
from conformance.reference.doubledouble import LOW27, fast_two_sum, split, two_diff, two_prod, two_sum

I64 = np.int64
ROUNDER = 1.5 * 2.0**52  # v + ROUNDER: v rounded to an integer, readable in the low bits
ROUNDER_BITS = int(np.float64(ROUNDER).view(I64))
A0, A1, A2, A3 = (float(v) for v in T.LN2)

TIER_A_MIN = 2.0**-8.8  # fast_log_diff certifies |sigma| >= this
TIER_B_MIN = 2.0**-68.5  # precise_log_diff certifies |dh| >= this


def decompose(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f, E (as float64) and the bits of f, with t == f * 2**E, f in [1/2, 1).

    For finite t > 0, subnormals included: frexp is exact, and |E| <= 1073. The bits of f
    carry t's significand (normalised for a subnormal t), which is what _level1 indexes by.
    One frexp costs a third of reading the fields out of t's bits.
    """
    f, exponent = np.frexp(t)
    return f, exponent.astype(np.float64), f.view(I64)


def _index(value: np.ndarray, offset: int) -> np.ndarray:
    """round(value) + offset as integer indices (round half to even), for |value| < 2**51."""
    index = (value + ROUNDER).view(I64)
    index -= ROUNDER_BITS - offset
    return index


def _level1(f: np.ndarray, bits: np.ndarray):
    """The bucket of f, c1, the truncation split (fh, fl) of f and r1 = f c1 - 1 as the exact pair (a, b).

    f = fh + fl with fh of 26 bits (the 27 low mantissa bits cleared, a multiple of 2**-26)
    and 0 <= fl < 2**-26 (a multiple of 2**-53, 27 bits); c1 = i1 / 2**9 with i1 of at most
    10 bits. So fh c1 (36 bits) and fl c1 (37 bits) are exact; fh c1 lies in [1/2, 2], so
    a = fh c1 - 1 is exact (Sterbenz); b = fl c1 is in [0, 2**-25). r1 = a + b exactly.
    """
    j1 = (bits >> 44) & 0xFF
    c1 = T.LOG1_C.take(j1)
    fh = (f.view(I64) & LOW27).view(np.float64)
    fl = f - fh
    return j1, c1, (fh, fl), fh * c1 - 1.0, fl * c1


def fast_log_diff(t: np.ndarray, x: np.ndarray):
    """Tier A: d = log t - x as sigma + beta, and where |sigma + beta - d| < 2**-56 |d| is certified.

    For finite t > 0 and finite x. About 55 operations per element; certifies every element
    with |sigma| >= 2**-8.8 (x not within 0.0022 of log t), and then |beta| <= 2**-8.1 |sigma|.

    Proof. r = r1 = f c1 - 1 = a + b exactly (_level1), |r| <= R1 = 2**-8 (tablegen).
    (rh, rl) = fast_two_sum(a, b) is exact: either |a| >= |b|, or |a| < |b| < 2**-25 and then
    a + b is a multiple of 2**-62 below 2**-24, representable, so rh = a + b and rl = 0.
    H0 = E A0 + P0[j1] and H1 = E A1 + P1[j1] are exact (module docstring); what the two
    grains leave out, E (ln2 - A0 - A1) + (L1 - P0 - P1), is at most 1074 * 2**-86 < 2**-75.9.
    P(r) = log1p(r) - r is evaluated as rh (rh h(rh) - rl), h the degree-5 Horner form of
    the Taylor series up to r**7: truncation <= R1**8 / (8 (1 - R1)) < 2**-66.99, rounding
    <= 8 u rh**2 |h| < 2**-67, the first-order rl term <= |rl| (|rl| + 1.01 R1**2) < 2**-77;
    together eps_P < 2**-66. Then (s, e0) = two_diff(H0, x) and (sigma, tau) = two_sum(s, rh)
    are exact, and beta = tau + e0 + H1 + rl + P carries four roundings: <= gamma_4 (|tau| +
    |e0| + |H1| + |rl| + |P|) with |H1| <= 2**-32.92, |rl| <= 2**-61, |P| <= 2**-16.98, so
    <= 2**-67 + 2**-50.9 (|tau| + |e0|). In all |sigma + beta - d| <= err := 2**-65.4
    + 2**-50.9 (|tau| + |e0|). As |tau| <= u |sigma|, |e0| <= u |s| and |s| <= |sigma| (1 + 2u)
    + 2**-8, err <= 2**-65.39 + 2**-102.8 |sigma| and |beta| <= 2**-52 |sigma| + 2**-16.96;
    where |sigma| >= 2**-8.8 that gives |beta| <= 2**-8.1 |sigma| and
    err <= 2**-56 |sigma| (1 - 2**-8.1) <= 2**-56 |sigma + beta|: certified.
    """
    f, exponent, bits = decompose(t)
    j1, c1, _, a, b = _level1(f, bits)
    rh, rl = fast_two_sum(a, b)
    h0 = exponent * A0
    h0 += T.LOG1_P0.take(j1)
    h1 = exponent * A1
    h1 += T.LOG1_P1.take(j1)
    # h = -0.5 + rh * (1.0 / 3 + rh * (-0.25 + rh * (0.2 + rh * (-1.0 / 6 + rh * (1.0 / 7))))), in place
    h = rh * (1.0 / 7)
    for c in (-1.0 / 6, 0.2, -0.25, 1.0 / 3):
        h += c
        h *= rh
    h += -0.5
    s, e0 = two_diff(h0, x)
    sigma, tau = two_sum(s, rh)
    beta = np.add(tau, e0, out=tau)
    beta += h1
    beta += rl
    h *= rh  # beta += rh (rh h - rl)
    h -= rl
    h *= rh
    beta += h
    return sigma, beta, np.abs(sigma) >= TIER_A_MIN


def precise_log_diff(t: np.ndarray, x: np.ndarray):
    """Tier B: d = log t - x as dh + dl, and where |dh + dl - d| < 2**-56 |d| is certified.

    For finite t > 0 and finite x; about 90 operations per element. It certifies every
    element with |dh| >= 2**-68.5, where fast_log_diff needs 2**-8.8; what it cannot
    certify is left to an exact evaluation (klterm). |dl| <= ulp(dh) / 2.

    Proof. Three table steps (tablegen) give C = c1 c2 c3, exact, with |f C - 1| <= R3 < 2**-24.98:
    level 2 is indexed by fl(r1) (|fl(r1) - r1| <= 2**-61), level 3 by
    r2' = fl(fl(fl(r1) c2) + (c2 - 1)) (|r2' - r2| < 2**-59.9); tablegen's bounds allow
    2**-60 and 2**-57. (p, pe) = two_prod(C, f) with f's truncation split is exact (C < 2.01,
    f in [1/2, 1): no under- or overflow), p - 1 is exact (Sterbenz), and fast_two_sum(p - 1, pe)
    is exact because p - 1 is 0 or a multiple of ulp(p) >= 2**-53 >= |pe|: r = rh + rl exactly,
    |rl| <= u |rh|. H0, H1, H2 (grains 2**-42, 2**-85, 2**-128: E Ak plus the three tables'
    pieces) are exact; H3 = fl(E A3) errs by < 2**-170, and the tables' pieces leave out
    3 * 2**-129 < 2**-127.4. (q, qe) = two_prod(rh, rh) is exact (rh**2 is 0 or >= 2**-106).
    P(r) = log1p(r) - r = -q/2 + tail, tail = -qe/2 - rh rl + q rl + w g, w = fl(rh q) ~ rh**3
    and g = fl(1/3) - rh/4 + rh**2/5 ~ 1/3: the series terms left out are < 2**-148;
    |w - rh**3| <= 2 u R3**3, /3: < 2**-128.55; fl(1/3) and the roundings of g, w g and of the
    tail's last addition add < 2**-131.5 + 2**-129.2 + 2**-129.5 + 2**-129.5: eps_P < 2**-127.
    Then (s, e0) = two_diff(H0, x), (sigma1, tau1) = two_sum(s, rh), (sigma2, tau2) =
    two_sum(sigma1, H1) and (sigma3, tau3) = two_sum(sigma2, -q/2) are exact, and
    beta = tau1 + tau2 + tau3 + e0 + tail + rl + H3 + H2, summed in that order, carries 7
    roundings, each at most u times its partial sum: <= 7 u S + u (3 * 2**-75.6 + 2**-74.75)
    < 2**-50.19 S + 2**-126.35, S = |tau1| + |tau2| + |tau3| + |e0|, as |tail| <= 2**-76.4,
    |rl| <= 2**-78, |H2| <= 2**-75.93. Each of tau1, tau2, tau3, e0 is at most u times one of
    |s|, |sigma1|, |sigma2|, |sigma3|, which differ from |sigma3| by at most
    |rh| + |H1| + |q|/2 < 2**-24.96: S <= u (4 |sigma3| + 3 * 2**-24.96). In all
    |sigma3 + beta - d| <= 2**-127.4 + 2**-127 + 2**-126.35 + 2**-126.4 + 2**-101 |sigma3|
    < 2**-124.55 + 2**-101 |sigma3| and |beta| < 2**-51 |sigma3| + 2**-74.4. Where
    |dh| >= 2**-68.5 (dh = fl(sigma3 + beta)) that gives |beta| < |sigma3| (fast_two_sum exact)
    and an error below 2**-56 |dh + dl|: certified.
    """
    f, exponent, bits = decompose(t)
    j1, c1, f_parts, a, b = _level1(f, bits)
    # In place where a temporary is this function's own; every operation and its order as written in the proof.
    r1 = a + b
    i2 = _index(r1 * 2.0**16, T.J2_MAX)
    c2 = T.LOG2_C.take(i2)
    level3 = r1 * c2  # (r1 c2 + (c2 - 1)) 2**24
    level3 += c2 - 1.0
    level3 *= 2.0**24
    i3 = _index(level3, T.J3_MAX)
    c = c1 * c2
    c *= T.LOG3_C.take(i3)
    p, pe = two_prod(c, f, b_parts=f_parts)
    p -= 1.0
    rh, rl = fast_two_sum(p, pe)
    h0, h1, h2 = (exponent * a_k for a_k in (A0, A1, A2))  # E Ak + P1[j1] + P2[i2] + P3[i3], left to right
    for h, tables in ((h0, (T.LOG1_P0, T.LOG2_P0, T.LOG3_P0)), (h1, (T.LOG1_P1, T.LOG2_P1, T.LOG3_P1)),
                      (h2, (T.LOG1_P2, T.LOG2_P2, T.LOG3_P2))):
        for table, index in zip(tables, (j1, i2, i3)):
            h += table.take(index)
    rh_parts = split(rh)
    q, qe = two_prod(rh, rh, rh_parts, rh_parts)
    tail = -0.5 * qe  # ((-0.5 * qe - rh * rl) + q * rl) + (rh * q) * (1.0 / 3 + rh * (-0.25 + rh * 0.2))
    tail -= rh * rl
    tail += q * rl
    g = rh * 0.2
    g += -0.25
    g *= rh
    g += 1.0 / 3
    w = rh * q
    w *= g
    tail += w
    s, e0 = two_diff(h0, x)
    sigma1, tau1 = two_sum(s, rh)
    sigma2, tau2 = two_sum(sigma1, h1)
    sigma3, tau3 = two_sum(sigma2, -0.5 * q)
    beta = np.add(tau1, tau2, out=tau1)  # ((((((tau1 + tau2) + tau3) + e0) + tail) + rl) + E A3) + H2
    for term in (tau3, e0, tail, rl, exponent * A3, h2):
        beta += term
    dh, dl = fast_two_sum(sigma3, beta)
    return dh, dl, np.abs(dh) >= TIER_B_MIN


def exp_parts(t: np.ndarray):
    """exp(t) = (mh + ml) * 2**k with |mh + ml - exp(t) 2**-k| <= 2**-59.9 exp(t) 2**-k.

    For finite |t| <= 1400 (then |N| < 2**19 below). mh is a table value 2**(j/256) in [1, 2),
    |ml| < 2**-9 mh; k is returned as float64 (an integer).

    Proof. N = round(256 t / ln2), j = N mod 256, k = (N - j) / 256. With K0 = ln2/256 on the
    grain 2**-42 (34 bits), N K0 is exact and so is zh = t - N K0 (Sterbenz for N != 0);
    zl = -fl(N K1) with K1 = fl(ln2/256 - K0) (|zl| < 2**-24): |z - zh - zl| <= 2**-53 |N K1|
    + |N| 2**-96 < 2**-76, where z = t - N ln2/256, |z| <= 2**-9.47 + 2**-24.
    (zs, ze) = two_sum(zh, zl) is exact; exp(z) = 1 + zs + (ze + Q), Q = zs**2 (1/2 + zs/6
    + zs**2/24 + zs**3/120 + zs**4/720): truncation < 2**-78, the dropped zs ze < 2**-71.5,
    rounding of Q and of ze + Q < 2**-70. 2**(j/256) = Th + Tl to 2**-106 (tablegen).
    mh = Th and ml = fl(fl(Th zs) + fl(Tl + Th (ze + Q) + Tl zs)): those roundings are
    <= u |Th zs| + 3 u 2**-9.3 Th < 2**-60.3 Th. Total relative error < 2**-59.9.
    """
    n_float = t * T.EXP_INV + ROUNDER
    n = n_float.view(I64) - ROUNDER_BITS
    n_float = n_float - ROUNDER
    j = n & 0xFF
    zs, ze = two_sum(t - n_float * T.EXP_K0, -(n_float * T.EXP_K1))
    th, tl = T.EXP_HI[j], T.EXP_LO[j]
    q = (zs * zs) * (0.5 + zs * (1.0 / 6 + zs * (1.0 / 24 + zs * (1.0 / 120 + zs * (1.0 / 720)))))
    ml = th * zs + ((tl + th * (ze + q)) + tl * zs)
    return th, ml, ((n - j) >> 8).astype(np.float64)
