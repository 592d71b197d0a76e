"""The reference cache as a trust boundary: whoever can write the cache directory but does not hold the key
(a pull request's CI job restoring main's cache) cannot make a run trust an entry they changed. Every entry
they can write, sealed with whatever the harness exposes, is computed again before it can decide a verdict."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import sqlite3
import stat

import numpy as np
import pytest

from conformance.cases.generate import DEFAULT_SEED, generate_cases
from conformance.cases.userfile import load_case_file
from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import default_spec_path, load_spec
from conformance.judge import cachekey, cacheseal
from conformance.judge.cacheentry import decode, encode, pack, unpack
from conformance.judge.cachekey import case_key, content_digest
from conformance.judge.refcache import ReferenceCache
from conformance.reference.forward import expected_forward

# Honest cases first, each of its own content, so that the edited entry is not the first the run reads (which
# the run always computes again); the fault case's content is its own too, so its entry is one of a kind.
CASES = """
- {id: ok-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-2, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: sum, dtype: float64}
- {id: ok-3, input: [[-2.0, -0.25]], target: [[0.125, 0.875]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.5, -0.75]], target: [[0.375, 0.625]], reduction: sum, dtype: float64}
"""
PLANTED_KEY = "an attacker's own key, long enough to be used " * 2


@pytest.fixture()
def ours(tmp_path, monkeypatch):
    """The run's environment: no $KL_CACHE_KEY, its key file in a config folder of its own."""
    monkeypatch.delenv("KL_CACHE_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def _run(tmp_path, cache: str, out: str) -> int:
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", "tests.faults.adapters:OffByOneAdapter", "--cases", str(cases),
                 "--suite", "none", "--out", str(tmp_path / out), "--no-progress", "--no-repro", "--strict",
                 "--cache-dir", str(tmp_path / cache)])


def _fault_entry_key(tmp_path) -> bytes:
    """The key of the fault case's forward expectation, as anyone who has the case file can derive it."""
    case = next(c for c in load_case_file(tmp_path / "cases.yaml") if c.id == "the-fault")
    return case_key(content_digest(case), load_spec(default_spec_path()), "forward")


def _reseal_without_our_key(tmp_path, monkeypatch, table: str, key: bytes, body: bytes) -> bytes:
    """`body` sealed by the harness's own functions in the attacker's environment (a job of a pull request):
    its own config folder, and $KL_CACHE_KEY unset, as a CI secret is for a fork's pull request."""
    with monkeypatch.context() as attacker:
        attacker.setenv("XDG_CONFIG_HOME", str(tmp_path / "attacker-config"))
        attacker.delenv("KL_CACHE_KEY", raising=False)
        if not hasattr(cacheseal, "load_secret"):  # before keys the seal took none: the attack this test records
            return cacheseal.seal(table, key, body)
        return cacheseal.seal(cacheseal.load_secret(tmp_path / "attacker-cache"), table, key, body)


def _edit_fault_entry(tmp_path, monkeypatch, cache: str) -> None:
    """The fault case's expected values moved by one, what the off-by-one adapter returns, and sealed again."""
    key = _fault_entry_key(tmp_path)
    path = next((tmp_path / cache).glob("reference-*.sqlite"))
    with sqlite3.connect(path) as db:
        (stored,) = db.execute("SELECT value FROM expected WHERE key = ?", (key,)).fetchone()
        expected = decode(unpack(stored[32:]))
        edited = pack(encode(dataclasses.replace(expected, value=expected.value + 1.0)))
        resealed = _reseal_without_our_key(tmp_path, monkeypatch, "expected", key, edited)
        assert db.execute("UPDATE expected SET value = ? WHERE key = ?", (resealed, key)).rowcount == 1


def test_an_entry_resealed_without_the_key_never_decides_a_pass(ours, monkeypatch, capsys):
    """An off-by-one adapter passed --strict (exit 0) once its entry was edited and sealed again: the run
    computed again only its first read and one in 16. Three fresh caches, each attacked once: every run must
    compute the edited entry again and flag the adapter (before keys, all three caught it 1 time in 4096)."""
    tmp_path = ours
    for attempt in range(3):
        cache = f"cache-{attempt}"
        assert _run(tmp_path, cache, f"cold-{attempt}") == 1  # fills the cache; the fault is flagged
        _edit_fault_entry(tmp_path, monkeypatch, cache)
        capsys.readouterr()
        assert _run(tmp_path, cache, f"attacked-{attempt}") == 1, f"attempt {attempt}: the edited entry decided a pass"
        verdicts = {row.case_id: row.verdict.value for row in iter_results(tmp_path / f"attacked-{attempt}")}
        assert verdicts == {"ok-1": "pass", "ok-2": "pass", "ok-3": "pass", "the-fault": "value"}, verdicts
        recorded = json.loads((tmp_path / f"attacked-{attempt}" / "run.json").read_text())["reference_cache"]
        assert recorded["problem"] == "1 entry not sealed under this run's key computed again and sealed under it"
    # the edited entry was computed again and sealed with our key: the next run trusts it, and it is honest
    capsys.readouterr()
    assert _run(tmp_path, "cache-2", "warm") == 1
    assert "reference cache" not in capsys.readouterr().err
    assert {r.case_id: r.verdict.value for r in iter_results(tmp_path / "warm")}["the-fault"] == "value"


# Each way someone who can write the cache directory, but not read the key, may store an entry. Each must end in
# the entry being computed again, never served.

OTHER_SECRET = b"another user's or job's key, long enough to be used"


def _one_case(spec):
    """A case with finite expected values (the honest one that the attacks edit)."""
    return next(c for c in generate_cases(spec, DEFAULT_SEED) if c.dtype.input == c.dtype.target == "float64"
                and c.params.reduction == "none" and not c.params.has_legacy and c.input.size > 1
                and np.isfinite(expected_forward(c, spec).value).all())


def _honest_then_edited(directory, spec, case):
    """The case's forward expectation, stored honestly by a run; returns it, its entry's key, and the entry's bytes
    with every expected value moved by one (what an off-by-one framework would return)."""
    honest = expected_forward(case, spec)
    cache = ReferenceCache(directory)
    cache.put(case, spec, "forward", honest)
    cache.close()
    edited = pack(encode(dataclasses.replace(honest, value=honest.value + 1.0)))
    return honest, case_key(content_digest(case), spec, "forward"), edited


def _store(directory, key: bytes, value: bytes) -> None:
    path = next(directory.glob("reference-*.sqlite"))
    with sqlite3.connect(path) as db:
        assert db.execute("UPDATE expected SET value = ? WHERE key = ?", (value, key)).rowcount == 1


def _hmac_by_hand(secret: bytes, key: bytes, body: bytes) -> bytes:
    """The seal written from the format cacheseal.py documents, without its functions (which refuse no key)."""
    message = cachekey.reference_build().encode() + b"\0expected\0" + key + body
    return hmac.new(secret, message, hashlib.sha256).digest() + body


ATTACKS = {
    "no-mac": lambda ours, key, body: body,
    "keyless-seal": lambda ours, key, body: hashlib.sha256(  # the seal before keys
        cachekey.reference_build().encode() + b"\0expected\0" + key + body).digest() + body,
    "truncated-mac": lambda ours, key, body: cacheseal.mac(ours, "expected", key, body)[:16] + body,
    "mac-only-cut-short": lambda ours, key, body: cacheseal.mac(ours, "expected", key, body)[:31],
    "empty": lambda ours, key, body: b"",
    "mac-of-another-key": lambda ours, key, body: cacheseal.seal(OTHER_SECRET, "expected", key, body),
    "mac-of-the-empty-key": lambda ours, key, body: _hmac_by_hand(b"", key, body),
    "mac-of-the-honest-entry": lambda ours, key, body: None,  # the entry's own mac kept, its bytes edited
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_entry_not_sealed_under_our_key_is_computed_again_and_sealed_anew(ours, spec, attack, capsys):
    from conformance.judge.casejudge import CaseJudge

    case, directory = _one_case(spec), ours / "cache"
    honest, key, edited = _honest_then_edited(directory, spec, case)
    secret = cacheseal.load_secret(directory)
    if attack == "mac-of-the-honest-entry":
        with sqlite3.connect(next(directory.glob("reference-*.sqlite"))) as db:
            (stored,) = db.execute("SELECT value FROM expected WHERE key = ?", (key,)).fetchone()
        value = stored[:32] + edited
    else:
        value = ATTACKS[attack](secret, key, edited)
    _store(directory, key, value)
    capsys.readouterr()
    attacked = ReferenceCache(directory)
    assert attacked.get(case, spec, "forward") is None  # not served: a miss, never the edited values
    assert (attacked.untrusted, attacked.hits, attacked.dropped) == (1, 0, False)
    warning = capsys.readouterr().err.strip()
    assert len(warning.splitlines()) == 1 and "computed again" in warning, warning
    computed = CaseJudge(case, spec, attacked).expected(spec, "forward")  # computed again, and stored again
    assert np.array_equal(computed.value, honest.value) and np.array_equal(computed.bound, honest.bound)
    attacked.close()
    # run.json's reference_cache.problem (the judge read the entry a second time, and did not trust it either)
    assert attacked.problem == "2 entries not sealed under this run's key computed again and sealed under it"
    warm = ReferenceCache(directory)  # sealed anew under our key: served again, honest
    served = warm.get(case, spec, "forward")
    assert served is not None and np.array_equal(served.value, honest.value) and warm.untrusted == 0
    warm.close()


def test_the_harness_seals_nothing_without_a_key(ours):
    """Its functions refuse an empty key, so no one can seal with them what a run without a key would read."""
    with pytest.raises(ValueError, match="no secret"):
        cacheseal.seal(b"", "expected", b"k" * 20, b"body")
    with pytest.raises(ValueError, match="no secret"):
        cacheseal.mac(b"", "expected", b"k" * 20, b"body")


def test_an_empty_key_variable_is_no_key(ours, spec, monkeypatch):
    """$KL_CACHE_KEY set but empty (a CI secret a fork's pull request is not given) falls back to the key file,
    so an entry sealed under the empty key is computed again."""
    monkeypatch.setenv("KL_CACHE_KEY", "")
    case, directory = _one_case(spec), ours / "cache"
    _, key, edited = _honest_then_edited(directory, spec, case)
    assert cacheseal.load_secret(directory) == (ours / "config" / "kl-conformance" / "cache.key").read_bytes().strip()
    _store(directory, key, _hmac_by_hand(b"", key, edited))
    attacked = ReferenceCache(directory)
    assert attacked.get(case, spec, "forward") is None and attacked.untrusted == 1
    attacked.close()


def test_another_key_in_the_variable_recomputes_what_the_first_sealed(ours, spec, monkeypatch):
    """Entries a job sealed under one $KL_CACHE_KEY are not trusted by a job with another: computed again."""
    case, directory = _one_case(spec), ours / "cache"
    monkeypatch.setenv("KL_CACHE_KEY", "main's secret, set only where main's gate runs")
    _honest_then_edited(directory, spec, case)
    monkeypatch.setenv("KL_CACHE_KEY", "a pull request's secret, or one of its own making")
    other = ReferenceCache(directory)
    assert other.get(case, spec, "forward") is None and other.untrusted == 1
    other.close()
    monkeypatch.setenv("KL_CACHE_KEY", "main's secret, set only where main's gate runs")
    again = ReferenceCache(directory)
    assert again.get(case, spec, "forward") is not None and again.hits == 1  # speed, where the key is ours
    again.close()


def test_the_key_file_is_made_once_for_this_user_only(ours, spec):
    case, directory = _one_case(spec), ours / "cache"
    honest, _, _ = _honest_then_edited(directory, spec, case)
    path = ours / "config" / "kl-conformance" / "cache.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(path.read_bytes().strip()) >= 32
    first = path.read_bytes()
    warm = ReferenceCache(directory)
    served = warm.get(case, spec, "forward")
    assert served is not None and np.array_equal(served.value, honest.value) and warm.untrusted == 0
    warm.close()
    assert path.read_bytes() == first


def _refused(directory, spec, capsys, *words) -> None:
    """The cache in `directory` is not used: one line on stderr says why, and no entry is served."""
    case = _one_case(spec)
    capsys.readouterr()
    cache = ReferenceCache(directory)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not used" in err and "Fix:" in err, err
    for word in words:
        assert word in err, err
    assert "not used" in cache.problem
    assert cache.get(case, spec, "forward") is None and cache.hits == 0
    cache.put(case, spec, "forward", expected_forward(case, spec))
    cache.close()
    assert not list(directory.glob("reference-*.sqlite"))  # nothing written either


def _plant_key_file(ours, target) -> None:
    """The run's key file made a symbolic link to `target`, a key file the attacker wrote."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(PLANTED_KEY)
    target.chmod(0o600)
    path = ours / "config" / "kl-conformance" / "cache.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def test_a_key_file_that_links_into_the_cache_directory_is_refused(ours, spec, capsys):
    _plant_key_file(ours, ours / "cache" / "planted.key")
    _refused(ours / "cache", spec, capsys, "lies in the cache directory")


def test_a_key_file_that_is_any_link_is_refused(ours, spec, capsys):
    _plant_key_file(ours, ours / "elsewhere" / "planted.key")
    _refused(ours / "cache", spec, capsys, "symbolic link")


def test_a_config_folder_inside_the_cache_directory_is_refused(ours, spec, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ours / "cache" / "config"))
    _refused(ours / "cache", spec, capsys, "lies in the cache directory")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660])
def test_a_key_file_others_may_read_or_write_is_refused(ours, spec, capsys, mode):
    cacheseal.load_secret(ours / "cache")  # made, mode 0600
    path = ours / "config" / "kl-conformance" / "cache.key"
    path.chmod(mode)
    _refused(ours / "cache", spec, capsys, f"mode {mode:o}", f"chmod 600 {path}")


def test_a_key_file_of_another_user_is_refused(ours, spec, capsys, monkeypatch):
    cacheseal.load_secret(ours / "cache")
    owner = (ours / "config" / "kl-conformance" / "cache.key").stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # this process, as another user than the file's
    _refused(ours / "cache", spec, capsys, f"user id {owner}")


def test_a_short_key_is_refused(ours, spec, capsys, monkeypatch):
    monkeypatch.setenv("KL_CACHE_KEY", "hunter2")
    _refused(ours / "cache", spec, capsys, "$KL_CACHE_KEY has 7 characters")
