"""Builds the argument-reduction tables of the precise log and exp (reference/logexp_tables.py).

Run `python -m conformance.reference.tablegen > reference/logexp_tables.py` to regenerate;
tests/reference/test_logexp.py checks that the stored module equals what this builds.
Logarithms come from the standard library's `decimal` (correctly rounded at 50 digits,
relative error below 2**-165) and are cut into pieces with exact rational arithmetic
(`fractions`). Owns the tables' definitions and their bounds; computes nothing per element.

The log tables reduce t = f * 2**E, f in [1/2, 1), in three steps with constants
c1 = i1 / 2**9, c2 = i2 / 2**16 and c3 = i3 / 2**25 (integers i1 < 2**10 or a power of
two, i2 < 2**17, i3 < 2**26), so that C = c1 * c2 * c3 is exact in float64 (at most 53
bits) and |f * C - 1| <= R3 < 2**-24. Each ln(1 / c) is stored as three pieces on the
grains 2**-42, 2**-85 and 2**-128 (see GRAINS): sums of pieces on one grain are exact.
"""

from __future__ import annotations

import base64
import decimal
import struct
import sys
from fractions import Fraction

GRAINS = (42, 85, 128)  # piece k of a stored constant is a multiple of 2**-GRAINS[k]
LEVEL1_BITS = 8  # level 1: 2**8 buckets of f by its top mantissa bits
LEVEL2_STEP, LEVEL2_GRAIN = 16, 16  # level 2: index round(r1 * 2**16), c2 on the grain 2**-16
LEVEL3_STEP, LEVEL3_GRAIN = 24, 25  # level 3: index round(r2 * 2**24), c3 on the grain 2**-25
INDEX_SLACK_2 = Fraction(1, 2**60)  # |fl(r1) - r1| at most this (r1 is rounded once, |r1| <= 2**-8)
INDEX_SLACK_3 = Fraction(1, 2**57)  # |approximate r2 - r2| at most this (see logexp.precise_log_diff)
EXP_STEPS = 256  # exp: t = (256 k + j) ln2 / 256 + z
EXP_K0_GRAIN = 42  # ln2/256 ~ 2**-8.5 on the grain 2**-42: 34 bits, times |N| < 2**19 exact

_CONTEXT = decimal.Context(prec=50)


def _ln(value: Fraction) -> Fraction:
    """ln(value) to 50 significant digits, as an exact fraction of that decimal."""
    return Fraction(_CONTEXT.ln(decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)))


def pieces(value: Fraction) -> tuple[float, float, float, float]:
    """value as three multiples of 2**-GRAINS[k] (rounded to nearest) and a float64 remainder."""
    out, rest = [], value
    for grain in GRAINS:
        scaled = round(rest * 2**grain)
        assert abs(scaled) < 2**53
        out.append(float(Fraction(scaled, 2**grain)))
        rest -= Fraction(scaled, 2**grain)
    return out[0], out[1], out[2], float(rest)


def _bits(n: int) -> int:
    """Significant bits of a positive integer (trailing zeros do not count)."""
    while n % 2 == 0:
        n //= 2
    return n.bit_length()


def log_level1() -> list[tuple[int, Fraction, Fraction]]:
    """(i1, lower f, upper f) per bucket; c1 = i1 / 2**9 ~ 1 / f, exactly 2 and 1 at the ends (t near 1)."""
    rows = []
    for j in range(2**LEVEL1_BITS):
        lo = Fraction(1, 2) + Fraction(j, 2**(LEVEL1_BITS + 1))
        hi = lo + Fraction(1, 2**(LEVEL1_BITS + 1))
        i1 = 1024 if j == 0 else 512 if j == 2**LEVEL1_BITS - 1 else round(2**9 / ((lo + hi) / 2))
        rows.append((i1, lo, hi))
    return rows


def _worst(c: Fraction, lo: Fraction, hi: Fraction) -> Fraction:
    """max |(1 + r) c - 1| for r in [lo, hi] (linear in r: the ends)."""
    return max(abs((1 + lo) * c - 1), abs((1 + hi) * c - 1))


def _level(step: int, grain: int, slack: Fraction, r_prev: Fraction) -> tuple[list[int], Fraction, int]:
    """One table step after the first: for each index j, the constant 1 / (1 + j / 2**step) on the grain
    2**-grain, the worst reduced argument over inputs |r| <= r_prev whose rounded index is j, and the
    largest |j|."""
    j_max = int((r_prev + slack) * 2**step) + 1  # an index rounded from an r within `slack` of |r| <= r_prev
    table, worst = [], Fraction(0)
    for j in range(-j_max, j_max + 1):
        i = round(Fraction(2**(step + grain), 2**step + j))
        c = Fraction(i, 2**grain)
        lo = max(Fraction(2 * j - 1, 2**(step + 1)) - slack, -r_prev)
        hi = min(Fraction(2 * j + 1, 2**(step + 1)) + slack, r_prev)
        if lo <= hi:
            worst = max(worst, _worst(c, lo, hi))
        table.append(i)
    return table, worst, j_max


def build() -> dict:
    """Every table and bound, as plain Python floats and ints."""
    ln2 = _ln(Fraction(2))
    level1 = log_level1()
    r1 = max(max(abs(lo * Fraction(i1, 2**9) - 1), abs(hi * Fraction(i1, 2**9) - 1)) for i1, lo, hi in level1)
    level2, r2, j2_max = _level(LEVEL2_STEP, LEVEL2_GRAIN, INDEX_SLACK_2, r1)
    level3, r3, j3_max = _level(LEVEL3_STEP, LEVEL3_GRAIN, INDEX_SLACK_3, r2)

    # C = c1 c2 c3 is exact: at most 53 significant bits whatever the three indices
    assert max(_bits(i1) for i1, _, _ in level1) + max(map(_bits, level2)) + max(map(_bits, level3)) <= 53
    assert r1 <= Fraction(1, 2**8) and r2 < Fraction(1, 2**16) and r3 < Fraction(1, 2**24)

    def log_table(constants: list[Fraction]) -> dict:
        rows = [pieces(-_ln(c)) for c in constants]
        return {"c": [float(c) for c in constants], "p0": [r[0] for r in rows], "p1": [r[1] for r in rows],
                "p2": [r[2] for r in rows]}

    ln2_pieces = pieces(ln2)
    log_tables = [log_table([Fraction(i1, 2**9) for i1, _, _ in level1]),
                  log_table([Fraction(i2, 2**LEVEL2_GRAIN) for i2 in level2]),
                  log_table([Fraction(i3, 2**LEVEL3_GRAIN) for i3 in level3])]
    # piece k has at most 42 bits (so E times it is exact, |E| <= 1073 < 2**11), and the sum of
    # E A_k and the three tables' pieces k stays below 2**53 units of grain k (exact)
    for k, grain in enumerate(GRAINS):
        column = [ln2_pieces[k]] + [v for table in log_tables for v in table[f"p{k}"]]
        assert all(abs(v) * 2**grain < 2**42 for v in column)
        worst = 1073 * abs(ln2_pieces[k]) + sum(max(abs(v) for v in table[f"p{k}"]) for table in log_tables)
        assert worst * 2**grain < 2**53

    k0 = Fraction(round(ln2 / EXP_STEPS * 2**EXP_K0_GRAIN), 2**EXP_K0_GRAIN)
    assert _bits(k0.numerator) <= 34
    exp_rows = [_CONTEXT.exp(decimal.Decimal(j) / EXP_STEPS * _CONTEXT.ln(2)) for j in range(EXP_STEPS)]
    exp_hi = [float(v) for v in exp_rows]
    return {
        "LN2": ln2_pieces,
        "LOG1": log_tables[0], "LOG2": log_tables[1], "LOG3": log_tables[2],
        "J2_MAX": j2_max, "J3_MAX": j3_max,
        "R1": float(r1) * (1 + 2.0**-50), "R2": float(r2) * (1 + 2.0**-50), "R3": float(r3) * (1 + 2.0**-50),
        "EXP_HI": exp_hi, "EXP_LO": [float(Fraction(v) - Fraction(h)) for v, h in zip(exp_rows, exp_hi)],
        "EXP_K0": float(k0), "EXP_K1": float(ln2 / EXP_STEPS - k0), "EXP_INV": float(EXP_STEPS / ln2),
    }


def render(tables: dict) -> str:
    """The source of reference/logexp_tables.py: float columns as base64 of little-endian float64 bytes."""
    lines = ['"""Generated by `python -m conformance.reference.tablegen`: do not edit (see reference/tablegen.py).',
             "", "Float columns are base64 of little-endian float64 bytes; tests/reference/test_logexp.py checks",
             'that they equal what tablegen.build() computes."""', "", "import base64", "", "import numpy as np", "",
             "", "def _floats(text: str) -> np.ndarray:",
             "    return np.frombuffer(base64.b64decode(text), dtype='<f8').astype(np.float64)", ""]
    for name, value in tables.items():
        columns = {f"{name}_{c.upper()}": v for c, v in value.items()} if isinstance(value, dict) else {name: value}
        for column, items in columns.items():
            if isinstance(items, (list, tuple)):
                text = base64.b64encode(struct.pack(f"<{len(items)}d", *items)).decode()
                chunks = [text[i:i + 96] for i in range(0, len(text), 96)]
                lines.append(f"{column} = _floats(")
                lines.extend(f"    {chunk!r}" for chunk in chunks)
                lines.append(")")
            elif isinstance(items, float):
                lines.append(f"{column} = float.fromhex({items.hex()!r})")
            else:
                lines.append(f"{column} = {items!r}")
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render(build()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
