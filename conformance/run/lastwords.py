"""A dead worker's last output, as its crash row's message quotes it: the framework's last words, without what
differs from one process to the next, so the same crash reads alike in every run, shard and baseline.

A framework that aborts (glog's fatal handler, a C++ exception) ends its output with a stack trace: frame lines
of addresses, which ASLR moves on every start, under a line of the time and the process id. Frames say nothing
a maintainer can act on from a report (the reproducer shows the crash), so they are left out where other lines
exist, and addresses, glog's time and thread prefix, and signal times are blanked in what stays, as are escape
sequences. Lines that list one map's entries (OneFlow's op description) come in the map's hash order: a run of them
is sorted (core/text.py: with_sorted_entries).
"""

from __future__ import annotations

import re
from pathlib import Path

from conformance.core.text import with_sorted_entries, without_escapes

_FRAME = re.compile(r"^\s*(PC: )?@\s+0x[0-9a-fA-F]+")  # a stack trace's frame: "@ 0x7f1c...  _PyEval_Vector"
_GLOG = re.compile(r"^([IWEF])\d{4,8} \d\d:\d\d:\d\d\.\d+\s+\d+ ")  # "F20261129 03:45:10.541091 17303 "
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_WHEN = re.compile(r"\b(time|pid|tid)=\d+")


def last_words(log: Path, lines: int = 5, limit: int = 600) -> str:
    """The last `lines` lines of `log` that are not stack frames (frames only where it holds nothing else),
    steadied, joined with " | ", at most `limit` characters from the end; "(nothing)" for an empty or unreadable
    log."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            text = [line for line in f.read().splitlines() if line.strip()]
    except OSError:
        text = []
    words = with_sorted_entries([line for line in text if not _FRAME.match(line)] or text)
    return " | ".join(steady(line) for line in words[-lines:])[-limit:] or "(nothing)"


def steady(line: str) -> str:
    """`line` without what changes from process to process: glog's time and thread, addresses, times; and without
    escape sequences (colours)."""
    line = _GLOG.sub(r"\1 ", without_escapes(line).strip())
    return _WHEN.sub(r"\1=…", _ADDRESS.sub("0x…", line))
