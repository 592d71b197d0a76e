"""The pointwise KL term, t (log t - x) or exp(t) (t - x), within 1 ulp of float64 everywhere.

Owns the numerical evaluation of the spec's formula (spec: pointwise.log_target_false,
pointwise.log_target_true) before any convention is applied; pointwise.pointwise applies
the conventions afterwards. Returns `hi`, the term in float64 (within 1 ulp of the exact
value, proven below and checked against mpmath by tests/reference/test_oracle.py), `lo`,
the rest (hi + lo is what reductions sum: within 2**-56 relative at worst, about 2**-65
absolute in log(t) - x), and the bound's magnitude |term_1| + |term_2| in float64,
computed as it always was. Each element's value depends on that element alone.

How, for finite inputs (t > 0 without log_target):
- log(t) - x comes from logexp as a double-double d with a certified relative error
  below 2**-56: tier A where float64's log(t) - x is at least 2**-8 in magnitude (it
  certifies |d| >= 2**-8.8), tier B (three table steps, about twice the work) where it is
  smaller (q ~ p), certifying |d| >= 2**-68.5. What tier B cannot certify (x within
  2**-68.5 of log t: about 1 element in 45,000 where q == p up to rounding) is computed
  exactly in `decimal`, with as many digits as it takes.
- exp(t) comes from logexp.exp_parts (relative error 2**-59.9) and t - x is exact (two_sum).
- the product with t (or exp(t)) is one error-free two_prod and one final rounding.
Where a product could under- or overflow inside two_prod (subnormal or huge results, huge
operands, |t| > 1400 in log space) the same double-double operands are multiplied in
NumPy's long double instead, for those elements only. Elements with a non-finite input,
or t <= 0 without log_target, get the formula in float64, which gives exactly the NaN and
infinity pattern the long double formula gave (see _log_chunk, _exp_chunk).
Arrays are processed in chunks that stay in cache. Never imports a framework.
"""

from __future__ import annotations

import decimal
import functools
from typing import NamedTuple

import numpy as np

from conformance.core.rounding import round_through_float32, round_to_dtype, second_rounding, term_through_float32
from conformance.reference.doubledouble import (PRODUCT_MAX, PRODUCT_MIN, SPLIT_LIMIT, truncation_split, two_prod,
                                                two_sum)
from conformance.reference.logexp import TIER_A_MIN, exp_parts, fast_log_diff, precise_log_diff

WIDE = np.longdouble
CHUNK = 1 << 14
ROUTE_TO_B = 2.0**-8  # |float64 log t - x| below this: tier B (tier A certifies only |d| >= 2**-8.8)
EXP_T_MAX = 1400.0  # |t| up to this in log space goes through exp_parts (|N| < 2**19 there)
FLOAT64_TINY = 2.0**-1022  # the smallest normal float64


class KLTerm(NamedTuple):
    """kl_term's result: the term as hi + lo, the bound's magnitude, and whether no convention applies."""

    hi: np.ndarray  # the term in float64, within 1 ulp
    lo: np.ndarray | None  # the rest (hi + lo is what reductions sum); None unless asked for
    magnitude: np.ndarray  # |term_1| + |term_2| in float64
    ordinary: bool  # every input finite (and t > 0 without log_target): the formula holds everywhere


def kl_term(x: np.ndarray, t: np.ndarray, log_target: bool, residual: bool = True) -> KLTerm:
    """hi, lo and magnitude: hi within 1 ulp of the pointwise term, hi + lo closer still.

    Parameters
    ----------
    x, t : float64 arrays of one shape (input and target, already in the result's values).
    log_target : whether t is a log-probability (spec: pointwise.log_target_true).
    residual : whether lo is wanted (a reduction sums hi + lo); without it lo is None and
        never computed.

    Returns
    -------
    KLTerm: hi, lo and magnitude as float64 arrays of that shape; lo is 0 where the term is
    not finite. magnitude is |t log t| + |t x| (|exp(t) t| + |exp(t) x| with log_target), for
    the bound. `ordinary` says whether every element took the formula (no input that a
    convention decides), read off the chunks' own checks, so callers need no pass of their own.
    """
    _require_gradual_underflow()
    shape = np.shape(x)
    xs, ts = np.ascontiguousarray(x, dtype=np.float64).reshape(-1), np.ascontiguousarray(t, dtype=np.float64).reshape(-1)
    hi, magnitude = np.empty(xs.size), np.empty(xs.size)
    lo = np.empty(xs.size) if residual else None
    if xs.size > CHUNK:
        _settle_allocator()
    pending = []  # elements not yet certified: one pass of tier B (then exact) after the loop
    ordinary = True
    with np.errstate(all="ignore"):
        for start in range(0, xs.size, CHUNK):
            part = slice(start, start + CHUNK)
            out = hi[part], (lo[part] if residual else None), magnitude[part]
            if log_target:
                ordinary &= _exp_chunk(xs[part], ts[part], out)
            else:
                plain, again = _log_chunk(xs[part], ts[part], out)
                ordinary &= plain
                if again is not None:
                    pending.append(again + start)
        if pending:
            again = np.concatenate(pending)
            for start in range(0, again.size, CHUNK):
                chosen = again[start:start + CHUNK]
                hi[chosen], rest = _precise_log_term(xs[chosen], ts[chosen])
                if residual:
                    lo[chosen] = rest
    return KLTerm(hi.reshape(shape), (lo.reshape(shape) if residual else None), magnitude.reshape(shape), ordinary)


def _require_gradual_underflow() -> None:
    """Refuse to compute where subnormals are flushed to zero (FTZ/DAZ set in this thread).

    The error-free transformations assume IEEE arithmetic; a library that sets
    flush-to-zero (as some frameworks do on their own threads) would silently break the
    1-ulp guarantee here, so this is checked on every call (two scalar products).
    """
    if np.float64(2.0**-1022) * 0.5 == 0.0 or np.float64(2.0**-1074) * 4.0 == 0.0:
        raise RuntimeError("the reference needs IEEE gradual underflow, but subnormal float64 values are "
                           "flushed to zero in this thread (FTZ/DAZ); compute references in a process that "
                           "does not set them")


@functools.cache
def _settle_allocator() -> None:
    """Free one 16 MB array, once: glibc then keeps freed heap memory instead of returning it.

    Until a process frees a large (mmapped) block, glibc's malloc gives the top of the heap
    back to the system whenever more than 128 KB are free there, so a chunk's temporaries
    would be page-faulted in afresh for every chunk, which slows the loop several times. Freeing a
    block of S bytes (up to 32 MB) raises that threshold to 2 S (glibc's dynamic mmap
    threshold); a process that handles large arrays gets there anyway, this makes it
    happen before the loop, with room for a chunk's temporaries.
    """
    np.empty(1 << 21).fill(0.0)


def _log_chunk(x: np.ndarray, t: np.ndarray, out: tuple[np.ndarray, np.ndarray | None, np.ndarray]):
    """t (log t - x) and its magnitude for one chunk, into `out` (hi, lo or None, magnitude); returns
    whether every element is ordinary (finite, t > 0) and the elements left to _precise_log_term, or None.

    Where t <= 0 or an input is not finite, float64's t (log t - x) is the value: each is
    a NaN, an infinity or a product with 0, exactly as in long double (log of t <= 0 is
    NaN or -inf, t = +inf gives inf or NaN, x = +-inf beside a finite t > 0 gives -+inf).
    """
    hi, lo, magnitude = out
    log_t = np.log(t)
    term_1, term_2 = t * log_t, t * x
    np.add(np.abs(term_1, out=term_1), np.abs(term_2, out=term_2), out=magnitude)
    diff = log_t - x  # finite exactly where both inputs are finite and t > 0 (|log t| < 745)
    size = np.abs(diff)
    if size.max() < np.inf:  # every element ordinary (a NaN makes the max NaN)
        return True, _log_term(x, t, size, (hi, lo))
    ordinary = size < np.inf
    np.multiply(t, diff, out=hi)
    if lo is not None:
        lo[...] = 0.0
    if not ordinary.any():
        return False, None
    where = np.flatnonzero(ordinary)
    some = np.empty(where.size), (None if lo is None else np.empty(where.size))
    again = _log_term(x[where], t[where], size[where], some)
    hi[where] = some[0]
    if lo is not None:
        lo[where] = some[1]
    return False, (None if again is None else where[again])


def _log_term(x: np.ndarray, t: np.ndarray, size: np.ndarray, out: tuple[np.ndarray, np.ndarray | None]):
    """t (log t - x) for finite t > 0 and finite x into `out` (hi, lo or None); returns the elements
    left to _precise_log_term, or None. `size` is |float64 log(t) - x|.

    Which tier an element gets depends on that element alone, never on its neighbours, so a
    case gives the same values whatever its size: tier A where float64's log(t) - x is at
    least 2**-8 in magnitude (tier A then always certifies: |d| > 2**-8.8), tier B
    elsewhere, exact evaluation where tier B cannot certify. A chunk where most elements
    need tier B runs tier B on the whole chunk and tier A on the rest only.
    """
    far = size >= ROUTE_TO_B
    n_b = t.size - np.count_nonzero(far)
    if 2 * n_b > t.size:
        dh, dl, certified = precise_log_diff(t, x)
        if n_b < t.size:
            rest = np.flatnonzero(far)
            dh[rest], dl[rest], certified[rest] = fast_log_diff(t[rest], x[rest])
        complete = certified.all()
    else:
        dh, dl, certified = fast_log_diff(t, x)
        if n_b:
            certified &= far  # the elements routed to tier B are left to it
        complete = not n_b and certified.all()
    if complete:
        times(t, dh, dl, out)
        return None
    again = np.flatnonzero(~certified)
    dh[again], dl[again] = TIER_A_MIN, 0.0  # placeholders (recomputed later) that keep times() on its fast path
    times(t, dh, dl, out)
    return again


def _precise_log_term(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """t (log t - x) for finite t > 0 and finite x: tier B, and exactly where it cannot certify."""
    dh, dl, certified = precise_log_diff(t, x)
    exact = np.flatnonzero(~certified)
    dh[exact], dl[exact] = TIER_A_MIN, 0.0  # placeholders, replaced below
    hi, lo = times(t, dh, dl, (np.empty(t.size), np.empty(t.size)))
    for i in exact:
        hi[i], lo[i] = exact_log_term(float(x[i]), float(t[i]))
    return hi, lo


def times(t: np.ndarray, dh: np.ndarray, dl: np.ndarray, out: tuple[np.ndarray, np.ndarray | None]):
    """hi, lo = t (dh + dl) for finite t > 0 and finite dh, with one rounding, into `out` (float64;
    lo None: not computed).

    If |dh + dl - d| <= 2**-56 |dh + dl| and |dl| <= 2**-8 |dh|, hi is within 1 ulp of t d.
    Proof. Where two_prod(dh, t) = (p, e) is exact (t, |dh| < 2**995, 2**-960 <= |p| <= 2**1020;
    t split by truncation where every t is normal, by Veltkamp otherwise, as two_prod states),
    v = fl(e + fl(t dl)) errs by <= u |t dl| + u |v| < 2**-60 |p|, and hi = fl(p + v) is
    within 0.5 ulp(hi) of p + v: |hi - t d| <= 0.5 ulp(hi) + 2**-56 |t (dh + dl)| + 2**-60 |p|
    < 0.5 ulp(hi) + 2**-55.9 |hi| (1 + 2**-7) < ulp(hi), as ulp(hi) > 2**-53 |hi|.
    Elsewhere the same operands are multiplied in long double (64-bit significand, no
    under- or overflow): two roundings of 2**-64, then one to float64 (subnormals included):
    less than 0.5 ulp + 2**-55.9 |hi| + 2**-62 |hi| < 1 ulp.
    A chunk is checked on its extremes: rounding is monotonic, so fl(min t min |dh|) <= |p| <=
    fl(max t max |dh|) for every element; a chunk that fails is checked element by element.
    """
    size = np.abs(dh)
    t_max, size_max = t.max(), size.max()
    t_min = t.min()
    if t_max < SPLIT_LIMIT and size_max < SPLIT_LIMIT and t_min * size.min() >= PRODUCT_MIN \
            and t_max * size_max <= PRODUCT_MAX:
        return _times_exact(t, dh, dl, out, normal=t_min >= FLOAT64_TINY)
    p = t * size
    safe = (t < SPLIT_LIMIT) & (size < SPLIT_LIMIT) & (p >= PRODUCT_MIN) & (p <= PRODUCT_MAX)
    if safe.all():
        return _times_exact(t, dh, dl, out, normal=t_min >= FLOAT64_TINY)
    hi, lo = out
    if safe.any():
        some = _times_exact(t[safe], dh[safe], dl[safe], (np.empty(safe.sum()), None if lo is None else np.empty(safe.sum())),
                            normal=t[safe].min() >= FLOAT64_TINY)
        hi[safe] = some[0]
        if lo is not None:
            lo[safe] = some[1]
    rare = ~safe
    wide = _from_wide(t[rare].astype(WIDE) * (dh[rare].astype(WIDE) + dl[rare].astype(WIDE)))
    hi[rare] = wide[0]
    if lo is not None:
        lo[rare] = wide[1]
    return out


def _times_exact(t: np.ndarray, dh: np.ndarray, dl: np.ndarray, out: tuple[np.ndarray, np.ndarray | None],
                 normal: bool):
    """times() where two_prod(dh, t) is exact for every element. With `normal` (every t at least
    2**-1022) t is split by truncation, two operations; else by Veltkamp (two_prod's proof of the
    truncation split is for normal numbers). Either way (p, e) is the exact product, the same bits."""
    hi, lo = out
    p, v = two_prod(dh, t, b_parts=truncation_split(t) if normal else None)
    v += t * dl  # v = e + t dl
    np.add(p, v, out=hi)
    if lo is not None:
        p -= hi
        np.add(p, v, out=lo)
    return out


def _exp_chunk(x: np.ndarray, t: np.ndarray, out: tuple[np.ndarray, np.ndarray | None, np.ndarray]) -> bool:
    """exp(t) (t - x) and its magnitude for one chunk (log_target), into `out` (hi, lo or None,
    magnitude); returns whether every input is finite.

    Where t is not finite or x is NaN, float64's exp(t) (t - x) is the value: exp(+-inf) is
    inf or 0 and a NaN propagates, so each value is NaN or +-inf exactly as in long double.
    A finite t beside an infinite x, or |t| > 1400, is computed in long double as before.
    """
    hi, lo, magnitude = out
    exp_t = np.exp(t)
    np.add(np.abs(exp_t * t), np.abs(exp_t * x), out=magnitude)
    ordinary = (np.abs(t) <= EXP_T_MAX) & (np.abs(x) < np.inf)
    if ordinary.all():
        *term, safe = _exp_term(x, t)
        _put(out, np.s_[...], term)
        if not safe.all():
            rare = ~safe
            _put(out, rare, _wide_exp_term(x[rare], t[rare]))
        return True
    np.multiply(exp_t, t - x, out=hi)
    if lo is not None:
        lo[...] = 0.0
    wide = (np.abs(t) < np.inf) & ~ordinary & ~np.isnan(x)
    if ordinary.any():
        *term, safe = _exp_term(x[ordinary], t[ordinary])
        _put(out, ordinary, term)
        wide[np.flatnonzero(ordinary)[~safe]] = True
    if wide.any():
        _put(out, wide, _wide_exp_term(x[wide], t[wide]))
    return bool(np.isfinite(x).all() and np.isfinite(t).all())


def _put(out: tuple, where, term: tuple) -> None:
    """Writes a computed (hi, lo) into `out` at `where` (lo only where wanted)."""
    out[0][where] = term[0]
    if out[1] is not None:
        out[1][where] = term[1]


def _exp_term(x: np.ndarray, t: np.ndarray):
    """exp(t) (t - x) for |t| <= 1400 and finite x: hi, lo and where that was safe.

    Proof. t - x = s + e exactly (two_sum; no overflow: |t| <= 1400). exp(t) =
    2**k (mh + ml)(1 + eps), |eps| <= 2**-59.9 (logexp.exp_parts). (P, pi) = two_prod(mh, s)
    is exact where `safe` holds (|s| < 2**995, |P| >= 2**-960 or s = 0); v = pi + (mh e + ml s)
    drops ml e (< 2**-62 |mh s|) and rounds twice (< 2**-61 |mh s|, as |ml| < 2**-9 mh).
    y = fl(P + v) is then within 0.5 ulp + 2**-59 |y| of exp(t) (t - x) 2**-k, and
    hi = y 2**k is exact where |hi| >= 2**-1022 and -1022 <= k <= 1023 (a power of two
    times a normal number; an overflow to inf is the rounding of the exact product).
    """
    s, e = two_sum(t, -x)
    mh, ml, k = exp_parts(t)
    safe = (np.abs(s) < SPLIT_LIMIT) & ((np.abs(mh * s) >= PRODUCT_MIN) | (s == 0)) & (k >= -1022) & (k <= 1023)
    s_safe = np.where(safe, s, 0.0)
    big, pi = two_prod(mh, s_safe)
    v = pi + (mh * e + ml * s_safe)
    y = big + v
    scale = ((np.where(safe, k, 0.0).astype(np.int64) + 1023) << 52).view(np.float64)
    hi = y * scale
    lo = ((big - y) + v) * scale
    safe &= (np.abs(hi) >= 2.0**-1022) | (y == 0)
    return hi, np.where(np.isfinite(hi), lo, 0.0), safe


def _wide_exp_term(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """exp(t) (t - x) in long double (64-bit significand: within 1 ulp of float64 after one rounding)."""
    return _from_wide(np.exp(t.astype(WIDE)) * (t.astype(WIDE) - x.astype(WIDE)))


def _from_wide(wide: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A long double array as float64 hi (one rounding) and the float64 of the remainder."""
    hi = wide.astype(np.float64)
    lo = np.where(np.isfinite(hi), (wide - hi.astype(WIDE)).astype(np.float64), 0.0)
    return hi, lo


def exact_log_term(x: float, t: float) -> tuple[float, float]:
    """t (log t - x) for one finite t > 0 and finite x, in decimal with as many digits as it takes.

    ln is correctly rounded in `decimal`, and Decimal(float) is exact, so at `digits` digits
    log t - x errs by at most 10**(1 - digits) (|ln t| + |x|); the digits double until that is
    below 2**-110 |log t - x|. That ends: log t == x only at t == 1, x == 0 (ln of a rational
    other than 1 is transcendental), which is exact. float(Decimal) rounds correctly, so hi is
    within 0.5 ulp + 2**-109 |hi|, less than 1 ulp, and hi + lo within 2**-105 |hi|.
    """
    t_dec, x_dec = decimal.Decimal(t), decimal.Decimal(x)
    digits = 40
    while True:
        with decimal.localcontext() as ctx:
            ctx.prec = digits
            log_t = t_dec.ln()
            d = log_t - x_dec
            err = decimal.Decimal(10) ** (1 - digits) * (abs(log_t) + abs(x_dec))
            if t == 1.0 or (d != 0 and err <= abs(d) * decimal.Decimal(2.0**-110)):
                term = t_dec * d
                hi = float(term)
                return hi, (float(term - decimal.Decimal(hi)) if np.isfinite(hi) else 0.0)
        digits *= 2


def own_dtype_term(x: np.ndarray, t: np.ndarray, log_target: bool, dtype: str, second: bool = False) -> np.ndarray:
    """The pointwise term with the target's own term evaluated in `dtype` and only then promoted (spec:
    dtypes.argument_terms.choices.own_dtype), in long double, for finite x and t (t > 0 without log_target).

    Is equivalent to ``fl(t * fl(log(t))) - t * x`` without log_target and ``fl(exp(t)) * (t - x)`` with it,
    fl rounding to `dtype` (torch's ``xlogy(target, target) - target * input`` and ``exp(target) * (target -
    input)``). t * fl(log t) is exact in float64 (two significands of at most 24 bits), so it is rounded to
    `dtype` once; the rest is formed in long double, within 2**-63 relative of each operation. `second` rounds the
    target's term the second way (core/rounding.py: second_rounding): exp or log to its other neighbour, the
    product to nearest; or, for a float16 or bfloat16 t * log(t) (term_through_float32), float32's term rounded
    once more to `dtype`, ``fl(fl32(t * fl32(log t)))`` (t * fl32(log t) is exact in float64 too).
    """
    rounding = second_rounding(dtype, log_target) if second else round_to_dtype
    with np.errstate(all="ignore"):
        if log_target:
            own = rounding(np.exp(t), dtype)
            return own.astype(WIDE) * (t.astype(WIDE) - x.astype(WIDE))
        if second and term_through_float32(dtype, log_target):  # each operation rounded in float32, then to dtype
            own = round_through_float32(t * round_to_dtype(np.log(t), "float32"), dtype)
        else:
            own = round_to_dtype(t * rounding(np.log(t), dtype), dtype)
        return own.astype(WIDE) - t.astype(WIDE) * x.astype(WIDE)
