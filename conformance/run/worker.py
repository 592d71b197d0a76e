"""Runs a framework's adapter in a worker process, so a crash or a hang costs one case, not the run.

The worker imports the framework once, then takes batches of cases over a pipe and
answers one message per case with its observations. The parent side, `WorkerPool`,
keeps a window of cases in flight (so the parent computes references while the
worker calls the framework), detects a dead worker (crash: signal or exit code and
the last lines it printed) or a case past its time limit (timeout), replaces the
worker and resends what was in flight. With `jobs` above one, the pool runs that many workers, each loading
the framework once, hands each the next task as it frees up, and gives the outcomes back in the tasks' order,
so the rows written are those of one worker. A crash or a timeout while the worker is inside
the framework's call is the framework's (cause framework.crash, framework.timeout);
anywhere else it is the harness's (harness.isolation).

Owns the worker processes and the messages between them and the parent; never judges, and never imports
a framework in the parent.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import operator
import os
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
import types
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, Deque, Iterator, NamedTuple, Sequence

import numpy as np

from conformance.adapters.base import in_mode
from conformance.core.case import Case
from conformance.core.model import EAGER, Observation, Verdict
from conformance.core.scratch import make_scratch
from conformance.run.lastwords import last_words

READY, UNAVAILABLE, CASE, CLOSED = "ready", "unavailable", "case", "closed"
# What a task source gives a worker of a pool of several that still has tasks in flight, when the outcomes not
# yet given back in order are as many as the pool keeps: no task for now, and not the end of the tasks
LATER = object()
# How long closing waits for the worker to close its adapter; R torch, which ends its R session there,
# needs far less than this.
CLOSE_TIMEOUT_S = 5.0
# The causes of a call the worker gave no answer to: the framework crashed or hung inside its own call, or the
# harness failed around it (a worker that died between calls, a pipe that broke)
FRAMEWORK_CRASH, FRAMEWORK_TIMEOUT, HARNESS_ISOLATION = "framework.crash", "framework.timeout", "harness.isolation"


class Failure(NamedTuple):
    """Why a call got no answer: its verdict (crash or timeout), the message, and whose failure it was."""

    verdict: Verdict
    message: str
    cause: str


@dataclass(frozen=True)
class Task:
    """One case and the (api, device, mode, part) calls to make of it, numbered in run order."""

    index: int
    case: Case
    calls: tuple[tuple[str, str, str, str], ...]


@dataclass
class Outcome:
    """What came back for one task: an observation per call, or the task's crash/timeout, or (after a crash,
    when the calls were made again one at a time) the crash of each call that crashed on its own."""

    task: Task
    observations: dict[tuple[str, str, str, str], Observation] = field(default_factory=dict)
    failure: Verdict | None = None
    failure_message: str = ""
    failed_calls: dict[tuple[str, str, str, str], Failure] = field(default_factory=dict)
    lost: Exception | None = None  # the worker could not be restarted after this task: nothing more runs
    failure_cause: str = HARNESS_ISOLATION  # whose the task's failure was (the module's docstring)

    def failed(self, call: tuple[str, str, str, str]) -> Failure | None:
        """Why `call` got no answer, or None."""
        if call in self.failed_calls:
            return self.failed_calls[call]
        return Failure(self.failure, self.failure_message, self.failure_cause) if self.failure is not None else None


@dataclass(frozen=True)
class WorkerInfo:
    version: str
    devices: tuple[str, ...]
    device_names: dict[str, str]
    unusable_modes: dict[str, str] = field(default_factory=dict)  # mode -> why it cannot run here
    offer: Any = None  # what the installed release offers (adapters.base.Offer): APIs, arguments, notes


def worker_main(conn, framework: str, output_path: str, compile_cache_dir: str | None = None,
                scratch_dir: str | None = None, lifeline=None, parent_pid: int | None = None, in_call=None) -> None:
    """Entry point of the worker process: load the adapter, then serve batches until told to stop. `in_call`, a
    one-byte file, holds 1 while the worker is inside the framework's call: what the parent reads when the
    worker dies or hangs, to tell the framework's failure from the harness's."""
    # Ctrl-C and SIGTERM (a CI job cancelled: sent to the whole process group) are the parent's to handle
    # (it stops the run and kills this process); a worker dying of one first would be recorded as a crash
    # of the case it was on
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent(lifeline, parent_pid)
    marker = _CallMarker(in_call)
    fd = os.open(output_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)  # the framework's own printing goes to a file the parent reads after a crash
    os.dup2(fd, 2)
    from conformance.adapters.base import FrameworkUnavailable, Offer
    from conformance.adapters.registry import get_adapter

    adapter = get_adapter(framework)
    adapter.compile_cache_dir = Path(compile_cache_dir) if compile_cache_dir else None
    adapter.scratch_dir = Path(scratch_dir) if scratch_dir else None
    try:
        adapter.load()
    except FrameworkUnavailable as exc:
        conn.send((UNAVAILABLE, str(exc)))
        return
    devices = adapter.devices()
    # plain str: torch.__version__ is a TorchVersion, and unpickling it would import torch in the parent
    unusable = {str(m.name): str(why) for m in adapter.modes if (why := adapter.mode_unavailable(m.name))}
    try:
        offer = adapter.learn_release()
    except Exception as exc:  # an adapter bug: the run goes on as if the release offered everything
        offer = adapter.offer = Offer(notes=(f"what the release offers could not be learnt: {type(exc).__name__}: "
                                             f"{exc}".splitlines()[0][:300],))
    conn.send((READY, WorkerInfo(str(adapter.version()), tuple(map(str, devices)),
                                 {str(d): str(adapter.device_name(d)) for d in devices}, unusable, offer)))
    while True:
        batch = conn.recv()
        if batch is None:  # what the adapter started outside this process ends before this one is killed
            adapter.close()
            conn.send((CLOSED, None))
            return
        for task in batch:
            observations = {call: observe_call(adapter, task.case, *call, in_call=marker) for call in task.calls}
            conn.send((CASE, task.index, observations))


def _die_with_parent(lifeline, parent_pid: int | None) -> None:
    """End this worker, and the helper processes its adapter started (R), when the parent dies, even of
    SIGKILL, while a case hangs here: on Linux the kernel sends SIGKILL (PR_SET_PDEATHSIG); everywhere, a
    thread waits on a pipe only the parent writes to, whose end of file says the parent is gone."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)
    if lifeline is not None:
        threading.Thread(target=_watch_parent, args=(lifeline,), name="kl-parent-watch", daemon=True).start()


def _watch_parent(lifeline) -> None:
    try:
        while True:
            lifeline.recv()  # the parent never sends: this returns only at end of file
    except (EOFError, OSError):
        pass
    from conformance.adapters.rsession import kill_all

    kill_all()
    os._exit(1)


class _CallMarker:
    """In the worker: the one-byte file at `path` says 1 for exactly the time inside the framework's call (a
    write of the page cache, which outlives a process killed in the call). Where the file cannot be written
    (a full disk), nothing is marked, and a death is the harness's."""

    def __init__(self, path: str | None) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY) if path else None
        except OSError:
            self._fd = None

    def _mark(self, byte: bytes) -> None:
        if self._fd is not None:
            try:
                os.pwrite(self._fd, byte, 0)
            except OSError:
                self._fd = None

    def __enter__(self) -> None:
        self._mark(b"1")

    def __exit__(self, *exc) -> None:
        self._mark(b"0")


def observe_call(adapter, case: Case, api_name: str, device: str, mode: str, part: str,
                 in_call=None) -> Observation:
    """One adapter call in `mode`; an adapter bug (an exception, not an Observation, or one the judge cannot
    read) is reported as data: an AdapterError the case's row records as an `error` verdict. `in_call`, the
    worker's _CallMarker, is entered for exactly the adapter's call."""
    try:
        api = adapter.api(api_name)
        with in_call if in_call is not None else contextlib.nullcontext():
            observed = in_mode(adapter.run, mode, case, api, device, part)
    except Exception:
        return _adapter_error("adapter raised: " + traceback.format_exc(limit=3)[-800:])
    if not isinstance(observed, Observation):
        return _adapter_error(f"adapter returned {type(observed).__name__}, not an Observation")
    try:
        return _judgeable(observed)
    except _Unjudgeable as exc:
        return _adapter_error(f"adapter returned an Observation the harness cannot judge: {exc}")


class _Unjudgeable(Exception):
    """What makes an adapter's Observation unreadable to the judge (its message says what)."""


_TEXTS = ("dtype", "exception_type", "exception_message", "unsupported", "fallback")


def _judgeable(observed: Observation) -> Observation:
    """`observed` with its value as a NumPy array of real numbers whose shape is the one it states, the form
    every step after the worker reads (the judge, the details, the pickle back to the parent, which must not
    import the framework a tensor belongs to). Raises _Unjudgeable naming what is wrong: a value NumPy cannot
    convert, of objects or complex numbers, a stated shape that is not the value's, a field of another type."""
    for name in _TEXTS:
        if getattr(observed, name) is not None and type(getattr(observed, name)) is not str:
            raise _Unjudgeable(f"its {name} is a {type(getattr(observed, name)).__name__}, not a string")
    if not isinstance(observed.warnings, (tuple, list)) or not all(type(w) is str for w in observed.warnings):
        raise _Unjudgeable("its warnings are not a list of strings")
    if isinstance(observed.elapsed_s, bool) or not isinstance(observed.elapsed_s, (int, float)) \
            or not 0 <= observed.elapsed_s < float("inf"):
        raise _Unjudgeable(f"its elapsed_s {observed.elapsed_s!r} is not a finite number of seconds")
    # a plain Observation: an adapter's subclass of it may hold what cannot be sent to the parent
    plain = {**{f.name: getattr(observed, f.name) for f in fields(Observation)}, "warnings": tuple(observed.warnings)}
    if observed.value is None:
        if observed.raised or observed.unsupported is not None or observed.fallback is not None:
            return Observation(**plain)
        raise _Unjudgeable("neither a value, an exception nor a reason it is unsupported")
    try:
        value = np.asarray(observed.value)
    except Exception as exc:  # the adapter's value, converted here: whatever it raises is its bug
        raise _Unjudgeable(f"its value cannot be converted to a NumPy array ({type(exc).__name__}: "
                           f"{str(exc)[:200]})") from None
    if value.dtype.kind not in "biuf":
        kind = {"c": "complex numbers", "O": "Python objects"}.get(value.dtype.kind, "something other than numbers")
        raise _Unjudgeable(f"its value holds {kind} (NumPy dtype {value.dtype}); the adapter's to_numpy must give "
                           "an array of real numbers")
    try:
        shape = tuple(operator.index(n) for n in observed.shape)
    except TypeError:
        raise _Unjudgeable(f"its shape {observed.shape!r} is not a tuple of sizes") from None
    if shape != value.shape:
        raise _Unjudgeable(f"it states the shape {shape} for a value of shape {value.shape}")
    return Observation(**{**plain, "value": value, "shape": shape})


def _adapter_error(message: str) -> Observation:
    return Observation(exception_type="AdapterError", exception_message=message)


@contextlib.contextmanager
def _main_script_hidden(framework: str) -> Iterator[None]:
    """Start the worker without running the caller's main script in it. A spawned child runs the
    parent's `__main__` file again (as `__mp_main__`) before its target; for `kl-conformance` that
    imports the whole CLI, which delays the worker's start for nothing, since the worker's entry point
    lives here. An adapter named from the main script itself ("__main__:Class") keeps it."""
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


def _start(process, framework: str) -> None:
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


def case_limit(timeout_s: float, task: Task) -> float:
    """The time limit of one case: `timeout_s` for its eager calls and as much again for each compiled or graph
    mode among its calls, which may each compile (a new signature compiles once per mode and API)."""
    return timeout_s * (1 + len({call[2] for call in task.calls} - {EAGER}))


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


class WorkerUnavailable(Exception):
    """The framework cannot be loaded in the worker; carries the reason."""


class WorkerLost(WorkerUnavailable):
    """A worker that died or hung could not be replaced: the run cannot go on."""


class _Stopped(Exception):
    """Raised in a worker's thread of a pool of several once the pool stops (the run ended early, or it closes)."""


class _Outbox:
    """Sends the parent's messages to one worker from a thread of their own, in order.

    A send blocks while the worker's socket buffer is full, and the worker reads its next batch
    only after it has sent every answer of the one before, which blocks in turn while the parent
    is not reading. Sent from the thread that reads the answers, a batch of large cases deadlocked
    both processes; sent from here, the parent goes on reading (and timing out a worker that hangs
    without reading). Messages are pickled by the caller: this thread only writes bytes. A write
    that fails (the worker died) drops the rest: the pool resends what was in flight to the
    worker that replaces it, through that worker's own outbox."""

    def __init__(self, conn) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._send_all, args=(conn,), name="kl-worker-outbox", daemon=True)
        self._thread.start()

    def put(self, message) -> None:
        self._queue.put(ForkingPickler.dumps(message))  # what Connection.send writes

    def stop(self) -> None:
        """End the thread once the worker is gone: a write under way fails, and so does the next. Waits for
        it, so that no write of this outbox can reach a later connection given the same file descriptor."""
        self._queue.put(None)
        self._thread.join(5)

    def _send_all(self, conn) -> None:
        while (data := self._queue.get()) is not None:
            try:
                conn.send_bytes(data)
            except (OSError, ValueError):  # broken pipe, or the connection closed by the pool
                return


def _fresh_marker(path: str) -> str | None:
    """`path` holding 0 (worker_main's `in_call`), or None where it cannot be written."""
    try:
        with open(path, "wb") as f:
            f.write(b"0")
    except OSError:
        return None
    return path


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
        self._outbox: _Outbox | None = None
        # the workers' Adapter.scratch_dir, with the worker's log: removed on close, or when the pool is collected
        # or Python exits; one left by a killed harness is removed by the next pool made (core.scratch)
        self._scratch = str(make_scratch("kl-scratch-"))
        self._scratch_removal = weakref.finalize(self, shutil.rmtree, self._scratch, True)
        self._log_path = os.path.join(self._scratch, "worker.log")
        open(self._log_path, "w").close()
        self.info: WorkerInfo | None = None
        self._restarts = 0
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
        self._in_call = _fresh_marker(os.path.join(self._scratch, "in_call"))  # a dead worker's may be left at 1
        self._process = self._ctx.Process(target=worker_main, args=(child, self.framework, self._log_path,
                                                str(self.compile_cache_dir) if self.compile_cache_dir else None,
                                                self._scratch, watched, os.getpid(), self._in_call), daemon=True)
        _start(self._process, self.framework)
        child.close()
        watched.close()
        self._conn = parent
        self._outbox = _Outbox(parent)
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
                raise _Stopped()
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
        spread = _Spread(tasks, ahead=2 * self.window * len(workers))
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

    def _renew(self) -> None:
        """A fresh worker in place of one a run left with tasks in flight, or left starting."""
        self._kill()
        open(self._log_path, "w").close()
        try:
            self._launch_own()
            self.wait_ready()
        except WorkerUnavailable as exc:
            raise WorkerLost(f"the {self.framework} worker could not be started again: {exc}") from None
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
                if message.failure is Verdict.CRASH and len(head.calls) > 1:
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
            assert index == head.index, f"worker answered case {index}, expected {head.index}"
            pending.popleft()
            yield Outcome(head, observations)

    def _one_call_at_a_time(self, crashed: Outcome) -> Outcome:
        """The calls of a task that crashed the worker, made again one by one on a fresh worker, so that a call
        that works (a forward, when only a backward crashes) is judged on its own and only the calls that
        crash are reported as crashes. Where the worker cannot be restarted, the calls not made keep the
        task's crash, and `lost` says why no more can run."""
        task = crashed.task
        outcome = Outcome(task)
        dead = True  # the worker died on the whole task
        for i, call in enumerate(task.calls):
            if dead:
                try:
                    self._restart()
                except WorkerLost as exc:
                    outcome.lost = exc
                    outcome.failed_calls.update({c: Failure(crashed.failure, crashed.failure_message,
                                                            crashed.failure_cause) for c in task.calls[i:]})
                    return outcome
            self._outbox.put([Task(task.index, task.case, (call,))])
            message = self._wait(task)
            dead = isinstance(message, Outcome)
            if dead:
                outcome.failed_calls[call] = Failure(message.failure, message.failure_message, message.failure_cause)
            else:
                outcome.observations.update(message[2])
        if dead:
            try:
                self._restart()
            except WorkerLost as exc:
                outcome.lost = exc
        return outcome

    def _wait(self, head: Task):
        start = time.monotonic()
        limit = case_limit(self.timeout_s, head)
        while True:
            if self._stopping:
                raise _Stopped()
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
        self._kill()
        self._restarts += 1
        open(self._log_path, "w").close()
        self._stale = True  # until the new worker is ready (a pool of several may stop it while it starts)
        try:
            self._launch_own()
            self.wait_ready()
        except WorkerUnavailable as exc:
            raise WorkerLost(f"the {self.framework} worker could not be restarted after a crash or timeout: "
                             f"{exc}") from None
        self._stale = False

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



class _Spread:
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

    def serve(self, worker: WorkerPool) -> None:
        """A worker's thread: its outcomes, numbered by their tasks' places, until the source is exhausted."""
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
        except _Stopped:
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
