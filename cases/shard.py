"""Shards of a suite (`--shard K/N`), so a CI matrix can split one run over N jobs.

A case belongs to shard K of N by a stable hash of its id alone (not its position),
so the split does not depend on the order or the company of the cases, and every
machine, Python version and harness run computes the same split. The N shards are
disjoint and together hold every case; `kl-conformance report` merges their runs.

Depends on the id alone; imports nothing of the harness.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_FORM = re.compile(r"^([0-9]+)/([0-9]+)$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, case_id: str) -> bool:
        """Whether the case with this id is in this shard.

        Is equivalent to ``int(blake2b(case_id, 8 bytes), big-endian) % count == index - 1``.
        """
        digest = hashlib.blake2b(case_id.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.count == self.index - 1


def parse_shard(text: str) -> Shard:
    """`"2/4"` -> Shard(2, 4); raises ValueError naming the accepted form."""
    m = _FORM.match(text.strip())
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"{text!r} is not K/N with 1 <= K <= N (e.g. 2/4)")
    return Shard(int(m[1]), int(m[2]))
