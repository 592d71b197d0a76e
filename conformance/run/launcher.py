"""Starts worker processes: from a thread that lasts as long as the harness, and without running the caller's
main script again in the child.

Starts the processes a pool has made; never talks to a worker once it runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator


@contextlib.contextmanager
def _main_script_hidden(framework: str) -> Iterator[None]:
    """Start the worker without running the caller's main script in it. A spawned child runs the
    parent's `__main__` file again (as `__mp_main__`) before its target; for `kl-conformance` that
    imports the whole CLI, which delays the worker's start for nothing, since the worker's entry point
    lives in conformance.run.worker. An adapter named from the main script itself ("__main__:Class") keeps it."""
    if framework.startswith("__main__:") or "__main__" not in sys.modules:
        yield
        return
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__: multiprocessing has nothing to re-run
    try:
        yield
    finally:
        sys.modules["__main__"] = main


_launcher: ThreadPoolExecutor | None = None
_launcher_lock = threading.Lock()


def start_worker(process, framework: str) -> None:
    """Start a worker process from the main thread, or from one thread that lasts as long as this process: Linux
    sends PR_SET_PDEATHSIG when the thread that started the worker ends, and a pool of several restarts a
    worker from the thread that serves it, which ends with the run."""
    def start() -> None:
        with _main_script_hidden(framework):
            process.start()
    if threading.current_thread() is threading.main_thread():
        start()
        return
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = ThreadPoolExecutor(1, thread_name_prefix="kl-worker-launcher")
    _launcher.submit(start).result()
