"""report.md shows text from rows as text: a case id, message or name with bars, backticks, line breaks, HTML or
link syntax neither adds a table row or column nor becomes markup in the rendered page."""

from __future__ import annotations

import re

from conformance.report.markdown import render_markdown
from conformance.report.tally import Tally
from tests.helpers import make_result

HOSTILE = "a|b`c``d\n| injected | row |\r<script>alert(1)</script> [x](javascript:alert(1)) *em* &amp; \u2028e"


def _rows():
    return [make_result(case_id=HOSTILE, verdict="value", max_abs_err=1.0, bound=1e-6, cause=HOSTILE,
                        message=HOSTILE, api="torch.nn.functional.kl_div|x", device="cpu<b>",
                        documented_by=(), known_by=()),
            make_result()]


def _outside_code_spans(line: str) -> str:
    """The line with its code spans removed (CommonMark: a run of N backticks closes at the next run of N)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":  # a backslash escape outside a code span: the next character is literal
            out.append(line[i:i + 2])
            i += 2
            continue
        run = re.match("`+", line[i:])
        if run is None:
            out.append(line[i])
            i += 1
            continue
        fence = run.group()
        close = re.search(f"(?<!`){fence}(?!`)", line[i + len(fence):])
        if close is None:
            out.append(fence)
            i += len(fence)
        else:
            i += len(fence) + close.end()
    return "".join(out)


def _unescaped(text: str, chars: str) -> list[str]:
    return re.findall(rf"(?<!\\)[{re.escape(chars)}]", text)


def assert_row_text_stays_in_cells(text: str, own_markup: str = "") -> list[str]:
    """Text from rows (marked "injected") neither adds a table row or column nor starts markup outside a code
    span; `own_markup`, a pattern of what the report itself writes on such a line, is left out of the check.
    Returns the lines that hold row text."""
    lines = text.splitlines()
    assert not any(line.startswith("| injected") for line in lines)
    header = None
    for line in lines:
        if not line.startswith("|"):
            header = None
            continue
        columns = len(_unescaped(line, "|"))
        header = header or columns
        assert columns == header, line  # no bar from the text opens another column
    hostile_lines = [line for line in lines if "injected" in line]
    for line in hostile_lines:
        plain = _outside_code_spans(line)
        plain = re.sub(own_markup, "", plain) if own_markup else plain
        assert not _unescaped(plain, "<>[]`*&"), plain  # no HTML, link, code or emphasis starts outside a code span
    return hostile_lines


def test_hostile_row_text_stays_in_its_cell():
    assert assert_row_text_stays_in_cells(render_markdown(Tally(_rows()), [])), "the hostile row is in the report"


def test_a_code_span_outside_a_table_shows_its_text_as_written():
    """GitHub's Markdown takes a backslash in a code span literally outside a table: a bar escaped there would show
    as \\| and name another case in the reproduce command a maintainer copies. In a table cell it is escaped."""
    case_id = "my| a |case"
    text = render_markdown(Tally([make_result(case_id=case_id, verdict="value", max_abs_err=1.0, bound=1e-6,
                                              cause="pointwise.x|y", documented_by=(), known_by=())]), [])
    prose = [line for line in text.splitlines() if case_id in line and not line.startswith("|")]
    table = [line for line in text.splitlines() if line.startswith("|") and "my\\| a \\|case" in line]
    assert prose and table, text
    assert all("\\|" not in line for line in prose), prose
    assert any(line.startswith("- reproduce: `") and f"-- '{case_id}'" in line for line in prose), prose
    assert any("`pointwise.x|y`" in line for line in text.splitlines() if line.startswith("#")), text


def test_r_torch_rows_reproduce_with_rscript():
    row = make_result(framework="rtorch", api="torch::nnf_kl_div", verdict="value", max_abs_err=1.0, bound=1e-6,
                      message="m")
    text = render_markdown(Tally([row]), [])
    assert "> repro.R && Rscript repro.R" in text and "python repro.py" not in text
