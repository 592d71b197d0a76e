"""Sends the parent's messages to one worker from a thread of their own, so that the parent goes on reading the
worker's answers while a send blocks.

Writes pickled bytes to one connection, in order; never reads an answer, and never resends.
"""

from __future__ import annotations

import queue
import threading
from multiprocessing.reduction import ForkingPickler


class Outbox:
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
