"""report.html's rendering, read back with an HTML parser: divergences grouped by cause then verdict, filters
on every key, arrays in their shape with the differing elements highlighted, NaN and inf as such, text from rows
escaped, and a Content-Security-Policy that admits the page's own script only."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

from conformance.report.html import render_html
from conformance.report.tally import Tally
from tests.helpers import make_result


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent, self.children, self.text = tag, attrs, parent, [], []

    def all(self, tag: str | None = None, cls: str | None = None) -> list["Node"]:
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.attrs.get("class", "").split()):
                found.append(child)
            found += child.all(tag, cls)
        return found

    def content(self) -> str:
        return "".join(t if isinstance(t, str) else t.content() for t in self.text)


VOID = {"meta", "br", "img", "input", "link", "hr", "path", "line", "rect", "polyline", "circle"}


class Tree(HTMLParser):
    """The page as a tree of elements, with every start tag and attribute the parser saw."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.node = self.root
        self.tags: list[tuple[str, dict]] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        node = Node(tag, attrs, self.node)
        self.node.children.append(node)
        self.node.text.append(node)
        if tag not in VOID:
            self.node = node

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        node = self.node
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.node = node.parent

    def handle_data(self, data):
        self.node.text.append(data)


def _detail(r, **arrays) -> dict:
    return {"case_id": r.case_id, "framework": r.framework, "api": r.api, "device": r.device, "mode": r.mode, "part": r.part,
            "params": {"reduction": r.reduction}, "dtype": r.dtype, "layout": "contiguous",
            **{k: {"shape": list(v[0]), "values": list(v[1]), "truncated": len(v) > 2 and v[2]}
               for k, v in arrays.items()}}


def _value_row(case_id: str, **fields):
    fields = {"verdict": "value", "max_abs_err": 1.0, "bound": 1e-6, "cause": "pointwise.formula",
              "message": "value: outside", **fields}
    return make_result(case_id=case_id, **fields)


def _row_node(tree: Tree, case_id: str) -> Node:
    return next(d for d in tree.root.all("div", "divergence") if d.all("code")[0].content() == case_id)


def _cells(row: Node, name: str) -> list[tuple[str, bool]]:
    """(text, highlighted) of each value cell of the array called `name` in a divergence."""
    label = next(p for p in row.all("p") if p.content().startswith(f"{name} ("))
    return [(td.content(), bool({"d", "at"} & set(td.attrs.get("class", "").split())))
            for td in label.parent.all("td")]


def test_divergences_are_grouped_by_cause_then_verdict_with_counts():
    rows = [_value_row("a1", cause="reductions.mean.divisor"), _value_row("a2", cause="reductions.mean.divisor"),
            make_result(case_id="a3", verdict="shape", cause="reductions.mean.divisor", message="shape: got (1,)",
                        max_abs_err=None, bound=None),
            _value_row("b1", cause="pointwise.formula", documented=True, documented_by=("torch.some_note",)),
            make_result(case_id="ok")]
    tree = Tree(render_html(Tally(rows), []))
    groups = tree.root.all("section", "cause-group")
    assert [g.attrs["data-cause"] for g in groups] == ["reductions.mean.divisor", "pointwise.formula"]
    first, second = (g.all("summary")[0].content() for g in groups)
    assert "3 divergences" in first and "3 undocumented" in first and "0 documented" in first
    assert "1 divergence," in second and "0 undocumented" in second and "1 documented" in second
    verdicts = [v.attrs["data-verdict"] for v in groups[0].all("div", "verdict-group")]
    assert verdicts == ["value", "shape"]  # in the verdicts' order
    values = groups[0].all("div", "verdict-group")[0]
    assert [d.all("code")[0].content() for d in values.all("div", "divergence")] == ["a1", "a2"]
    assert all(g.all("details")[0].attrs.get("open") is None for g in groups)  # collapsed until opened
    assert "ok" not in [c.content() for c in tree.root.all("code")]


def test_every_filter_is_offered_and_every_row_carries_its_values():
    rows = [_value_row("x1", dtype="float16", reduction="mean", family="softmax", part="grad_input"),
            _value_row("x2", dtype="float32", reduction="none", family="peaked",
                       cause="pointwise.conventions.target_zero")]
    tree = Tree(render_html(Tally(rows), []))
    selects = {s.attrs["data-key"]: [o.attrs["value"] for o in s.all("option")] for s in tree.root.all("select")}
    for key in ("cause", "framework", "api", "part", "dtype", "reduction", "family", "verdict"):
        assert key in selects, key
    assert selects["cause"] == ["", "pointwise.conventions.target_zero", "pointwise.formula"]
    assert selects["dtype"] == ["", "float16", "float32"] and selects["family"] == ["", "peaked", "softmax"]
    row = _row_node(tree, "x1")
    assert {k: row.attrs[f"data-{k}"] for k in ("cause", "dtype", "reduction", "family", "part", "verdict")} == \
        {"cause": "pointwise.formula", "dtype": "float16", "reduction": "mean", "family": "softmax",
         "part": "grad_input", "verdict": "value"}
    matrix_rows = [tr for tr in tree.root.all("tr") if "data-family" in tr.attrs]
    assert {(tr.attrs["data-family"], tr.attrs["data-reduction"]) for tr in matrix_rows} == \
        {("softmax", "mean"), ("peaked", "none")}


def test_a_row_header_shows_case_target_part_verdict_and_its_worst_values():
    r = _value_row("fwd/none/2x3", reduction="none", part="grad_input", max_abs_err=0.5, bound=0.01)
    detail = _detail(r, expected=((2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                     got=((2, 3), [1.0, 2.25, 3.0, 4.0, 5.5, 6.0]),
                     bound=((2, 3), [0.01] * 6))
    summary = _row_node(Tree(render_html(Tally([r]), [], [detail])), r.case_id).all("summary")[0].content()
    assert summary.startswith("fwd/none/2x3 torch / torch.nn.functional.kl_div / cpu grad_input value")
    assert "got 5.5, expected 5.0 at [1, 1]" in summary  # the element furthest outside its bound
    assert "|err| 0.5 > bound 0.01" in summary


def test_arrays_are_shown_in_their_shape():
    r = _value_row("shapes", reduction="none")
    values = [float(i) for i in range(12)]
    detail = _detail(r, input=((3, 4), values), target=((2, 3, 2), values), expected=((12,), values),
                     got=((12,), values))
    tree = Tree(render_html(Tally([r]), [], [detail]))
    row = _row_node(tree, "shapes")

    def tables(name):
        label = next(p for p in row.all("p") if p.content().startswith(f"{name} ("))
        return [[[td.content() for td in tr.all("td")] for tr in t.all("tr") if tr.all("td")]
                for t in label.parent.all("table")]

    assert tables("input") == [[["0.0", "1.0", "2.0", "3.0"], ["4.0", "5.0", "6.0", "7.0"],
                                ["8.0", "9.0", "10.0", "11.0"]]]
    assert tables("target") == [[["0.0", "1.0"], ["2.0", "3.0"], ["4.0", "5.0"]],
                                [["6.0", "7.0"], ["8.0", "9.0"], ["10.0", "11.0"]]]
    assert "[1, :, :]" in row.content()  # each slab of a 3-d array says where it is
    assert tables("got") == [[[str(v) for v in values]]]  # 1-d: one row


def test_a_truncated_array_says_so_and_a_0d_one_is_a_value():
    r = _value_row("big")
    detail = _detail(r, input=((100, 3), [0.5] * 64, True), expected=((), [2.0]), got=((), [3.0]))
    row = _row_node(Tree(render_html(Tally([r]), [], [detail])), "big")
    assert "the first 64 of 300 elements" in row.content()
    assert len(_cells(row, "input")) == 64
    assert _cells(row, "got") == [("3.0", True)] and _cells(row, "expected") == [("2.0", True)]


def test_nan_and_inf_are_shown_as_such_never_as_quoted_text():
    r = _value_row("nonfinite", verdict="nonfinite", max_abs_err=None, bound=None, reduction="none")
    detail = _detail(r, expected=((4,), ["nan", "inf", "-inf", 1.0]), got=((4,), [0.0, "inf", "-inf", "nan"]))
    page = render_html(Tally([r]), [], [detail])
    row = _row_node(Tree(page), "nonfinite")
    assert [c[0] for c in _cells(row, "expected")] == ["NaN", "inf", "-inf", "1.0"]
    assert [c[0] for c in _cells(row, "got")] == ["0.0", "inf", "-inf", "NaN"]
    assert "'nan'" not in page and "&#x27;nan&#x27;" not in page
    # the NaN pattern differs at 0 and 3; the infinities match
    assert [c[1] for c in _cells(row, "got")] == [True, False, False, True]
    assert "got 0.0, expected NaN at [0]" in row.all("summary")[0].content()


def test_only_the_elements_outside_their_own_bound_are_highlighted():
    r = _value_row("bounds", reduction="none", max_abs_err=0.3, bound=0.1)
    # element 1 is off by 0.3 against a bound of 0.1; element 2 by 0.3 too, but its bound is 1.0
    detail = _detail(r, input=((3,), [-1.0, -2.0, -3.0]), expected=((3,), [1.0, 2.0, 3.0]),
                     got=((3,), [1.0, 2.3, 3.3]), bound=((3,), [0.1, 0.1, 1.0]))
    row = _row_node(Tree(render_html(Tally([r]), [], [detail])), "bounds")
    assert [c[1] for c in _cells(row, "got")] == [False, True, False]
    assert [c[1] for c in _cells(row, "expected")] == [False, True, False]
    assert [c[1] for c in _cells(row, "input")] == [False, True, False]  # the same position, in the input


def test_without_a_bound_per_element_the_rows_bound_is_used_and_said():
    r = _value_row("old-run", reduction="none", max_abs_err=0.3, bound=0.1)
    detail = _detail(r, expected=((3,), [1.0, 2.0, 3.0]), got=((3,), [1.0, 2.3, 3.05]))
    row = _row_node(Tree(render_html(Tally([r]), [], [detail])), "old-run")
    assert [c[1] for c in _cells(row, "got")] == [False, True, False]
    assert "the row's bound 0.1" in row.content()


HOSTILE = "</script><script>window.pwned=1</script><img src=x onerror=\"alert(1)\"><!-- '\" &amp; -->"


def test_hostile_row_text_is_escaped_everywhere_it_appears():
    r = _value_row(HOSTILE, cause=HOSTILE, message=HOSTILE, api="kl" + HOSTILE, dtype=HOSTILE, family=HOSTILE,
                   documented=True, documented_by=(HOSTILE,), reduction="none", rules=(HOSTILE,))
    detail = _detail(r, expected=((1,), [1.0]), got=((1,), [2.0]))
    detail["raised"] = HOSTILE
    page = render_html(Tally([r]), [{"framework": HOSTILE, "framework_version": HOSTILE, "reason": HOSTILE}],
                       [detail])
    tree = Tree(page)
    assert [t for t, _ in tree.tags if t in ("img", "script")] == ["script"]  # the page's own script only
    assert not [(t, a) for t, a in tree.tags for name in a if name.startswith("on")]
    assert page.count("<!--") == 0 and page.count("</script>") == 1
    row = _row_node(tree, HOSTILE)  # the id reads back as the text it is
    assert row.attrs["data-cause"] == HOSTILE and row.attrs["data-family"] == HOSTILE
    assert tree.root.all("section", "cause-group")[0].attrs["data-cause"] == HOSTILE
    assert HOSTILE in [o.attrs["value"] for s in tree.root.all("select") for o in s.all("option")]


def test_what_a_run_did_not_check_is_listed_and_escaped():
    """A mode not run here, an API the release lacks and a note are listed under the provenance (report.md says
    them too), so a page without their rows does not read as a clean bill; their text is shown, never run."""
    manifest = {"framework": "fw", "status": "complete", "modes_not_run": {"inductor": "no compiler" + HOSTILE},
                "apis_not_run": {"fw.losses.kl": HOSTILE}, "notes": ["cache off: " + HOSTILE]}
    page = render_html(Tally([_value_row("c1")]), [manifest])
    tree = Tree(page)
    (listed,) = [n for n in tree.root.all("ul") if n.attrs.get("id") == "not-run"]
    assert [li.content() for li in listed.all("li")] == [
        f"Not run: fw mode inductor: no compiler{HOSTILE}", f"Not run: fw API fw.losses.kl: {HOSTILE}",
        f"Note: fw: cache off: {HOSTILE}"]
    assert [t for t, _ in tree.tags if t in ("img", "script")] == ["script"]
    # nothing to say, nothing listed
    assert "id='not-run'" not in render_html(Tally([_value_row("c1")]), [{"framework": "fw", "status": "complete"}])


def test_the_csp_admits_the_pages_own_script_by_its_hash_and_nothing_else():
    page = render_html(Tally([_value_row("x")]), [])
    policy = re.search(r"<meta http-equiv='Content-Security-Policy' content=\"([^\"]*)\">", page).group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == f"'sha256-{digest}'"
    assert directives["default-src"] == "'none'"  # nothing fetched: no network, no other file


def test_a_run_keeps_each_expectations_bound_per_element_for_the_page(tmp_path, capsys):
    """details.jsonl had no bound: the page could only guess which elements were outside theirs."""
    import json
    import sys
    from pathlib import Path

    from conformance.cli import main

    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # the worker processes import tests.faults.adapters (as tests/faults/conftest.py does)
        sys.path.append(root)
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: fault-none, input: [[-1.0, -2.0], [-0.5, -3.0]], target: [[0.25, 0.75], [0.5, 0.5]], "
                     "reduction: none, dtype: float64}\n")
    out = tmp_path / "run"
    assert main(["run", "--framework", "tests.faults.adapters:OffByOneAdapter", "--cases", str(cases),
                 "--suite", "none", "--out", str(out), "--no-progress", "--no-repro"]) == 0
    details = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
    assert len(details) == 1 and details[0]["bound"]["shape"] == details[0]["expected"]["shape"] == [2, 2]
    assert all(isinstance(b, float) and 0 < b < 1 for b in details[0]["bound"]["values"])
    page = (out / "report.html").read_text()
    row = _row_node(Tree(page), "fault-none")
    assert [c[1] for c in _cells(row, "got")] == [True] * 4 and "the row's bound" not in row.content()
    details[0]["bound"]["values"] = ["<b>"]
    (out / "details.jsonl").write_text(json.dumps(details[0]) + "\n")
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "again")]) == 2
    assert "details.jsonl: line 1: field 'bound'" in capsys.readouterr().err


def test_a_shape_or_error_divergence_header_says_what_came_back():
    shape = make_result(case_id="shape-case", verdict="shape", cause="shapes.output", message="shape: got (1,)",
                        max_abs_err=None, bound=None)
    error = make_result(case_id="error-case", verdict="error", cause="errors.x", message="error: raised",
                        max_abs_err=None, bound=None)
    details = [_detail(shape, expected=((), [1.0]), got=((1,), [1.0])),
               {**_detail(error, expected=((), [1.0])), "raised": "RuntimeError: " + "x" * 300}]
    tree = Tree(render_html(Tally([shape, error]), [], details))
    assert "got shape (1,), expected ()" in _row_node(tree, "shape-case").all("summary")[0].content()
    header = _row_node(tree, "error-case").all("summary")[0].content()
    assert "raised RuntimeError: xxx" in header and len(header) < 250  # the whole message is in the body
    assert "x" * 300 in _row_node(tree, "error-case").content()


def test_an_unexplained_group_names_the_rules_its_rows_touch():
    rows = [_value_row("u1", cause="unexplained", rules=("reductions.mean.divisor",)),
            _value_row("u2", cause="unexplained", rules=("pointwise.formula", "reductions.mean.divisor"))]
    tree = Tree(render_html(Tally(rows), []))
    header = tree.root.all("section", "cause-group")[0].all("summary")[0].content()
    assert "unexplained" in header and "rules touched: pointwise.formula, reductions.mean.divisor" in header
    assert "rules the case touches: pointwise.formula, reductions.mean.divisor" in _row_node(tree, "u2").content()


def test_a_group_larger_than_the_page_counts_all_its_rows_and_says_which_it_splits():
    from conformance.report.tally import LISTED_IN_PAGE

    rows = [_value_row(f"r{i}", documented=i % 2 == 0, documented_by=("torch.note",) if i % 2 == 0 else ())
            for i in range(LISTED_IN_PAGE + 3)]
    header = Tree(render_html(Tally(rows), [])).root.all("section", "cause-group")[0].all("summary")[0].content()
    assert f"{LISTED_IN_PAGE + 3} divergences" in header
    assert f"{LISTED_IN_PAGE // 2} undocumented, {LISTED_IN_PAGE // 2} documented (of the {LISTED_IN_PAGE} in " \
           "this page)" in header
