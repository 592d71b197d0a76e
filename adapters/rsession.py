"""An R process that speaks a line protocol over its stdin and stdout, for adapters of R frameworks.

R is not importable from Python, and embedding it (rpy2) would need R present when the
harness is installed. Instead the adapter starts `Rscript <worker.R>` and sends one
request line per call; the worker answers one line. Every reply starts with `@kl`, so
anything else R prints on stdout is kept as output for crash messages, never parsed.
Fields are tab-separated; free text is percent-encoded and numbers travel as hex floats
("%a" in R, float.hex in Python), so values cross exactly.

The session isolates R's failures from the caller: if R dies (a segfault in a native
library), the call raises `RSessionCrash` with the signal and R's last lines, and the
next call starts a fresh R; if R does not answer within the deadline, it is killed and
the call raises `RSessionTimeout`. On Linux, R is killed when its parent dies, so an R
worker never outlives the harness's worker process. R keeps its session directory
(Rtmp...) under $TMPDIR and removes it only when it exits normally; each R started here
gets a TMPDIR of its own, which the session removes once that R has ended, killed or not. If the
Python process itself is killed, R dies with it and nothing here runs: `tmp_root` then lets the
harness remove R's TMPDIR with the rest of its worker's scratch directory.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections import deque
from urllib.parse import quote, unquote

MARK = "@kl"
_LIVE: "weakref.WeakSet[RSession]" = weakref.WeakSet()  # the sessions of this process, for kill_all


class RSessionCrash(Exception):
    """R exited while a call was under way (a signal or an exit status); the message quotes its last lines."""


class RSessionTimeout(Exception):
    """R did not answer within the deadline; it was killed."""


def encode_text(text: str) -> str:
    """Percent-encoding of free text for one protocol field (R decodes with URLdecode)."""
    return quote(text, safe="") or "-"


def decode_text(field: str) -> str:
    return "" if field == "-" else unquote(field)


def encode_numbers(values) -> str:
    """Comma-separated hex floats ('-' for none); R's as.numeric parses each exactly."""
    return ",".join(_hex(float(v)) for v in values) or "-"


def decode_numbers(field: str) -> list[float]:
    """The values R wrote with sprintf('%a'): hex floats, and Inf, -Inf, NaN, NA."""
    if field == "-":
        return []
    return [float("nan") if s == "NA" else float.fromhex(s) for s in field.split(",")]


def _hex(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Inf" if v > 0 else "-Inf"
    return v.hex()


def kill_all() -> None:
    """Kill every R this process started (its parent died: the harness's worker is about to exit at once)."""
    for session in list(_LIVE):
        process = session._process
        if process is not None and process.poll() is None:
            try:
                process.kill()
            except OSError:
                pass


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL this process when its parent dies (the harness killed a hung worker)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class RSession:
    """One R process; `call(fields)` sends a request and returns the reply's fields.

    Parameters
    ----------
    argv : the command, e.g. [Rscript, "--no-init-file", worker.R]: a program that serves
        requests, its first reply being its handshake.
    env : the environment R runs in.
    call_timeout_s : deadline for one reply.
    start_timeout_s : deadline for the handshake (loading an R package can take a while).
    tmp_root : where each R's TMPDIR is made (None: the system's); the harness's worker passes a directory
        it removes once the worker has ended, for an R whose Python was killed before it could clean up.
    """

    def __init__(self, argv: list[str], env: dict[str, str], call_timeout_s: float = 120.0,
                 start_timeout_s: float = 300.0, tmp_root: str | os.PathLike | None = None) -> None:
        self.argv, self.env = list(argv), env
        self.tmp_root = tmp_root
        self.call_timeout_s, self.start_timeout_s = call_timeout_s, start_timeout_s
        self._process: subprocess.Popen | None = None
        self._stderr = None
        self._tmpdir_removal: weakref.finalize | None = None  # removes the running R's TMPDIR
        self._buffer = b""
        self._stray: deque[str] = deque(maxlen=20)  # lines R printed on stdout outside the protocol
        self.handshake: list[str] = []
        self.restarts = 0
        _LIVE.add(self)

    def start(self) -> list[str]:
        """Start R and return the fields of its first reply (the handshake)."""
        self.close()
        self._stderr = tempfile.TemporaryFile()
        self._buffer = b""
        tmpdir = tempfile.mkdtemp(prefix="kl-rsession-", dir=self.tmp_root)
        # removed when R ends, or else when this session is collected or Python exits
        self._tmpdir_removal = weakref.finalize(self, shutil.rmtree, tmpdir, True)
        self._process = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**self.env, "TMPDIR": tmpdir}, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.handshake = self._reply(self.start_timeout_s, "starting")
        return self.handshake

    def call(self, fields: list[str]) -> list[str]:
        """Send one request and return the reply's fields; restarts R first if it died before."""
        if self._process is None or self._process.poll() is not None:
            self.restarts += self._process is not None
            self.start()
        line = ("\t".join(fields) + "\n").encode()
        self._send(line)
        return self._reply(self.call_timeout_s, "answering")

    def close(self) -> None:
        """Stop R: end its input (it exits at end of file), then kill it if it lingers."""
        process, self._process = self._process, None
        if process is not None:
            try:
                process.stdin.close()
                process.wait(timeout=5)
            except Exception:
                process.kill()
                process.wait()
            process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._remove_tmpdir()

    def _remove_tmpdir(self) -> None:
        """Remove the TMPDIR of an R that has ended (a killed R leaves its Rtmp directory there)."""
        if self._tmpdir_removal is not None:
            self._tmpdir_removal()  # a no-op once it has run

    def __del__(self) -> None:  # an adapter nobody closed (a one-off reproducer) still ends its R
        try:
            self.close()
        except Exception:
            pass

    def _send(self, data: bytes) -> None:
        fd = self._process.stdin.fileno()
        deadline = time.monotonic() + self.call_timeout_s
        view = memoryview(data)
        while view:
            if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                self._fail_timeout("reading a request")
            try:
                sent = os.write(fd, view[:65536])
            except BrokenPipeError:
                self._fail_crash("reading a request")
            view = view[sent:]

    def _reply(self, timeout_s: float, doing: str) -> list[str]:
        fd = self._process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            newline = self._buffer.find(b"\n")
            while newline >= 0:
                line, self._buffer = self._buffer[:newline].decode(errors="replace"), self._buffer[newline + 1:]
                fields = line.split("\t")
                if fields[0] == MARK:
                    return fields[1:]
                self._stray.append(line)
                newline = self._buffer.find(b"\n")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail_timeout(doing)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._fail_crash(doing)
            self._buffer += chunk

    def _fail_timeout(self, doing: str):
        self._process.kill()
        self._process.wait()
        self._remove_tmpdir()
        raise RSessionTimeout(f"R did not finish {doing} within the deadline; killed it. {self._tail()}")

    def _fail_crash(self, doing: str):
        try:
            status = self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # it closed its output but lives on: end it
            self._process.kill()
            status = self._process.wait()
        self._remove_tmpdir()
        how = (f"signal {-status} ({signal.Signals(-status).name})" if status < 0 else f"exit status {status}")
        raise RSessionCrash(f"R died while {doing}: {how}. {self._tail()}")

    def _tail(self, lines: int = 8) -> str:
        """R's last output lines (stderr, and stray stdout lines), for the message of a crash or timeout."""
        text = list(self._stray)
        if self._stderr is not None:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 4000))
            text += self._stderr.read().decode(errors="replace").splitlines()
        tail = [t for t in text if t.strip()][-lines:]
        return "Last output: " + " | ".join(tail) if tail else "No output."
