"""The `kl-conformance` command's entry point (and `python -m conformance`'s).

Every run first waits for its worker to import the framework. So for `run`, the worker is started
here, before the harness's own modules are imported (which takes a while): what it is started
with is read off the command line by a small parser that knows three options. That is a guess,
never trusted: `run` compares it with its fully parsed, checked arguments, and starts a worker of
its own when they differ. Any other command, and a command line this parser cannot read, start
nothing here.

Imports nothing of the harness before the worker is started, so that the framework's import overlaps the
harness's own.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    early = early_worker(argv)
    try:
        from conformance.cli import main as cli_main

        return cli_main(argv, early_worker=early)
    finally:
        # the command has decided its exit code: a Ctrl-C from here on (closing, the interpreter's exit)
        # would only turn a finished run's code into a bare death by SIGINT, or be lost
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if early is not None:
            early.close()  # `run` closed it if it used it; otherwise it is closed here (closing twice is harmless)


class _Guess(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print a usage block and exit
        raise ValueError(message)


def early_worker(argv: Sequence[str]):
    """A launched WorkerPool for the framework `run` names, with the cache directory it would use; None for
    any other command, for --help, or a command line this parser cannot read."""
    if not argv or argv[0] != "run" or any(a in ("-h", "--help") for a in argv):
        return None
    guess = _Guess(add_help=False)
    guess.add_argument("--framework")
    guess.add_argument("--cache-dir")
    guess.add_argument("--no-cache", action="store_true")
    try:
        known, _ = guess.parse_known_args(argv[1:])
    except ValueError:  # the real parser will say what is wrong, in its own one line
        return None
    if not known.framework:
        return None
    from conformance.judge.refcache import default_cache_dir
    from conformance.run.pool import WorkerPool

    cache_dir = None if known.no_cache else Path(known.cache_dir) if known.cache_dir else default_cache_dir()
    pool = WorkerPool(known.framework, compile_cache_dir=cache_dir)
    pool.launch()
    return pool


if __name__ == "__main__":
    sys.exit(main())
