"""Several workers at once (--jobs): how many a run starts by default, and how their threads share one task
source and give the outcomes back in its order.

Hands out and orders the tasks of a pool's workers; never starts, talks to or replaces a worker (WorkerPool does).
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Any, Deque, Iterator, Sequence

from conformance.core.model import EAGER
from conformance.run.task import Outcome, Task, WorkerLost, WorkerUnavailable

# What a task source gives a worker of a pool of several that still has tasks in flight, when the outcomes not
# yet given back in order are as many as the pool keeps: no task for now, and not the end of the tasks
LATER = object()


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system has one): --jobs's default."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_jobs(modes: Sequence[str], cases: int) -> int:
    """--jobs's default: a worker per core where the run compiles (a compiled or graph mode: the workers'
    compiling is the run's cost), one where every call is eager (the parent's judging is, and another worker's
    import of the framework costs more than it saves: bench/bench.py's whole run prints both); never more
    workers than cases."""
    compiles = any(mode != EAGER for mode in modes)
    return max(1, min(available_cores() if compiles else 1, cases))


class Stopped(Exception):
    """Raised in a worker's thread of a pool of several once the pool stops (the run ended early, or it closes)."""


class Spread:
    """One task source shared by the threads of a pool of several workers, and the outcomes given back in the
    source's order. A worker that has tasks in flight takes no more while the outcomes waiting for an earlier
    one to be given back are `ahead` (memory stays bounded when one case hangs). What ends a worker's thread (it
    could not be restarted, or a harness bug) and what the source raises are raised in the order too: after every
    outcome before them."""

    def __init__(self, tasks: Iterator[Task], ahead: int) -> None:
        self._source = iter(tasks)
        self._source_lock = threading.Lock()
        self._cond = threading.Condition()
        self._ahead = ahead
        self._taken = 0  # tasks taken from the source, each numbered by its place there
        self._given = 0  # outcomes given back
        self._done: dict[int, Outcome] = {}
        self._ends: list[tuple[int, BaseException]] = []  # (the place it is raised at, the exception)
        self._exhausted = False
        self._stopped = False

    def serve(self, worker) -> None:
        """A worker's thread (`worker`, a WorkerPool of one): its outcomes, numbered by their tasks' places, until
        the source is exhausted."""
        mine: Deque[int] = collections.deque()  # the places of the tasks this worker has in flight
        last = None
        try:
            if worker.info is None:  # loaded beside the first: every worker is ready, and closes, as one does
                try:
                    worker.wait_ready()
                except WorkerUnavailable:  # the others run the cases
                    worker.left_out = True
                    return
            for outcome in worker._run_alone(self._feed(mine)):
                last = mine.popleft()
                with self._cond:
                    self._done[last] = outcome
                    self._cond.notify_all()
        except Stopped:
            pass
        except BaseException as exc:  # raised where one worker would have: after its last outcome
            at = last + 1 if last is not None else mine[0] if mine else self._taken
            with self._cond:
                self._ends.append((at, exc))
                self._cond.notify_all()

    def _feed(self, mine: Deque[int]) -> Iterator[Any]:
        """The tasks one worker takes, as it has room for them (WorkerPool._serve's source)."""
        while True:
            with self._cond:
                while self._full() and not mine:  # an idle worker waits for room
                    self._cond.wait(1.0)
                later = self._full()
            if later:
                yield LATER
                continue
            with self._source_lock:
                if self._stopped or self._exhausted:
                    return
                try:
                    task = next(self._source, None)
                except BaseException as exc:
                    task = None
                    with self._cond:
                        self._ends.append((self._taken, exc))
                if task is None:
                    with self._cond:
                        self._exhausted = True
                        self._cond.notify_all()
                    return
                mine.append(self._taken)
                self._taken += 1
            yield task

    def _full(self) -> bool:
        """Whether the outcomes not yet given back are as many as are kept (with tasks still to take)."""
        return not (self._stopped or self._exhausted) and self._taken - self._given >= self._ahead

    def outcomes(self, threads: list[threading.Thread]) -> Iterator[Outcome]:
        while True:
            with self._cond:
                while True:
                    ends = [(at, exc) for at, exc in self._ends if at <= self._given]
                    if ends:
                        raise min(ends, key=lambda end: end[0])[1]
                    if self._given in self._done:
                        outcome = self._done.pop(self._given)
                        break
                    if self._exhausted and self._given >= self._taken:
                        return
                    if not any(thread.is_alive() for thread in threads):
                        raise WorkerLost("no worker is left to run the cases")
                    self._cond.wait(1.0)
                self._given += 1
                self._cond.notify_all()
            yield outcome

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
