"""What each verdict means is stated once, in conformance/core/verdict.py: every verdict has its row, the
published schemas list the same verdicts, and no module restates a set of verdicts or a map keyed by them.

The expected outcomes below are written from junit.xml's and pytest's meaning of a test outcome
(docs/guide/reports.md's verdict table), not read back from the table under test.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.core.specload import load_schema
from conformance.core.verdict import MEANINGS, OUTCOMES, Meaning, Verdict
from conformance.report.markdown import _legend

ROOT = Path(__file__).resolve().parents[2]
VALUES = [v.value for v in Verdict]
# the verdicts' names that name nothing else (a detail's "value", "shape" and "dtype" are fields too)
UNAMBIGUOUS = {"unsupported", "nonfinite", "crash", "timeout", "fallback"}
# modules that still branch on a verdict's name where the table says it; folded in with issue 39's merge
LEFT: dict[str, str] = {}  # module -> why it keeps its own words for a verdict


def test_every_verdict_has_its_row_and_nothing_else():
    assert list(MEANINGS) == list(Verdict), "MEANINGS lists the verdicts in the enum's order, each once"
    for verdict, meaning in MEANINGS.items():
        assert isinstance(meaning, Meaning), verdict
        for field in dataclasses.fields(Meaning):
            value = getattr(meaning, field.name)
            assert isinstance(value, bool if field.type == "bool" else str), (verdict, field.name)
        assert meaning.words, f"{verdict.value}: a defect's title needs its words"


# a test's outcome for a row nothing accepts, as junit.xml and the pytest plugin report it
OUTCOME = {"pass": "passed", "value": "failed", "nonfinite": "failed", "shape": "failed", "dtype": "failed",
           "error": "failed", "unsupported": "skipped", "crash": "error", "timeout": "error", "fallback": "failed"}


def test_outcome():
    assert sorted(OUTCOME) == sorted(VALUES), "a new verdict: write its expected outcome here"
    for verdict, outcome in OUTCOME.items():
        assert Verdict(verdict).outcome == outcome, verdict
        assert outcome in OUTCOMES


def test_the_columns_agree():
    """A call that was checked, or that came back, was made; a finding is a divergence of a checked call."""
    for v in Verdict:
        assert not v.is_checked or v.is_judged, v
        assert not v.is_answered or v.is_judged, v
        assert v.is_finding == (v.is_divergence and v.is_checked), v


def test_findings_are_what_the_gates_and_known_entries_accept():
    """spec: the fallback verdict is the one divergence no profile, known entry or gate accepts."""
    assert [v.value for v in Verdict if v.is_divergence and not v.is_finding] == ["fallback"]
    from conformance.core.known import DIVERGENCES
    assert list(DIVERGENCES) == [v for v in VALUES if v not in ("pass", "unsupported", "fallback")]


@pytest.mark.parametrize("name, path", [("results.schema.json", ("properties", "verdict", "enum")),
                                        ("summary.schema.json", None)])
def test_schemas_list_the_verdicts(name, path):
    """The published schemas name every verdict, in the enum's order (users validate rows with them)."""
    schema = load_schema(name)
    if path is None:  # summary.schema.json: a target's counts by verdict, wherever they are
        found = [node["propertyNames"]["enum"] for node in _nodes(schema)
                 if isinstance(node, dict) and isinstance(node.get("propertyNames"), dict)
                 and "pass" in node["propertyNames"].get("enum", ())]
        assert found, "summary.schema.json: no map keyed by verdict"
    else:
        node = schema
        for key in path:
            node = node[key]
        found = [node]
    for enum in found:
        assert enum == VALUES, name


def _nodes(node):
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _nodes(child)


def test_report_legend_names_every_verdict_from_the_table():
    eager = _legend(SimpleNamespace(by_target={"t": Counter({"pass": 3, "value": 1})}))
    modes = _legend(SimpleNamespace(by_target={"t": Counter({"pass": 3, "fallback": 1})}))
    for v in Verdict:
        assert f"`{v.value}`" + (f" ({v.gloss})" if v.gloss else "") in modes, v
        assert (f"`{v.value}`" in eager) == (v is not Verdict.FALLBACK), v
    assert modes.startswith("Verdicts: `pass`; divergences `value`") and modes.endswith(
        "; and `unsupported` (the API cannot express the case).")


def _sources():
    for folder in ("conformance", "adapters", "cases", "reference"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != "conformance/core/verdict.py":
                yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _is_member(node) -> bool:
    """`Verdict.CRASH`, or its name `Verdict.CRASH.value`."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Verdict" \
        and node.attr.isupper()


def _is_verdict_text(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in VALUES


def _reads_verdict(node) -> bool:
    """`x.verdict.value`, `x.verdict` or `verdict`: an expression that holds a row's verdict."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == "verdict") or \
        (isinstance(node, ast.Name) and node.id == "verdict")


def test_no_module_restates_a_set_of_verdicts():
    """No tuple, list or set of verdicts (`v in (Verdict.CRASH, Verdict.TIMEOUT)`), no map keyed by verdict names
    (a label map), no comparison of a verdict with a verdict's name written out, and no count picked by a
    verdict's name (`counts["unsupported"]`): each says what the table says. A comparison with one member (`verdict is Verdict.VALUE`) stays allowed: the comparator decides which
    verdict a comparison gives, and a report may read one verdict's own data (a value divergence's error)."""
    found = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_member(e) for e in node.elts):
                found.append(f"{rel}:{node.lineno}: a collection of Verdict members")
            elif isinstance(node, ast.Dict) and len(node.keys) >= 2 \
                    and all(_is_verdict_text(k) or _is_member(k) for k in node.keys):
                found.append(f"{rel}:{node.lineno}: a map keyed by verdicts")
            elif isinstance(node, ast.Compare) and _reads_verdict(node.left) \
                    and any(_is_verdict_text(c) for c in node.comparators):
                found.append(f"{rel}:{node.lineno}: a verdict compared with a verdict's name")
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and node.slice.value in UNAMBIGUOUS:
                found.append(f"{rel}:{node.lineno}: a count of one verdict by its name")
    assert [f for f in found if f.split(":")[0] not in LEFT] == [], "read core/verdict.py's MEANINGS instead"
    assert {f.split(":")[0] for f in found} == set(LEFT), "a module in LEFT no longer restates: drop it from LEFT"
