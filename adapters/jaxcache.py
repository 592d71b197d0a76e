"""JAX's persistent compilation cache, kept beside the harness's reference cache.

In eager mode JAX compiles every primitive once per shape and dtype, and nearly every case
of a suite is a new signature: compiling is most of a JAX run (bench/bench.py shows how much).
The executables read back from this cache are the ones JAX
compiled and ran the first time, so a run with the cache gives the same rows as a run
without it (tests/e2e/test_run.py::test_same_seed_same_results_apart_from_timing compares
them in the JAX environments), only sooner.

JAX keys an entry by the computation, its compile options and the jax/jaxlib versions.
XLA:CPU compiles for the host's instruction set, and an executable carried to a CPU without
those features could fault, so the cache is scoped here by the machine and its CPU flags as
well (a home directory shared by machines of a CI fleet is the case in point): adapters/cachescope.py
keeps the scopes, each emptied past MAX_BYTES and removed when idle. JAX's own size bound is not
used: it needs the `filelock` package and lists the whole folder on every write, which made a
first run slower with the cache than without it.
Concurrent runs (tox -p) share a scope; an entry another run is still writing reads as
damaged, which JAX answers by compiling again, with a warning that the adapters do not record
as the framework's (adapters/observation.py: HARNESS_WARNINGS). A JAX_COMPILATION_CACHE_DIR the user
set is left as it is.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Callable

from conformance.adapters.cachescope import open_scope

MAX_BYTES = 256 * 2**20
PREFIX = "jax-"


def enable(jax, directory: Path | None, note: Callable[[str], None] = lambda text: None) -> Path | None:
    """Point JAX's persistent compilation cache at a host-scoped folder of `directory` (None: leave it off),
    caching every executable however fast it compiled. Call it before JAX compiles anything. Returns the
    folder used, or None. An older JAX that lacks one of these options is run without it: `note` is told in one
    line (the adapter's `degraded`), and the run goes on, since the cache only saves time."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    scoped = open_scope(directory, PREFIX, host_text(jax), MAX_BYTES)
    if scoped is None:
        return None  # no cache directory, or an unwritable one: it costs time, never a result
    if not _update(jax, "jax_compilation_cache_dir", str(scoped), note, "the run goes on without JAX's "
                   "persistent compilation cache (slower, the same results)"):
        return None
    _update(jax, "jax_persistent_cache_min_compile_time_secs", 0.0, note,  # eager primitives compile in ms
            "JAX caches only what it compiled slowly")
    _update(jax, "jax_persistent_cache_min_entry_size_bytes", -1, note, "JAX caches only its larger executables")
    return scoped


def _update(jax, option: str, value, note: Callable[[str], None], otherwise: str) -> bool:
    """Set a JAX option; where this JAX does not know it ("Unrecognized config option"), tell `note` so."""
    try:
        jax.config.update(option, value)
    except Exception as exc:  # AttributeError on JAX 0.4.13; any other refusal is the same to the run
        note(f"JAX {jax.__version__} does not take the option {option} ({type(exc).__name__}: "
             f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'}): {otherwise}")
        return False
    return True


def host_text(jax) -> str:
    """What an executable depends on beyond JAX's own key: the machine, its CPU's features, the versions."""
    import jaxlib

    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:  # not Linux: the processor's name stands for its features
        pass
    return f"{platform.machine()} {platform.processor()} {flags.strip()} jax {jax.__version__} jaxlib {jaxlib.__version__}"
