"""Shards: disjoint, complete, independent of order, and stable across processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conformance.cases.generate import generate_cases
from conformance.cases.shard import Shard, parse_shard


def test_shards_are_disjoint_complete_and_balanced(spec):
    ids = [c.id for c in generate_cases(spec)]
    shards = [Shard(k, 4) for k in range(1, 5)]
    owners = [[s for s in shards if s.holds(i)] for i in ids]
    assert all(len(o) == 1 for o in owners)  # each case in exactly one shard
    sizes = [sum(s.holds(i) for i in ids) for s in shards]
    assert sum(sizes) == len(ids) and min(sizes) > len(ids) / 4 * 0.7, sizes


def test_a_case_keeps_its_shard_whatever_the_order_and_the_process(spec):
    ids = [c.id for c in generate_cases(spec)][:50]
    here = [Shard(2, 3).holds(i) for i in ids]
    assert [Shard(2, 3).holds(i) for i in reversed(ids)] == here[::-1]
    code = ("import sys; from conformance.cases.shard import Shard; "
            "print(''.join('1' if Shard(2, 3).holds(line.strip()) else '0' for line in sys.stdin))")
    other = subprocess.run([sys.executable, "-c", code], input="\n".join(ids), capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"}).stdout.strip()
    assert other == "".join("1" if h else "0" for h in here)


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "2", "a/b", "-1/3"])
def test_bad_shard_names_the_form(text):
    with pytest.raises(ValueError, match="K/N"):
        parse_shard(text)
    assert parse_shard("3/4") == Shard(3, 4)
