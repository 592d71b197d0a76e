"""The frameworks' worker processes of a pytest session, launched before anything else the plugin does.

Imports nothing of the harness at module level, as the plugin does."""

from __future__ import annotations


def new_pool(name: str):
    """A worker pool of the framework `name`, compiling under the reference cache's directory, as `run`'s do; not
    launched, and with the pool's time limit until the suite sets --kl-timeout-s's."""
    from conformance.judge.refcache import default_cache_dir
    from conformance.run.pool import WorkerPool

    return WorkerPool(name, compile_cache_dir=default_cache_dir())


def early_workers(names: list[str]) -> dict:
    """A launched worker per framework named, before the harness's own modules are imported, as the CLI's entry
    point launches its worker: the framework's import is the longest wait of a session's set-up. The suite checks
    the names, and closes these workers, if they turn out to be wrong."""
    pools = {}
    for name in dict.fromkeys(names):
        pools[name] = new_pool(name)
        pools[name].launch()
    return pools
