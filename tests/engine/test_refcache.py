"""The reference cache gives back exactly what the reference computes, and misses on any change."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, generate_cases
from conformance.core.choices import Alternative, with_alternatives
from conformance.judge.cachekey import reference_build
from conformance.judge.cacheseal import load_secret
from conformance.judge.refcache import MAX_CACHED_ELEMENTS, ReferenceCache
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad


def _expect(case, spec, part):
    return expected_forward(case, spec) if part == "forward" else expected_grad(case, spec, part)


def _same(a, b) -> bool:
    fields = [f.name for f in dataclasses.fields(a)]
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) if isinstance(getattr(a, f), np.ndarray)
               else getattr(a, f) == getattr(b, f) for f in fields)


@pytest.fixture(autouse=True)
def own_key(tmp_path_factory, monkeypatch):
    """Each test's own key file, outside the cache directories (tmp_path), so that no test reads or makes the
    user's."""
    monkeypatch.delenv("KL_CACHE_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


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
    other_spec = with_alternatives(spec, (Alternative("pointwise.conventions.target_zero", "ieee"),))
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


def _build_files(directory, build, size=3, age_s=0.0):
    """The files an older cache of `build` left, last used `age_s` ago."""
    import os
    import time

    files = [directory / f"reference-{build}.sqlite", directory / f"reference-{build}.sqlite-wal"]
    for path in files:
        path.write_bytes(b"x" * size)
        os.utime(path, (time.time() - age_s,) * 2)
    return files


def test_builds_of_other_environments_are_kept_side_by_side(tmp_path):
    # another environment's NumPy makes another build: opening this one must not delete it (tox -m conformance)
    other = _build_files(tmp_path, "0000000000000000")
    ReferenceCache(tmp_path).close()
    assert all(p.exists() for p in other)
    assert (tmp_path / f"reference-{reference_build()}.sqlite").is_file()


def test_idle_builds_are_removed(tmp_path):
    import conformance.judge.cachebuilds as cachebuilds

    idle = _build_files(tmp_path, "1111111111111111", age_s=cachebuilds.MAX_IDLE_S + 60)
    recent = _build_files(tmp_path, "2222222222222222", age_s=cachebuilds.MAX_IDLE_S - 60)
    ReferenceCache(tmp_path).close()
    assert not any(p.exists() for p in idle) and not (tmp_path / "reference-1111111111111111.lock").exists()
    assert all(p.exists() for p in recent)


def test_over_size_the_oldest_builds_go_first(tmp_path, monkeypatch):
    import conformance.judge.cachebuilds as cachebuilds

    oldest = _build_files(tmp_path, "1111111111111111", size=400, age_s=300)
    older = _build_files(tmp_path, "2222222222222222", size=400, age_s=200)
    newer = _build_files(tmp_path, "3333333333333333", size=400, age_s=100)
    monkeypatch.setattr(cachebuilds, "MAX_TOTAL_BYTES", 1700)  # the three (2400 bytes) are over; two are under
    assert cachebuilds.remove_unused_builds(tmp_path, keep="none") == ["1111111111111111"]
    assert not any(p.exists() for p in oldest) and all(p.exists() for p in older + newer)


def test_a_build_that_a_run_holds_open_is_never_removed(tmp_path, monkeypatch):
    import conformance.judge.cachebuilds as cachebuilds
    import conformance.judge.refcache as refcache

    monkeypatch.setattr(refcache, "reference_build", lambda: "4444444444444444")
    in_use = ReferenceCache(tmp_path)  # another run, still going
    files = sorted(tmp_path.glob("reference-4444444444444444*"))
    monkeypatch.setattr(cachebuilds, "MAX_IDLE_S", -1.0)  # every other build counts as idle
    assert cachebuilds.remove_unused_builds(tmp_path, keep="5555555555555555") == []
    assert all(p.exists() for p in files)
    in_use.close()
    assert cachebuilds.remove_unused_builds(tmp_path, keep="5555555555555555") == ["4444444444444444"]
    assert not any(tmp_path.glob("reference-4444444444444444*"))


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
        assert not blob[32:].startswith(b"\x80")  # no pickle protocol header (after the entry's seal)
        db.execute("UPDATE expected SET value = ?", (blob[:4] + b"{not json",))
    damaged = ReferenceCache(tmp_path)
    assert damaged.get(case, spec, "forward") is None and damaged.problem


def test_a_full_cache_stops_growing(spec, suite, tmp_path, monkeypatch):
    import conformance.judge.refcache as refcache

    monkeypatch.setattr(refcache, "MAX_CACHE_BYTES", 1)
    cache = ReferenceCache(tmp_path)
    first, second = suite[0], suite[1]
    cache.put(first, spec, "forward", _expect(first, spec, "forward"))
    cache.flush()
    cache.put(second, spec, "forward", _expect(second, spec, "forward"))
    cache.flush()
    assert cache.full and "full" in cache.problem
    assert cache.get(first, spec, "forward") is not None and cache.get(second, spec, "forward") is None


def test_entries_are_small_enough_for_the_exhaustive_suite(spec, suite, tmp_path):
    # entries were about 790 bytes, most of it a JSON header repeating field and rule names, so the 512 MB
    # cap filled a third of the way through `--exhaustive --samples 2` (1.2M results); deflated with a preset
    # dictionary they fit it whole
    import sqlite3

    cache = ReferenceCache(tmp_path)
    for case in suite:
        for part in case.parts:
            cache.put(case, spec, part, _expect(case, spec, part))
    cache.close()
    with sqlite3.connect(tmp_path / f"reference-{reference_build()}.sqlite") as db:
        sizes = [len(blob) for (blob,) in db.execute("SELECT value FROM expected")]
    assert sum(sizes) / len(sizes) < 300, sum(sizes) / len(sizes)


def test_entries_that_share_a_header_decode_to_their_own_arrays(monkeypatch):
    """decode parses each distinct header once; what it shares must never carry one entry's values
    into another's, nor let a caller's write reach the next hit, and the memo stays bounded."""
    import conformance.judge.cacheentry as cacheentry
    from conformance.core.model import Expected

    def entry(scale):
        return cacheentry.encode(Expected(result_dtype="float32", shape=(2, 3),
                                          value=np.arange(6.0).reshape(2, 3) * scale,
                                          bound=np.full((2, 3), scale), rules=("shapes.broadcasting",)))
    one, two = entry(1.0), entry(2.0)
    assert one[:4 + int.from_bytes(one[:4], "little")] == two[:4 + int.from_bytes(two[:4], "little")]  # one header
    first, second = cacheentry.decode(one), cacheentry.decode(two)
    assert first.value.tolist() == [[0, 1, 2], [3, 4, 5]] and second.value.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert first.bound.tolist() == [[1.0] * 3] * 2 and second.bound.tolist() == [[2.0] * 3] * 2
    assert first.shape == second.shape == (2, 3) and first.rules == ("shapes.broadcasting",)
    first.value[0, 0] = 99.0
    assert cacheentry.decode(one).value[0, 0] == 0.0
    monkeypatch.setattr(cacheentry, "_MAX_LAYOUTS", 2)
    cacheentry._LAYOUTS.clear()
    for scale_shape in [(1,), (2,), (3,), (4,)]:
        cacheentry.decode(cacheentry.encode(Expected(result_dtype="float64", shape=scale_shape,
                                                     value=np.zeros(scale_shape), bound=np.zeros(scale_shape))))
    assert len(cacheentry._LAYOUTS) <= 2


def test_an_explanation_is_kept_under_everything_it_reads(spec, suite, tmp_path):
    """A stored explanation serves only the case, spec, part, dialect and observation it was derived for."""
    case = next(c for c in suite if c.input.size > 1 and "grad_input" in c.parts)
    cache = ReferenceCache(tmp_path)
    key = cache.explanation_key(case, spec, "forward", "canonical", b"observed A")
    cache.put_explanation(key, b'[["pointwise.conventions.target_zero", "ieee"]]')
    cache.close()
    again = ReferenceCache(tmp_path)
    assert again.get_explanation(key) == b'[["pointwise.conventions.target_zero", "ieee"]]'
    other_spec = with_alternatives(spec, (Alternative("pointwise.conventions.target_zero", "ieee"),))
    nudged = dataclasses.replace(case, input=np.nextafter(case.input, np.inf))
    others = [again.explanation_key(case, spec, "forward", "canonical", b"observed B"),
              again.explanation_key(nudged, spec, "forward", "canonical", b"observed A"),
              again.explanation_key(case, other_spec, "forward", "canonical", b"observed A"),
              again.explanation_key(case, spec, "grad_input", "canonical", b"observed A"),
              again.explanation_key(case, spec, "forward", "keras", b"observed A")]
    assert len({key, *others}) == 6 and all(again.get_explanation(k) is None for k in others)
    assert again.explained_hits == 1 and again.explained_misses == 5


def _explained_divergence(spec, suite):
    """A case, and an observation that diverges from the spec and is explained by an alternative (the value the
    reference computes under that alternative)."""
    from conformance.core.choices import alternatives
    from conformance.core.model import Observation

    for alt in alternatives(spec):
        alt_spec = with_alternatives(spec, (alt,))
        for case in suite:
            if case.params.prob_input or case.input.size < 2:
                continue
            canonical, under_alt = expected_forward(case, spec), expected_forward(case, alt_spec)
            if under_alt.error_id is None and canonical.error_id is None and \
                    not np.array_equal(canonical.value, under_alt.value, equal_nan=True):
                return case, Observation(value=under_alt.value, dtype=under_alt.result_dtype, shape=under_alt.shape)
    raise AssertionError("no explained divergence in the suite")


def test_a_stored_explanation_never_serves_another_observation(spec, suite, tmp_path, monkeypatch):
    """What wrong answer could a stored explanation give? Another observation's: an observation one ulp away
    from a stored one is explained afresh, exactly as without the cache. (The sample a run derives again is
    turned off here, so that the planted entry is served: tests/faults/test_inputs.py shows it caught.)"""
    monkeypatch.setattr(ReferenceCache, "should_verify", lambda self, table="expected": False)
    from conformance.core.model import Observation
    from conformance.judge.casejudge import CaseJudge

    case, observed = _explained_divergence(spec, suite)
    value = observed.value.copy()
    value.reshape(-1)[0] = np.nextafter(value.reshape(-1)[0], np.inf)
    nearby = Observation(value=value, dtype=observed.dtype, shape=observed.shape)
    cache = ReferenceCache(tmp_path)
    stored = CaseJudge(case, spec, cache).judgement("forward", "canonical", observed)
    assert stored.verdict.is_divergence and "behaves as" in stored.message and cache.explained_misses == 1
    cache.close()
    import sqlite3
    from conformance.judge.cacheseal import seal
    with sqlite3.connect(tmp_path / f"reference-{reference_build()}.sqlite") as db:  # plant a wrong explanation,
        (key,) = db.execute("SELECT key FROM explained").fetchone()  # sealed under the run's own key
        planted = seal(load_secret(tmp_path / "cache"), "explained", key, b'["dtypes.mixed", "dtypes.mixed = planted"]')
        assert db.execute("UPDATE explained SET value = ?", (planted,)).rowcount == 1
    warm = ReferenceCache(tmp_path)
    assert "dtypes.mixed = planted" in CaseJudge(case, spec, warm).judgement("forward", "canonical", observed).message
    assert warm.explained_hits == 1  # the planted entry is what a rerun reads for that very observation ...
    fresh = CaseJudge(case, spec).judgement("forward", "canonical", nearby)
    again = CaseJudge(case, spec, warm).judgement("forward", "canonical", nearby)
    assert (again.verdict, again.message, again.cause) == (fresh.verdict, fresh.message, fresh.cause)  # ... never
    assert "planted" not in fresh.message and warm.explained_misses == 1  # another's


def test_a_planted_explanation_sealed_again_is_caught_by_the_sample(spec, suite, tmp_path, capsys):
    """Someone who has the key (it leaked) can seal a planted explanation as the cache does; the first explanation
    a run reads is derived again, so the plant is caught, the whole cache dropped, and the run explains afresh."""
    import sqlite3

    from conformance.judge.casejudge import CaseJudge
    from conformance.judge.cacheseal import seal

    case, observed = _explained_divergence(spec, suite)
    cache = ReferenceCache(tmp_path)
    honest = CaseJudge(case, spec, cache).judgement("forward", "canonical", observed)
    cache.close()
    with sqlite3.connect(tmp_path / f"reference-{reference_build()}.sqlite") as db:
        (key,) = db.execute("SELECT key FROM explained").fetchone()
        planted = seal(load_secret(tmp_path / "cache"), "explained", key, b'["dtypes.mixed", "dtypes.mixed = planted"]')
        db.execute("UPDATE explained SET value = ?", (planted,))
    warm = ReferenceCache(tmp_path)
    again = CaseJudge(case, spec, warm).judgement("forward", "canonical", observed)
    assert (again.verdict, again.message) == (honest.verdict, honest.message) and "planted" not in again.message
    assert warm.dropped and "dropped" in capsys.readouterr().err
    warm.close()
    with sqlite3.connect(tmp_path / f"reference-{reference_build()}.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM explained").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM expected").fetchone() == (0,)


def test_stored_documentation_follows_the_profile(spec, suite, tmp_path):
    """A divergence documented under a profile is not documented from the cache once that deviation (same id)
    declares something else: nothing is documented unless it equals the deviated reference."""
    from conformance.core.model import Observation
    from conformance.judge.casejudge import CaseJudge
    from conformance.judge.profiles import DeviationLedger

    apis = ["torch.nn.functional.kl_div", "torch.nn.KLDivLoss"]
    case = next(c for c in suite if c.params.reduction == "batchmean" and c.input.shape != c.target.shape
                and c.input.shape and c.target.shape and c.input.shape[0] != np.broadcast_shapes(
                    c.input.shape, c.target.shape)[0] and not c.params.log_target and not c.params.has_legacy)
    profile = dict(id="batchmean-divides-by-input-dim0", apis=apis, rationale="r", basis="docs", reference="https://example.org")
    declared = with_alternatives(spec, (Alternative("reductions.batchmean.divisor", "input_dim0"),))
    under = expected_forward(case, declared)
    observed = Observation(value=under.value, dtype=under.result_dtype, shape=under.shape)
    documented = []
    for n, sets in enumerate(({"reductions.batchmean.divisor": "input_dim0"},
                              {"gradients.conventions.target_zero": "nan"})):
        directory = tmp_path / f"profiles{n}"
        directory.mkdir()
        (directory / "torch.yaml").write_text(json.dumps({"framework": "torch", "deviations": [{**profile, "set": sets}]}))
        ledger = DeviationLedger(spec, "torch", apis, directory)
        cache = ReferenceCache(tmp_path / "cache")
        judge = CaseJudge(case, spec, cache)
        assert judge.judgement("forward", "canonical", observed).verdict.is_divergence
        documented.append(judge.documented(ledger, apis[0], "forward", "canonical", observed))
        assert documented[-1] == CaseJudge(case, spec).documented(ledger, apis[0], "forward", "canonical", observed)
        cache.close()
    assert documented == [("batchmean-divides-by-input-dim0",), ()]
