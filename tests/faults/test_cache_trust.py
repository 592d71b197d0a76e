"""The reference cache as a trust boundary: whoever can write the cache directory but does not hold the key
(a pull request's CI job restoring main's cache) cannot make a run trust an entry they changed. Every entry
they can write, sealed with whatever the harness exposes, is computed again before it can decide a verdict."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import stat

import numpy as np
import pytest

from conformance.cases.userfile import load_case_file
from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import default_spec_path, load_spec
from conformance.judge import refcache
from conformance.judge.refcache import ReferenceCache, case_key, content_digest, decode, encode, pack, unpack

# Honest cases first, each of its own content, so that the edited entry is not the first the run reads (which
# the run always computes again); the fault case's content is its own too, so its entry is one of a kind.
CASES = """
- {id: ok-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: ok-2, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: sum, dtype: float64}
- {id: ok-3, input: [[-2.0, -0.25]], target: [[0.125, 0.875]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.5, -0.75]], target: [[0.375, 0.625]], reduction: sum, dtype: float64}
"""
SPARE_KEY = "an attacker's own key, long enough to be used " * 2


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
        if not hasattr(refcache, "load_secret"):  # before keys the seal took none: the attack this test records
            return refcache.seal(table, key, body)
        return refcache.seal(refcache.load_secret(tmp_path / "attacker-cache"), table, key, body)


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
    # the edited entry was computed again and sealed with our key: the next run trusts it, and it is honest
    capsys.readouterr()
    assert _run(tmp_path, "cache-2", "warm") == 1
    assert "reference cache" not in capsys.readouterr().err
    assert {r.case_id: r.verdict.value for r in iter_results(tmp_path / "warm")}["the-fault"] == "value"
