"""Text from a spec, a run or a framework made safe for the documentation site's Markdown (Python-Markdown, as
MkDocs renders it): it reads as written and never becomes markup, a link, HTML or a new table cell, and a control
character or a direction override shows as its escape, as report.md shows it (core/text.visible).

report.md's own escaping is GitHub's, where a backslash makes any punctuation literal; Python-Markdown honours
a backslash only before its own list of characters, so `<` and `&` become entities here instead.
"""

from __future__ import annotations

import html
import re

from conformance.core.text import visible

# Python-Markdown's escapable characters, with the tables extension's `|`: a backslash makes each literal
_MARKUP = re.compile(r"([\\`*_{}\[\]()#+\-.!|])")
_BREAKS = re.compile(r"\s+")


def text(value: object) -> str:
    """`value` as plain text on one line: HTML's `<` and `&` as entities, every Markdown character escaped."""
    return _MARKUP.sub(r"\\\1", html.escape(_BREAKS.sub(" ", visible(str(value))).strip(), quote=False))


def code(value: object) -> str:
    """`value` as one inline code span on one line, whatever backticks or bars it holds (a code span shows its
    content literally; a bar would still end a table cell, so code spans stay out of tables)."""
    body = _BREAKS.sub(" ", visible(str(value))).strip()
    fence = "`" * (max((len(run) for run in re.findall("`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
