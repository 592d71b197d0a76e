"""Writes junit.xml: one testcase per case x framework x api x device x mode x part, so CI shows results natively.

An undocumented divergence is a failure (crash and timeout are errors); a documented
divergence, a known finding (--known) and an unsupported case are skipped, with the reason; a port's divergence
judged with --like-run carries its mark as the property `like` (shared or own). With a gate, the
gate decides (report/gate.py junit_view): a finding it accepts is skipped with why, lost coverage is a failure,
and each failed gate is a failing testcase of the suite `kl-conformance.gate`. Takes rows one
at a time (JunitWriter.add) and streams: each suite's testcases go to a temporary file while the rows are read, and
the suites are then joined under their counts, so memory stays flat for a million rows.

Reads rows only; never a framework or the reference.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO, Iterator
from xml.sax.saxutils import escape, quoteattr

from conformance.core.model import EAGER, Result
from conformance.core.atomicfile import write_lines_atomic

_NOT_XML = re.compile(r"[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd]")
KINDS = ("failures", "errors", "skipped")


def _text(s: str) -> str:
    """Only characters XML 1.0 allows (a framework's message may carry terminal escapes)."""
    return _NOT_XML.sub("", s)


_RELEASE_NAME = re.compile(r"[^A-Za-z0-9_+-]+")  # what a release may keep in a suite's name (a dot reads as a name)


class JunitWriter:
    """junit.xml written as rows arrive (`add`), so the report's one pass over the rows feeds it too;
    the file appears, whole, when the writer is closed without an error."""

    def __init__(self, path: Path, released: frozenset[str] = frozenset()) -> None:
        self.path, self.released = path, released  # frameworks whose suites are named with the release
        self._counts: dict[str, Counter] = defaultdict(Counter)
        self._tmp = tempfile.TemporaryDirectory(dir=path.parent, prefix=".junit-")
        self._files: dict[str, IO[str]] = {}
        self._suites: dict[str, str] = {}  # each suite's name, quoted for an attribute
        self._case: tuple[str | None, str] = (None, "")  # the last case id, and that id quoted

    def add(self, r: Result, view: tuple[str, str] | None = None) -> None:
        """One row's testcase; `view` is the gate's ("failure" or "skipped", message), None for the usual one."""
        # the mode where it is not eager: an eager run's test names are those of runs made before modes existed
        # and the release after the framework where the report holds several of it (dots in it read as names)
        release = f"-{_RELEASE_NAME.sub('_', r.framework_version)}" if r.framework in self.released else ""
        name = f"{r.framework}{release}.{r.api}.{r.device}." + ("" if r.mode == EAGER else f"{r.mode}.") + r.part
        if name not in self._files:
            self._files[name] = open(Path(self._tmp.name) / f"{len(self._files)}.xml", "w+", encoding="utf-8")
            self._suites[name] = quoteattr(name)
        if r.case_id != self._case[0]:  # a case's rows come together: its name is quoted once
            self._case = (r.case_id, quoteattr(_text(r.case_id)))
        element, kind = _testcase(self._suites[name], self._case[1], r, view)
        self._write(name, element, kind)

    def _write(self, name: str, element: str, kind: str | None) -> None:
        self._files[name].write(element)
        self._counts[name]["tests"] += 1
        self._counts[name][kind] += kind is not None

    def add_gate(self, failed: list[tuple[str, str]]) -> None:
        """Each failed gate, given as (its name, its text), as a failing testcase named after it, so the dashboard
        is red whenever the exit code is not 0: its text's first line is the message, the whole text (what
        failed it) the body."""
        name = "kl-conformance.gate"
        for gate, line in failed:
            if name not in self._files:
                self._files[name] = open(Path(self._tmp.name) / "gate.xml", "w+", encoding="utf-8")
                self._suites[name] = quoteattr(name)
            element = (f"    <testcase classname={self._suites[name]} name={quoteattr(_text(gate))} time=\"0\">\n"
                       f"      {_child('failure', 'gate', line.split(chr(10))[0][:500], line)}\n    </testcase>\n")
            self._write(name, element, "failures")

    def close(self, write: bool = True) -> None:
        try:
            if write:
                write_lines_atomic(self.path, _document(self._files, self._counts))
        finally:
            for f in self._files.values():
                f.close()
            self._tmp.cleanup()

    def __enter__(self) -> "JunitWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(write=exc_type is None)


def _document(files: dict[str, IO[str]], counts: dict[str, Counter]) -> Iterator[str]:
    totals = Counter()
    for c in counts.values():
        totals.update(c)
    yield "<?xml version='1.0' encoding='utf-8'?>\n"
    yield f"<testsuites name=\"kl-conformance\"{_counts(totals)}>\n"
    for name in sorted(files):
        yield f"  <testsuite name={quoteattr(name)}{_counts(counts[name])}>\n"
        files[name].seek(0)
        yield from files[name]
        yield "  </testsuite>\n"
    yield "</testsuites>\n"


def _counts(c: Counter) -> str:
    return "".join(f' {key}="{c[key]}"' for key in ("tests", *KINDS))


def _testcase(suite: str, name: str, r: Result, view: tuple[str, str] | None = None) -> tuple[str, str | None]:
    """One <testcase> element, and which count it adds to (None for a pass); `suite` and `name` come quoted."""
    head = f"    <testcase classname={suite} name={name} time=\"{r.elapsed_s:.6f}\""
    if view is not None and view[0] == "failure":
        child, kind = _child("failure", r.verdict.value, view[1][:500], f"{view[1]}\ncause: {r.cause}"), "failures"
    elif view is not None:
        child, kind = f"<skipped message={quoteattr(_text(view[1][:500]))} />", "skipped"
    elif r.verdict.is_divergence and r.is_accepted:
        reason = ("documented deviation: " + ", ".join(r.documented_by) if r.documented
                  else "known finding: " + ", ".join(r.known_by))
        child, kind = f"<skipped message={quoteattr(_text(reason))} />", "skipped"
    elif r.verdict.outcome == "error":  # the process died or hung: the test could not finish
        child, kind = _child("error", r.verdict.value, r.message[:500], r.message), "errors"
    elif r.verdict.outcome == "failed":
        child, kind = _child("failure", r.verdict.value, r.message[:500], f"{r.message}\ncause: {r.cause}"), "failures"
    elif r.verdict.outcome == "skipped":
        child, kind = f"<skipped message={quoteattr(_text(r.message[:500]))} />", "skipped"
    else:  # passed
        return head + " />\n", None
    if r.like is not None:  # a port's divergence, shared with the framework it is judged like or its own
        child = f"<properties><property name=\"like\" value={quoteattr(r.like)} /></properties>\n      {child}"
    return f"{head}>\n      {child}\n    </testcase>\n", kind


def _child(tag: str, kind: str, message: str, text: str) -> str:
    return f"<{tag} type={quoteattr(kind)} message={quoteattr(_text(message))}>{escape(_text(text))}</{tag}>"
