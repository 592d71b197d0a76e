"""report.md is read by cause: one section per cause and verdict, undocumented first and largest first, each with
what its rows span and one worked example; every row is in divergences.md. However large the merged matrix,
report.md fits in an issue body (65,536 characters) and counts what it leaves out."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from types import SimpleNamespace

from conformance.core.model import Result
from conformance.report.baseline import BaselineDiff, render_baseline_markdown
from conformance.report.markdown import render_divergences, render_markdown
from conformance.report.tally import Tally
from tests.helpers import make_result
from tests.report.test_markdown import assert_row_text_stays_in_cells

ISSUE_BODY = 65_536
HOSTILE = "a|b`c``d\n| injected | row |\r<script>alert(1)</script> [x](javascript:alert(1)) *em* &amp; \x1b[31m"
PARTS = ("forward", "grad_input", "grad_target", "grad2_input")
SECTION = re.compile(r"^### (`+) ?(.*?) ?\1: (\w+) \((\d+) results: (\d+) undocumented, (\d+) documented, "
                     r"(\d+) known\)$", re.M)


def _with_rules(row: Result, rules: tuple[str, ...]) -> Result:
    """The row with the rules its case touches (the `rules` field of format 4; set by hand on a row without it)."""
    if "rules" in {f.name for f in dataclasses.fields(Result)}:
        return dataclasses.replace(row, rules=rules)
    object.__setattr__(row, "rules", rules)
    return row


def _large_matrix() -> tuple[list[Result], list[dict], Counter]:
    """Ten frameworks x three APIs x two devices x four parts, with over a hundred causes (long hostile names and
    messages among them) spread over thousands of divergences; and every (cause, verdict) with its row count."""
    rows, sizes = [], Counter()
    frameworks = [f"framework{i}" for i in range(10)]
    for fi, framework in enumerate(frameworks):
        for api in range(3):
            for device in ("cpu", "cuda"):
                for part in PARTS:
                    for case in range(24):
                        verdict = ("pass", "value", "shape", "error", "nonfinite")[case % 5]
                        cause = "" if verdict == "pass" else (
                            f"rule.{(case + fi) % 40}" if case % 3 else f"{HOSTILE} cause {case % 7} " + "x" * 300)
                        row = make_result(
                            case_id=f"fwd/{case}/{HOSTILE if case == 7 else ''}" + "i" * (200 if case == 11 else 0),
                            framework=framework, api=f"{framework}.api{api}.kl_div|{HOSTILE if api == 2 else ''}",
                            device=device, part=part, verdict=verdict, cause=cause,
                            family=("softmax", "sparse", "extreme")[case % 3], reduction=("sum", "mean")[case % 2],
                            dtype=("float32", "float16", "bfloat16")[api], log_target=bool(case % 4 == 1),
                            message=(HOSTILE * 40) if verdict != "pass" else "", max_abs_err=1.0 if verdict == "value"
                            else 0.0, documented=case % 6 == 1, documented_by=("dev",) if case % 6 == 1 else (),
                            missing_warnings=(f"warning-{case % 9}",) if case % 2 else ())
                        rows.append(row)
                        if verdict != "pass":
                            sizes[(cause, verdict)] += 1
    manifests = [{"framework": f, "framework_version": "1.0", "status": "complete", "cases": 24, "seed": 1,
                  "reason": HOSTILE * 3} for f in frameworks]
    return rows, manifests, sizes


def _sections(text: str) -> list[tuple[str, str, int, int, int, int]]:
    return [(m[2], m[3], int(m[4]), int(m[5]), int(m[6]), int(m[7])) for m in SECTION.finditer(text)]


def test_a_whole_merged_matrix_fits_an_issue_body_and_counts_every_cause():
    rows, manifests, sizes = _large_matrix()
    assert len(rows) > 5_000 and len(sizes) > 100
    tally = Tally(rows)
    key = ("fwd/0/", "framework0", "framework0.api0.kl_div|", "cpu", "eager", "forward")
    diff = BaselineDiff("old", new=[((f"case-{i}-{HOSTILE}", *key[1:]), None, ("value", HOSTILE), False)
                                    for i in range(3000)])
    audit = [SimpleNamespace(entry=SimpleNamespace(id=f"entry-{i}-{HOSTILE}", reason=HOSTILE * 5, link=HOSTILE),
                             accepted=i, concerned=i, status="stale" if i % 2 else "matched") for i in range(500)]
    text = render_markdown(tally, manifests, audit, examples={}, baseline=render_baseline_markdown(diff, listed=10))
    assert len(text) < ISSUE_BODY
    assert re.search(r"^And \d+ more entries, left out to keep this report short", text, re.M)
    shown = _sections(text)
    more = re.search(r"^And (\d+) more causes \((\d+) results, (\d+) undocumented\)", text, re.M)
    assert more is not None, "not every cause fits: the rest are counted"
    assert len(shown) + int(more[1]) == len(sizes)
    assert sum(s[2] for s in shown) + int(more[2]) == sum(sizes.values())
    # every cause shown has its own count, and no cause twice (hostile names cut, so counted by size and verdict)
    assert Counter((s[1], s[2]) for s in shown) <= Counter((v, n) for (_, v), n in sizes.items())
    # tables too wide to fit are shown by coarser targets, and by every target in divergences.md
    listed = render_divergences(tally, manifests)
    by_target = "| framework0 / framework0.api0.kl_div\\| / cpu / grad_input | 24 |"
    assert "| framework0 / framework0.api0.kl_div\\| / cpu | 96 |" in text and by_target not in text
    assert "Shown by framework / API / device here" in text and by_target in listed
    assert "Shown by framework here" in text and "| family | reduction | log_target | framework0 | framework1 |" in text
    assert "| framework9 / framework9.api1.kl_div\\| / cuda / grad2_input |" in listed.split("## Case families")[1]
    assert len(re.findall(r"^## `", listed, re.M)) == len(sizes)  # every cause in divergences.md
    for document in (text, listed):
        assert_row_text_stays_in_cells(document, own_markup=r"\*\*(documented|known|stale)\*\*")  # its tags


def test_sections_come_undocumented_first_then_largest_each_with_its_counts():
    rows = [make_result(case_id=f"documented-{i}", verdict="value", cause="big.documented", documented=True,
                        documented_by=("dev",)) for i in range(5)]
    rows += [make_result(case_id=f"small-{i}", verdict="shape", cause="shapes.output") for i in range(2)]
    rows += [make_result(case_id=f"mixed-{i}", verdict="value", cause="reductions.mean.divisor",
                         known_by=("k",) if i == 0 else ()) for i in range(4)]
    text = render_markdown(Tally(rows), [])
    assert _sections(text) == [("reductions.mean.divisor", "value", 4, 3, 0, 1), ("shapes.output", "shape", 2, 2, 0, 0),
                               ("big.documented", "value", 5, 0, 5, 0)]
    assert "more causes" not in text
    listed = render_divergences(Tally(rows), [])
    assert [line for line in listed.splitlines() if line.startswith("## ")] == [
        "## `reductions.mean.divisor`: value (4 results: 3 undocumented, 0 documented, 1 known)",
        "## `shapes.output`: shape (2 results: 2 undocumented, 0 documented, 0 known)",
        "## `big.documented`: value (5 results: 0 undocumented, 5 documented, 0 known)"]
    examples = {d.example.case_id for d in Tally(rows).defects.by_id.values()}  # the defects table names those
    assert all(f"`{r.case_id}`" in listed and (r.case_id in examples or f"`{r.case_id}`" not in
                                               text.split("## Divergences by cause")[0]) for r in rows)
    assert "[divergences.md](divergences.md)" in text


def test_a_section_says_what_it_spans_and_works_one_example_through():
    rows = [make_result(case_id=f"c{i}", verdict="value", cause="reductions.mean.divisor", part=part, dtype=dtype,
                        reduction="mean", family=family, log_target=bool(i % 2), api=api,
                        message="value: 2 of 6 elements outside bound")
            for i, (part, dtype, family, api) in enumerate([
                ("forward", "float32", "softmax", "torch.nn.functional.kl_div"),
                ("forward", "float64", "softmax", "torch.nn.functional.kl_div"),
                ("grad_input", "float32", "sparse", "torch.nn.KLDivLoss")])]
    got = [0.5, 0.25, 0.125, 2.0, float("nan"), 1.0]
    expected = [0.5, 0.25, 0.125, 1.5, 0.75, 1.0]
    detail = {"case_id": "c0", "framework": "torch", "api": "torch.nn.functional.kl_div", "device": "cpu",
              "mode": "eager", "part": "forward", "params": {}, "dtype": "float32", "layout": "contiguous",
              "input": {"shape": [2, 3], "values": [-1.5, -2.0, -0.25, -3.0, -1.0, -0.5], "truncated": False},
              "target": {"shape": [2, 3], "values": [0.1, 0.2, 0.7, 0.3, 0.3, 0.4], "truncated": False},
              "got": {"shape": [2, 3], "values": [*got[:4], "nan", got[5]], "truncated": False},
              "expected": {"shape": [2, 3], "values": expected, "truncated": False}}
    text = render_markdown(Tally(rows), [{"framework": "torch", "seed": 7}],
                           examples={("c0", "torch", "torch.nn.functional.kl_div", "cpu", "eager", "forward"): detail})
    section = text.split("### `reductions.mean.divisor`")[1]
    assert "- targets: torch / torch.nn.functional.kl_div / cpu (2), torch / torch.nn.KLDivLoss / cpu (1)" in section
    assert "- parts: forward (2), grad_input (1)" in section and "- dtypes: float32 (2), float64 (1)" in section
    assert "- reductions: mean (3)" in section and "- log_target: 0 (2), 1 (1)" in section
    assert "- families: softmax (2), sparse (1)" in section
    assert "Example (undocumented): `c0` on torch / torch.nn.functional.kl_div / cpu, part forward" in section
    assert "- input: shape (2, 3), float32: [-1.5, -2, -0.25, -3, -1, -0.5]" in section
    assert "- target: shape (2, 3): [0.1, 0.2, 0.7, 0.3, 0.3, 0.4]" in section
    # NaN where 0.75 was expected is the furthest element, at row 1, column 1 of the (2, 3) result
    assert "- got nan against expected 0.75 at element (1, 1), the furthest element" in section
    assert "- message: value: 2 of 6 elements outside bound" in section
    assert ("- reproduce: `kl-conformance repro --framework=torch --api=torch.nn.functional.kl_div --device=cpu "
            "--part=forward --seed=7 -- c0 > repro.py && python repro.py`") in section


def test_an_unexplained_cause_lists_the_rules_its_rows_touch():
    rules = [("pointwise.formula", "reductions.mean.divisor"), ("pointwise.formula",)]
    rows = [_with_rules(make_result(case_id=f"u{i}", verdict="value", cause="unexplained"), touched)
            for i, touched in enumerate(rules)]
    text = render_markdown(Tally(rows), [])
    assert "- touches: pointwise.formula (2), reductions.mean.divisor (1)" in text
    assert "- inputs: not in details.jsonl" in text  # an example without its detail says so


def test_the_worked_example_shows_the_element_the_judge_names():
    """The judge names the worst element relative to its bound; the example shows that one, not the furthest."""
    row = make_result(case_id="c0", verdict="value", cause="pointwise.formula",
                      message="value: 2 of 6 elements outside bound; worst [1, 0]: got 2, expected 1.5")
    detail = {"case_id": "c0", "framework": "torch", "api": row.api, "device": "cpu", "mode": "eager", "part": "forward",
              "params": {}, "dtype": "float32", "layout": "contiguous",
              "got": {"shape": [2, 3], "values": [0.5, 0.25, 9.0, 2.0, 1.0, 1.0], "truncated": False},
              "expected": {"shape": [2, 3], "values": [0.5, 0.25, 1.0, 1.5, 1.0, 1.0], "truncated": False}}
    text = render_markdown(Tally([row]), [], examples={("c0", "torch", row.api, "cpu", "eager", "forward"): detail})
    assert "- got 2.0 against expected 1.5 at element (1, 0), the one the message names" in text
    # a message naming an element outside the values kept (or none) leaves the furthest of those
    far = dataclasses.replace(row, message="value: worst [1, 7]: got 2, expected 1.5")
    text = render_markdown(Tally([far]), [], examples={("c0", "torch", row.api, "cpu", "eager", "forward"): detail})
    assert "- got 9.0 against expected 1.0 at element (0, 2), the furthest element" in text
