"""report.md's text escaping (GitHub's Markdown, where a backslash makes any punctuation literal): text from a row,
a spec or a known file reads as written in report.md, divergences.md and the issue drafts, and never becomes
markup, a link, a mention, HTML, a new table row or a terminal's escape (a control character shows as its escape).

Text only: imports nothing of the project but the core's text helpers.
"""

from __future__ import annotations

import re

from conformance.core.text import visible, without_mentions

CELL = 160  # characters of a row's text shown in one cell of report.md

# Characters that can start HTML, an entity, a link or image, code or emphasis, or end a table cell; a backslash
# makes each one literal. Underscores stay as they are, so names such as not_run read as written.
_MARKUP = re.compile(r"([\\`*\[\]<>|&!])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x85\x0b\x0c]")


def cut(text: object, limit: int) -> str:
    """`text` up to `limit` characters, marked where it was cut."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + " ..."


def cell(text: object, limit: int = CELL) -> str:
    """Text from a row, spec or known file as plain text in one table cell: no markup, no link, no mention, no
    new row; cut to `limit` characters."""
    return without_mentions(_MARKUP.sub(r"\\\1", cut(visible(_LINE_BREAKS.sub(" ", str(text))), limit)))


def code(text: object) -> str:
    """Text as one code span in prose (a heading, a paragraph, a list item), whatever backticks or line breaks it
    holds: what it shows is the text, so a command in it runs as written."""
    body = visible(_LINE_BREAKS.sub(" ", str(text)))
    fence = "`" * (max((len(run) for run in re.findall("`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or body.startswith(" ") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def code_cell(text: object) -> str:
    """Text as one code span in a table cell: a bar is escaped there, or it would end the cell (GitHub's tables
    take the escape before the span does; outside a table the backslash would show)."""
    return code(str(text).replace("|", "\\|"))
