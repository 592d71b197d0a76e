"""The reproduce command: the one line that writes a standalone script reproducing one row, and runs it, as
report.md, divergences.md, report.html, the issue drafts, summary.json and the pytest plugin print it.

Builds text from a row and its run's manifest only: never runs the command, calls a framework or the reference.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterable

from conformance.core.defects import FRAMEWORK_NAME
from conformance.core.model import EAGER, Result
from conformance.core.scope import row_framework
from conformance.core.text import CONTROL, INVISIBLE


# the --framework word a run.json may give a command: a `package.module:Class` (or function) path, nothing else
_ADAPTER_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class Runs:
    """The runs' run.json files, found for a row: what its reproduce command reads of the run that wrote it (by the
    framework name rows carry, and by the release where a report holds several)."""

    def __init__(self, manifests: Iterable[dict[str, Any]] = ()) -> None:
        self._by: dict[Any, dict[str, Any]] = {}
        for m in manifests:
            self._by[row_framework(m)] = self._by[(row_framework(m), m.get("framework_version"))] = m

    def of(self, r: Result) -> dict[str, Any]:
        return self._by.get((r.framework, r.framework_version)) or self._by.get(r.framework, {})


def repro_command(r: Result, run_info: dict[str, Any], framework: str | None = None) -> str:
    """The one-line command that prints a standalone script reproducing exactly this result, as the run that wrote
    it (`run_info`, its run.json) judged it; `framework` is the word the user gave (a `module:Class` adapter's),
    where it is not the row's framework name: by default the run's."""
    given = run_info.get("framework")
    if framework is None and isinstance(given, str) and _ADAPTER_PATH.fullmatch(given) \
            and row_framework(run_info) == r.framework:
        framework = given
    # every value from a row is one shell word (shlex.quote) joined to its option, and the case id comes after
    # `--`: an id or path that starts with a dash is then never read as another option
    words = ["kl-conformance", "repro", f"--framework={framework or r.framework}", f"--api={r.api}", f"--device={r.device}",
             *([] if r.mode == EAGER else [f"--mode={r.mode}"]), f"--part={r.part}"]
    if r.source != "generated":
        words += [f"--cases={r.source}"]
    elif run_info.get("seed") is not None:
        words += [f"--seed={run_info['seed']}"]
    # judged beside the profiles the run judged it by: a --profiles DIR, a framework a port was judged like
    if isinstance(run_info.get("profiles"), str):
        words += [f"--profiles={run_info['profiles']}"]
    if isinstance(run_info.get("like"), str) and FRAMEWORK_NAME.fullmatch(run_info["like"]):
        words += [f"--like={run_info['like']}"]
    words += ["--", r.case_id]
    if r.framework == "rtorch":  # R torch's reproducer is an R script
        return " ".join(map(shell_word, words)) + " > repro.R && Rscript repro.R"
    return " ".join(map(shell_word, words)) + " > repro.py && python repro.py"


# what a one-line command cannot hold as is: control characters, line breaks, and the direction overrides that
# would show it in another order than the shell reads it
_UNPRINTABLE = re.compile(f"{CONTROL.pattern}|{INVISIBLE.pattern}|[\t\n\r\u2028\u2029]")


def shell_word(word: str) -> str:
    """`word` as one shell word on one line: shlex.quote's, or where it holds a line break or another control
    character, bash's and zsh's $'...' quoting with each such character escaped (the line break joined into a
    space, as a code span shows it, would name another case). A case id of `a`, a line break and `b` becomes
    the word $'a\\nb', which the shell reads back as those three characters."""
    if not _UNPRINTABLE.search(word):
        return shlex.quote(word)
    escaped = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "$'" + "".join(escaped.get(c) or (f"\\u{ord(c):04x}" if _UNPRINTABLE.match(c) else c)
                          for c in word) + "'"
