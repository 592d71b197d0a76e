"""The worker process: loads a framework's adapter once, then makes the calls of each task it is sent and answers
one message per case with its observations, so that a crash or a hang costs one case, not the run.

The framework's own printing goes to a log the parent reads after a crash, and a one-byte file marks the time
the worker spends inside the framework's call (what tells the framework's crash or hang from the harness's). An
adapter bug (an exception, or an Observation the judge cannot read) comes back as data: an AdapterError.

Owns the worker's side of the pipe and the messages it sends; never judges, and imports a framework only through
the adapter it loads, in the worker process.
"""

from __future__ import annotations

import contextlib
import operator
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from conformance.adapters.base import in_mode
from conformance.core.case import Case
from conformance.core.model import Observation

READY, UNAVAILABLE, CASE, CLOSED = "ready", "unavailable", "case", "closed"


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


def fresh_marker(path: str) -> str | None:
    """`path` holding 0 (worker_main's `in_call`), or None where it cannot be written."""
    try:
        with open(path, "wb") as f:
            f.write(b"0")
    except OSError:
        return None
    return path


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
