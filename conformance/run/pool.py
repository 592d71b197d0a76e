"""The parent's side of the worker processes: WorkerPool starts a framework's workers, sends them tasks and gives
back one Outcome per task, in order, whatever happens to the workers.

It keeps a window of cases in flight (so the parent computes references while the worker calls the framework),
detects a dead worker (crash: signal or exit code and the last lines it printed) or a case past its time limit
(timeout), replaces the worker and resends what was in flight. With `jobs` above one, each worker loads the
framework once, and the rows written are those of one worker (conformance.run.jobs).

Owns the worker processes; never judges, and never imports a framework in the parent.
"""
from __future__ import annotations

import collections
import multiprocessing
import os
import shutil
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Deque, Iterator

from conformance.core.model import Verdict
from conformance.core.scratch import make_scratch
from conformance.run.jobs import LATER, Spread, Stopped
from conformance.run.lastwords import last_words
from conformance.run.launcher import start_worker
from conformance.run.outbox import Outbox
from conformance.run.task import (FRAMEWORK_CRASH, FRAMEWORK_TIMEOUT, HARNESS_ISOLATION, Failure, Outcome, Task,
                                  WorkerLost, WorkerUnavailable, case_limit)
from conformance.run.worker import CLOSED, UNAVAILABLE, WorkerInfo, fresh_marker, worker_main

# How long closing waits for the worker to close its adapter; R torch, which ends its R session there,
# needs far less than this.
CLOSE_TIMEOUT_S = 5.0


class WorkerPool:
    """Worker processes for one framework (one, or `jobs`), with crash and timeout recovery.

    Parameters
    ----------
    framework : adapter name (or "module:Class").
    timeout_s : limit for one case, from the moment the worker is free to start it.
    window : cases in flight at most per worker (sent, not yet answered); refilled once half of them are answered.
    compile_cache_dir : where the framework may keep compiled kernels between runs (Adapter.compile_cache_dir).
    jobs : the worker processes; the first is this object's own, the others are pools of one it runs beside it.
    """

    def __init__(self, framework: str, timeout_s: float = 60.0, window: int = 16, start_timeout_s: float = 600.0,
                 compile_cache_dir: Path | None = None, jobs: int = 1):
        self.framework = framework
        self.compile_cache_dir = compile_cache_dir
        self.timeout_s = timeout_s
        self.window = window
        self.start_timeout_s = start_timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._in_call = None  # the running worker's worker_main `in_call`
        self._conn = None
        self._lifeline = None  # the write end of the pipe the worker watches
        self._outbox: Outbox | None = None
        # the workers' Adapter.scratch_dir, with the worker's log: removed on close, or when the pool is collected
        # or Python exits; one left by a killed harness is removed by the next pool made (core.scratch)
        self._scratch = str(make_scratch("kl-scratch-"))
        self._scratch_removal = weakref.finalize(self, shutil.rmtree, self._scratch, True)
        self._log_path = os.path.join(self._scratch, "worker.log")
        open(self._log_path, "w").close()
        self.info: WorkerInfo | None = None
        self._restarts = 0
        self._used = False  # the worker answered a call since it started
        self._idle = False  # every task sent has been answered: a close is the worker's next message
        self._stale = False  # a run ended with tasks in flight: their answers would meet the next run's tasks
        self._stopping = False  # a pool of several is stopping: this worker's thread ends at its next wait
        self.jobs = max(1, jobs)
        self._others: list[WorkerPool] = []  # the workers beyond this one's own (jobs - 1), once launched
        self._threads: list[threading.Thread] = []  # a pool of several's threads while it runs
        self.left_out = False  # a worker beside the first that could not load: the others run the cases

    @property
    def restarts(self) -> int:
        """How often a worker was replaced after a crash or a timeout, every worker of the pool counted."""
        return self._restarts + sum(other.restarts for other in self._others)

    def start(self) -> WorkerInfo:
        """Start the worker and wait until it has loaded the framework."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the workers without waiting: they import the framework, which is slow, while the caller works."""
        self._launch_own()
        self._launch_others()

    def widen(self, jobs: int) -> None:
        """Run `jobs` workers from now on (an early-launched pool learns the run's --jobs once it is read); the
        ones added are launched at once if this pool is."""
        self.jobs = max(1, jobs)
        while len(self._others) > self.jobs - 1:
            self._others.pop().close()
        if self.launched:
            self._launch_others()

    def _launch_others(self) -> None:
        while len(self._others) < self.jobs - 1:
            other = WorkerPool(self.framework, self.timeout_s, self.window, self.start_timeout_s,
                               self.compile_cache_dir)
            other.launch()
            self._others.append(other)

    def _launch_own(self) -> None:
        parent, child = self._ctx.Pipe()
        watched, self._lifeline = self._ctx.Pipe(duplex=False)  # closed when this process dies: the worker ends
        self._in_call = fresh_marker(os.path.join(self._scratch, "in_call"))  # a dead worker's may be left at 1
        self._process = self._ctx.Process(target=worker_main, args=(child, self.framework, self._log_path,
                                                str(self.compile_cache_dir) if self.compile_cache_dir else None,
                                                self._scratch, watched, os.getpid(), self._in_call), daemon=True)
        start_worker(self._process, self.framework)
        child.close()
        watched.close()
        self._conn = parent
        self._outbox = Outbox(parent)
        self._launched = time.monotonic()

    @property
    def launched(self) -> bool:
        return self._process is not None

    def ready(self) -> bool:
        """Whether the launched worker has answered (loaded, or failed to): wait_ready() will not block."""
        try:
            return self._conn.poll(0)
        except (EOFError, OSError):
            return True

    def wait_ready(self) -> WorkerInfo:
        """The launched worker's versions and devices, once it has loaded the framework."""
        parent = self._conn
        deadline = self._launched + self.start_timeout_s
        while not parent.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
            if self._stopping:
                raise Stopped()
            if time.monotonic() >= deadline:
                self._kill()
                raise WorkerUnavailable(f"the {self.framework} worker did not start within "
                                        f"{self.start_timeout_s:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            raise WorkerUnavailable(f"the {self.framework} worker died while loading: "
                                    f"{last_words(Path(self._log_path))}") from None
        if kind == UNAVAILABLE:
            raise WorkerUnavailable(payload)
        self.info = payload
        self._idle = True
        return payload

    def run(self, tasks: Iterator[Task]) -> Iterator[Outcome]:
        """Yield one Outcome per task, in order, whatever happens to the workers."""
        if self._others:
            yield from self._run_spread(tasks)
        else:
            yield from self._run_alone(tasks)

    def _run_spread(self, tasks: Iterator[Task]) -> Iterator[Outcome]:
        """Every worker of the pool takes the next task whenever it has room, in a thread of its own; the
        outcomes are given back in the tasks' order. A worker beside the first that cannot load is left out."""
        workers = [self, *(other for other in self._others if not other.left_out)]
        for other in self._others:
            other.timeout_s = self.timeout_s
        spread = Spread(tasks, ahead=2 * self.window * len(workers))
        self._threads = [threading.Thread(target=spread.serve, args=(worker,), name=f"kl-worker-{i}", daemon=True)
                         for i, worker in enumerate(workers)]
        for thread in self._threads:
            thread.start()
        finished = False
        try:
            yield from spread.outcomes(self._threads)
            finished = True
        finally:
            spread.stop()
            self._stop_threads(interrupt=not finished)

    def _stop_threads(self, interrupt: bool = True) -> None:
        """End a pool of several's threads, so no thread uses a worker after this: once the tasks are all
        answered, each ends when its worker is ready again (a restart after a crash on the last task, as one
        worker restarts before its run ends); else each is interrupted at its next wait."""
        workers = [self, *self._others]
        for worker in workers:
            worker._stopping = interrupt
        for thread in self._threads:
            thread.join(CLOSE_TIMEOUT_S + 5 if interrupt else None)
        self._threads = []
        for worker in workers:
            worker._stopping = False

    def _run_alone(self, tasks: Iterator[Task]) -> Iterator[Outcome]:
        """This pool's own worker runs every task."""
        if self._stale:
            self._renew()
        pending: Deque[Task] = collections.deque()
        unsent: Deque[Task] = collections.deque()
        try:
            yield from self._serve(tasks, pending, unsent)
        finally:
            self._stale = self._stale or bool(pending or unsent)

    def _renew(self, why: str = "could not be started again") -> None:
        """A fresh worker in place of one a run left with tasks in flight, or left starting, or (_restart) one
        that crashed or timed out; `why` says what failed if none starts."""
        self._kill()
        self._used = False
        open(self._log_path, "w").close()
        self._stale = True  # until the new worker is ready (a pool of several may stop it while it starts)
        try:
            self._launch_own()
            self.wait_ready()
        except WorkerUnavailable as exc:
            raise WorkerLost(f"the {self.framework} worker {why}: {exc}") from None
        self._stale = False

    def _serve(self, tasks: Iterator[Task], pending: Deque[Task], unsent: Deque[Task]) -> Iterator[Outcome]:
        source = iter(tasks)
        exhausted = False
        while True:
            # refilled once half the window is answered: one message for several tasks, while the worker
            # still has the other half to work on
            while not exhausted and len(pending) <= self.window // 2 and len(pending) + len(unsent) < self.window:
                task = next(source, None)
                if task is None:
                    exhausted = True
                elif task is LATER:
                    break
                else:
                    unsent.append(task)
            if unsent:
                batch = list(unsent)
                unsent.clear()
                self._idle = False
                # if the worker dies on a case already in flight, _wait finds it, and the batch is resent
                self._outbox.put(batch)
                pending.extend(batch)
            if not pending:
                if not exhausted:
                    continue
                self._idle = True
                return
            head = pending[0]
            message = self._wait(head)
            if isinstance(message, Outcome):  # the worker crashed or timed out on `head`
                pending.popleft()
                if message.failure is Verdict.CRASH and (len(head.calls) > 1 or self._used):
                    message = self._one_call_at_a_time(message)
                    yield message
                    if message.lost is not None:
                        raise message.lost
                else:
                    yield message
                    self._restart()
                unsent.extend(pending)
                pending.clear()
                continue
            _, index, observations = message
            self._used = True  # a crash on it now may be an earlier call's doing (_one_call_at_a_time)
            assert index == head.index, f"worker answered case {index}, expected {head.index}"
            pending.popleft()
            yield Outcome(head, observations)

    def _one_call_at_a_time(self, crashed: Outcome) -> Outcome:
        """The calls of a task that crashed a worker, made again one by one on a fresh one: a call that works (a
        forward, where a backward crashes) is judged on its own, and one that crashed a worker other calls used
        first is a crash only if it crashes a fresh one too (OneFlow's graph mode aborts on any call after a graph
        that failed to compile). Where no worker restarts, the calls not made keep the task's crash (`lost`)."""
        task = crashed.task
        outcome = Outcome(task)
        dead = True  # the worker died on the whole task
        for i, call in enumerate(task.calls):
            for _ in range(2):  # a crash on a used worker, once more on a fresh one
                if dead:
                    try:
                        self._restart()
                    except WorkerLost as exc:
                        outcome.lost = exc
                        outcome.failed_calls.update({c: Failure(crashed.failure, crashed.failure_message,
                                                                crashed.failure_cause) for c in task.calls[i:]})
                        return outcome.of_the_task()
                fresh = not self._used
                self._outbox.put([Task(task.index, task.case, (call,))])
                message = self._wait(task)
                dead = isinstance(message, Outcome)
                if not dead:
                    self._used = True
                    outcome.observations.update(message[2])
                    break
                if fresh or message.failure is not Verdict.CRASH:
                    outcome.failed_calls[call] = Failure(message.failure, message.failure_message,
                                                         message.failure_cause)
                    break
        if dead:
            try:
                self._restart()
            except WorkerLost as exc:
                outcome.lost = exc
        return outcome.of_the_task()

    def _wait(self, head: Task):
        start = time.monotonic()
        limit = case_limit(self.timeout_s, head)
        while True:
            if self._stopping:
                raise Stopped()
            remaining = limit - (time.monotonic() - start)
            if remaining <= 0:
                inside = self._inside_call()  # read before the kill
                self._kill()
                whose = f"inside the {self.framework} call" if inside else "outside any framework call"
                return Outcome(head, failure=Verdict.TIMEOUT,
                               failure_message=f"timeout: no answer within {limit:g} s, {whose}; worker replaced",
                               failure_cause=FRAMEWORK_TIMEOUT if inside else HARNESS_ISOLATION)
            try:
                if self._conn.poll(min(remaining, 1.0)):
                    return self._conn.recv()
            except (EOFError, OSError):
                pass
            if not self._process.is_alive():
                self._process.join(1)
                # drain an answer sent just before the worker died
                try:
                    if self._conn.poll(0):
                        return self._conn.recv()
                except (EOFError, OSError):
                    pass
                inside = self._inside_call()
                return Outcome(head, failure=Verdict.CRASH, failure_message=self._crash_message(inside),
                               failure_cause=FRAMEWORK_CRASH if inside else HARNESS_ISOLATION)

    def _inside_call(self) -> bool:
        """Whether the worker is (or died) inside the framework's call (worker_main's `in_call`)."""
        if self._in_call is None:
            return False
        try:
            with open(self._in_call, "rb") as f:
                return f.read(1) == b"1"
        except OSError:
            return False

    def _crash_message(self, inside: bool) -> str:
        code = self._process.exitcode
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}")
        words = last_words(Path(self._log_path))
        if inside:
            return f"crash: {self.framework} killed its worker inside its call ({how}); its last output: {words}"
        return f"crash: worker died outside any framework call ({how}); last output: {words}"

    def _restart(self) -> None:
        self._restarts += 1
        self._renew("could not be restarted after a crash or timeout")

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._outbox is not None:
            self._outbox.stop()
        if self._conn is not None:
            self._conn.close()
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None

    def close(self) -> None:
        """Stop the worker. An idle worker first closes its adapter (R torch's R removes its temporary files)
        and says so; then it is stopped at once: what is left is the framework's own teardown at exit, which
        can take longer than a short run (torch's does) and leaves nothing the harness needs. A worker that
        did not say so is given a moment to exit; one still on a case (Ctrl-C) is not waited for."""
        if self._threads:  # a pool of several closed while it runs (Ctrl-C)
            self._stop_threads()
        while self._others:
            self._others.pop().close()
        if self._process is not None and self._process.is_alive():
            try:
                self._outbox.put(None)  # queued behind every batch already put, so the worker answers those first
                closed = False
                if self._idle:
                    deadline = time.monotonic() + CLOSE_TIMEOUT_S
                    while not closed and self._conn.poll(max(0.0, deadline - time.monotonic())):
                        closed = self._conn.recv()[0] == CLOSED
                if not closed:
                    self._process.join(0.05)
            except (OSError, EOFError):
                pass
        self._kill()
        self._scratch_removal()  # the log and what a killed worker's helpers left (R's TMPDIR); idempotent

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
