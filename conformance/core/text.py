"""Text from outside (framework messages, rows, case ids) made safe to print on a terminal, or to paste
into an issue.

A framework's message may carry colours, cursor moves or a title-setting escape, and a doctored row anything;
printed as is, such text could rewrite what the terminal shows. The adapters strip these from the messages
they record (ANSI, CONTROL); the commands strip them again from every row's text they print (terminal_line).
Pasted into GitHub, an @name in such text would notify that user, and a #number link an issue: the reports
meant to be pasted (report.md, the issue drafts) break both (without_mentions). A framework that describes an
op by a map ("DataType_Name of input_0: kFloat16", one line an entry, OneFlow) lists it in hash order, which
changes from process to process: such a run of lines is sorted, so one message reads alike in every run
(with_sorted_entries).
"""

from __future__ import annotations

import itertools
import re

# an escape sequence: CSI (colours, cursor moves), OSC (titles, links) up to its terminator, or a two-character one
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 controls and DEL, but tab and line breaks
_BREAKS = re.compile(r"[\t\n\r\x85\u2028\u2029]+")
# C1 controls (\x9b starts a CSI on some terminals) and the bidirectional overrides that reorder what is shown
INVISIBLE = re.compile(r"[\x80-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SHOWN_AS_ESCAPES = re.compile(f"{CONTROL.pattern}|{INVISIBLE.pattern}")
_ENTRY = re.compile(r"^\s*(\w+) of \w+: \S+\s*$")  # a map's entry an op is described by: "<what> of <key>: <value>"
ZWJ = "\u200d"  # a zero-width joiner: invisible, and GitHub links no @mention or #reference it splits


def visible(text: str) -> str:
    """`text` with each control character but tab and line breaks, each C1 control and each direction override
    written as its escape (``\\x1b``, ``\\u202e``): a page or draft shows what the text holds, and nothing in it
    moves a terminal that prints the file or reorders the line it is on."""
    return _SHOWN_AS_ESCAPES.sub(lambda found: ascii(found.group())[1:-1], text)


def without_escapes(text: str) -> str:
    """`text` without escape sequences and control characters; tabs and line breaks stay."""
    return CONTROL.sub("", ANSI.sub("", text))


def terminal_line(text: object) -> str:
    """`text` as one plain line for a terminal: no escape sequence, control character or line break."""
    return INVISIBLE.sub("", CONTROL.sub("", _BREAKS.sub(" ", ANSI.sub("", str(text)))))


def without_mentions(text: str) -> str:
    """`text` with a zero-width joiner after each @ and #, so that GitHub's Markdown links no mention and no
    issue reference from it (inside a code span neither is linked: code needs none)."""
    return text.replace("@", "@" + ZWJ).replace("#", "#" + ZWJ)


def with_sorted_entries(lines: list[str]) -> list[str]:
    """`lines` with each run of consecutive map entries of one kind ("<what> of <key>: <value>") sorted."""
    out: list[str] = []
    for kind, run in itertools.groupby(lines, key=lambda line: (found := _ENTRY.match(line)) and found.group(1)):
        out += sorted(run, key=str.strip) if kind else list(run)
    return out
