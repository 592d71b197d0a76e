"""A compile cache's scopes (adapters/cachescope.py, JAX's here): bounded, old scopes removed, and its warnings never taken for the framework's.

That a run with the cache gives the rows of a run without it, on the real JAX, is checked by
tests/e2e/test_run.py::test_same_seed_same_results_apart_from_timing in the JAX environments.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from conformance.adapters.base import call_observed
from conformance.adapters.cachescope import MAX_IDLE_S, empty_if_over, remove_idle_scopes


def test_a_scope_past_its_bound_is_emptied_and_one_within_it_kept(tmp_path):
    scope = tmp_path / "jax-a"
    scope.mkdir()
    for i in range(4):
        (scope / f"entry{i}-cache").write_bytes(b"x" * 100)
    assert not empty_if_over(scope, 400) and len(list(scope.iterdir())) == 4
    assert empty_if_over(scope, 399) and list(scope.iterdir()) == []


def test_only_idle_scopes_of_other_hosts_are_removed(tmp_path):
    now = time.time()
    old, recent, mine = (tmp_path / name for name in ("jax-old", "jax-recent", "jax-mine"))
    for scope in (old, recent, mine):
        scope.mkdir()
        (scope / "entry-cache").write_bytes(b"x")
    stale = now - MAX_IDLE_S - 60
    os.utime(old, (stale, stale))
    os.utime(mine, (stale, stale))  # the scope in use is never removed, however old its mark
    (tmp_path / "reference-0123.sqlite").write_bytes(b"not a JAX scope")
    assert remove_idle_scopes(tmp_path, keep=mine, prefix="jax-", now=now) == ["jax-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jax-mine", "jax-recent", "reference-0123.sqlite"]


def test_the_caches_own_warnings_are_not_recorded_as_the_frameworks():
    """JAX warns when it meets an entry another run is still writing, then compiles again: that warning
    is the harness's cache, not the loss; a warning of the call itself is still recorded."""
    def call():
        warnings.warn("Error reading persistent compilation cache entry for 'jit_log': RuntimeError: truncated")
        warnings.warn("Error writing persistent compilation cache entry for 'jit_log': OSError: disk full")
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size")
        return np.float64(1.5)

    observed = call_observed(call, lambda r: (np.asarray(r), "float64", ()))
    assert observed.value == 1.5
    assert observed.warnings == ("UserWarning: reduction: 'mean' divides the total loss by both the batch size "
                                 "and the support size",)
