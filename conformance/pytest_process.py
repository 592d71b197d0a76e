"""What the pytest plugin does to the pytest process it runs in, beyond its items: the frameworks' workers
launched first, and an exit that does not walk the session's objects again.

Imports nothing of the harness at module level, as the plugin does."""

from __future__ import annotations

_exit_registered = False


def early_workers(names: list[str]) -> dict:
    """A launched worker per framework named, before the harness's own modules are imported, as the CLI's entry
    point launches its worker: the framework's import is the longest wait of a session's set-up. The suite checks
    the names, and closes these workers, if they turn out to be wrong."""
    from conformance.judge.refcache import default_cache_dir
    from conformance.run.pool import WorkerPool

    pools = {}
    for name in dict.fromkeys(names):
        pools[name] = WorkerPool(name, compile_cache_dir=default_cache_dir())
        pools[name].launch()
    return pools


def quick_exit() -> None:
    """At the interpreter's exit, leave what is still alive to the operating system: the collections Python makes
    while it tears its modules down would walk every item, report and row the session holds, several times.
    pytest has just collected the session's garbage (its unraisable-exception check, as it unconfigures), and
    the young generations hold what came after, collected here first; Python makes no promise for objects still
    alive at exit. Registered once a process, whatever number of sessions it runs (pytester)."""
    import atexit
    import gc

    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(lambda: (gc.collect(1), gc.freeze()))
