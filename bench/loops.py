"""The floors the bench holds the harness against: the framework's calls in a bare loop on prebuilt inputs, the
same in a fresh process that compiles each signature (a compiled mode), and the same through `Adapter.run`.

Part of the bench (bench/bench.py imports it; run as a script, the bench's folder is on the path). Measures only.
"""

from __future__ import annotations

import time
from pathlib import Path

from conformance.adapters.base import in_mode
from conformance.adapters.registry import get_adapter
from conformance.cases.generate import DEFAULT_SEED, build_case, generated_keys
from conformance.core.case import Case
from conformance.core.model import EAGER
from conformance.core.specload import load_spec
from conformance.judge.profiles import load_restrictions


def bare_loop(framework: str, cases: list[Case], repeat: int, mode: str = EAGER,
              cache_dir: Path | None = None) -> tuple[float, int, float]:
    """Best-of-`repeat` seconds for every API call of the suite on prebuilt inputs, the call count, and the
    seconds of the untimed first pass (the framework's first-call setup: any fresh process pays it, the
    run's worker too; in a compiled mode, every signature's compile). The calls are those the run sends: none
    its adapter or its profile (`unsupported:`) says the framework does not take. `cache_dir` is where the
    framework's compile caches live, as a run's --cache-dir (None: wherever the framework keeps them)."""
    adapter = get_adapter(framework)
    adapter.compile_cache_dir = cache_dir
    adapter.load()
    restrictions = load_restrictions(framework, load_spec())
    cpu = adapter.devices()[0]  # "cpu", or "<backend>:cpu" for Keras

    def sent(case: Case, api, part: str) -> bool:
        return (in_mode(adapter.unsupported_part, mode, api, part) is None
                and not any(r.covers(case, api.name, part, mode) for r in restrictions))
    prepared = []
    for case in cases:
        try:
            inputs = adapter.build(case, cpu)
        except Exception:
            continue  # the harness reports these as errors; the floor has nothing to call
        apis = [api for api in adapter.apis if adapter.unsupported_reason(case, api) is None]
        forwards = [api for api in apis if sent(case, api, "forward")]
        grads = [(api, part) for api in apis for part in case.parts[1:] if sent(case, api, part)]
        prepared.append((case, inputs, forwards, grads))
    calls = sum(len(apis) + len(grads) for _, _, apis, grads in prepared)
    best = first = float("inf")
    for attempt in range(repeat + 1):  # attempt 0 warms up (first-call setup, page faults): not in `best`
        start = time.perf_counter()
        for case, inputs, apis, grads in prepared:
            for api in apis:
                try:
                    adapter.to_numpy(in_mode(adapter.invoke, mode, case, api, inputs))
                except Exception:
                    pass
            for api, part in grads:
                try:
                    adapter.to_numpy(in_mode(adapter.gradient, mode, case, api, cpu, part))
                except Exception:
                    pass
        if attempt:
            best = min(best, time.perf_counter() - start)
        else:
            first = time.perf_counter() - start
    return best, calls, first


def fresh_compiled_loop(framework: str, suite: str, mode: str, cache_dir: str) -> tuple[float, float, float, int]:
    """In a fresh process (multiprocessing's spawn): the seconds to load the framework, to make every call of
    `suite` once (compiling each signature, through the compile caches under `cache_dir`), and to make them
    again compiled; and the call count. What a run of the mode cannot do with less."""
    cases = [build_case(key, DEFAULT_SEED) for _, key in generated_keys(load_spec(), suite=suite)]
    start = time.perf_counter()
    adapter = get_adapter(framework)
    adapter.compile_cache_dir = Path(cache_dir)  # as bare_loop's: the caches are set before the framework loads
    adapter.load()  # the import, paid once per process (bare_loop's own load is then cheap)
    load_s = time.perf_counter() - start
    best, calls, first = bare_loop(framework, cases, 1, mode, Path(cache_dir))
    return load_s, first, best, calls


def observed_loop(framework: str, cases: list[Case], repeat: int) -> float:
    """Best-of-`repeat` seconds for the same calls through `Adapter.run`, in process: what the worker
    does per call beyond the bare loop (result to NumPy, warnings and exceptions recorded)."""
    adapter = get_adapter(framework)
    adapter.load()
    cpu = adapter.devices()[0]
    calls = [(case, api, part) for case in cases for api in adapter.apis for part in case.parts
             if adapter.unsupported_reason(case, api) is None and adapter.unsupported_part(api, part) is None]
    best = float("inf")
    for attempt in range(repeat + 1):  # attempt 0 warms up (first-call setup, page faults): not timed
        start = time.perf_counter()
        for case, api, part in calls:
            adapter.run(case, api, cpu, part)
        best = min(best, time.perf_counter() - start) if attempt else best
    return best
