"""The reference cache gives back exactly what the reference computes, and misses on any change."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, generate_cases
from conformance.explain import Alternative, with_alternatives
from conformance.refcache import MAX_CACHED_ELEMENTS, ReferenceCache, reference_build
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad


def _expect(case, spec, part):
    return expected_forward(case, spec) if part == "forward" else expected_grad(case, spec, part)


def _same(a, b) -> bool:
    fields = [f.name for f in dataclasses.fields(a)]
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) if isinstance(getattr(a, f), np.ndarray)
               else getattr(a, f) == getattr(b, f) for f in fields)


@pytest.fixture(scope="module")
def suite(spec):
    return list(generate_cases(spec, DEFAULT_SEED))[:120]


def test_a_second_cache_reads_back_what_the_first_stored(spec, suite, tmp_path):
    first = ReferenceCache(tmp_path)
    for case in suite:
        for part in case.parts:
            assert first.get(case, spec, part) is None
            first.put(case, spec, part, _expect(case, spec, part))
    first.close()
    second = ReferenceCache(tmp_path)  # another process, another framework's run
    for case in suite:
        for part in case.parts:
            got = second.get(case, spec, part)
            assert got is not None and _same(got, _expect(case, spec, part)), f"{case.id} {part}"
    assert second.misses == 0 and second.hits == sum(len(c.parts) for c in suite)


def test_any_change_to_values_spec_or_part_misses(spec, suite, tmp_path):
    case = next(c for c in suite if c.input.size > 1 and "grad_input" in c.parts)
    cache = ReferenceCache(tmp_path)
    cache.put(case, spec, "forward", _expect(case, spec, "forward"))
    cache.flush()
    nudged = dataclasses.replace(case, input=np.nextafter(case.input, np.inf))
    other_spec = with_alternatives(spec, (Alternative("pointwise.conventions.target_zero.choice", "ieee"),))
    same_values_other_id = dataclasses.replace(case, id="user/renamed")
    assert cache.get(case, spec, "forward") is not None
    assert cache.get(same_values_other_id, spec, "forward") is not None  # the id is not part of the key
    assert cache.get(nudged, spec, "forward") is None
    assert cache.get(case, other_spec, "forward") is None
    assert cache.get(case, spec, "grad_input") is None
    assert cache.get(dataclasses.replace(case, params=dataclasses.replace(case.params, log_target=not case.params.log_target)),
                     spec, "forward") is None


def test_large_cases_are_not_stored(spec, suite, tmp_path):
    case = suite[0]
    big = dataclasses.replace(case, input=np.zeros(MAX_CACHED_ELEMENTS), target=np.full(MAX_CACHED_ELEMENTS, 0.5))
    cache = ReferenceCache(tmp_path)
    cache.put(big, spec, "forward", _expect(big, spec, "forward"))
    cache.flush()
    assert cache.get(big, spec, "forward") is None


def test_files_of_other_reference_builds_are_removed(tmp_path):
    stale = tmp_path / "reference-0000000000000000.sqlite"
    stale.write_bytes(b"old")
    ReferenceCache(tmp_path).close()
    assert not stale.exists()
    assert (tmp_path / f"reference-{reference_build()}.sqlite").is_file()


def test_an_unusable_cache_is_reported_not_fatal(spec, suite, tmp_path):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    cache = ReferenceCache(in_the_way)
    assert cache.problem and "not used" in cache.problem
    assert cache.get(suite[0], spec, "forward") is None
    cache.put(suite[0], spec, "forward", _expect(suite[0], spec, "forward"))
    cache.close()


def test_a_cache_that_is_not_a_database_is_reported_not_fatal(spec, suite, tmp_path):
    (tmp_path / f"reference-{reference_build()}.sqlite").write_bytes(b"this is not sqlite" * 100)
    cache = ReferenceCache(tmp_path)
    assert cache.get(suite[0], spec, "forward") is None
    assert cache.problem and "not used" in cache.problem
    json.dumps(cache.problem)  # recorded in run.json


def test_entries_are_data_not_pickles_and_damage_is_a_miss(spec, suite, tmp_path):
    import sqlite3

    case = suite[0]
    cache = ReferenceCache(tmp_path)
    cache.put(case, spec, "forward", _expect(case, spec, "forward"))
    cache.close()
    path = tmp_path / f"reference-{reference_build()}.sqlite"
    with sqlite3.connect(path) as db:
        (blob,) = db.execute("SELECT value FROM expected").fetchone()
        assert not blob.startswith(b"\x80")  # no pickle protocol header
        db.execute("UPDATE expected SET value = ?", (blob[:4] + b"{not json",))
    damaged = ReferenceCache(tmp_path)
    assert damaged.get(case, spec, "forward") is None and damaged.problem


def test_a_full_cache_stops_growing(spec, suite, tmp_path, monkeypatch):
    import conformance.refcache as refcache

    monkeypatch.setattr(refcache, "MAX_CACHE_BYTES", 1)
    cache = ReferenceCache(tmp_path)
    first, second = suite[0], suite[1]
    cache.put(first, spec, "forward", _expect(first, spec, "forward"))
    cache.flush()
    cache.put(second, spec, "forward", _expect(second, spec, "forward"))
    cache.flush()
    assert cache.full and "full" in cache.problem
    assert cache.get(first, spec, "forward") is not None and cache.get(second, spec, "forward") is None
