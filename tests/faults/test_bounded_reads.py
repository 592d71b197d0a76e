"""One case, one cost; every file read is type-checked and bounded.

Whatever an adapter hands back costs its own case only (an `error` row that says why). A run directory,
a profile's chain of `extends:` and a case file are data from outside: a damaged, doctored, looping or
oversized one is refused in one line naming the file, the place, the problem and the fix (exit 2), never a
traceback, and never parsed for longer than its size allows.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conformance.cli import main
from conformance.core.results import iter_results

ADAPTERS = "tests.faults.adapters:"
GARBAGE = ("object", "lies", "unconvertible", "complex")
CASE = "input: [[-1.0, -2.0]], target: [[0.25, 0.75]], dtype: float64"


def _one_line_error(capsys, *words: str) -> str:
    __tracebackhide__ = True
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err and "Fix:" in err, f"got {err!r}, expected one line"
    for word in words:
        assert word in err, f"got {err!r}, expected {word!r} in it"
    return err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run of the honest NumPy stand-in, copied by each test that doctors it."""
    tmp = tmp_path_factory.mktemp("run")
    cases = tmp / "cases.yaml"
    cases.write_text(f"- {{id: ok-sum, {CASE}, reduction: sum}}\n- {{id: ok-none, {CASE}, reduction: none}}\n")
    out = tmp / "run"
    assert main(["run", "--framework", ADAPTERS + "NumpyAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    return out


@pytest.fixture
def doctored(run_dir, tmp_path):
    copy = tmp_path / "doctored"
    shutil.copytree(run_dir, copy)
    return copy


def _report(tmp_path, *runs) -> int:
    return main(["report", *map(str, runs), "--out", str(tmp_path / "merged")])


def test_what_an_adapter_cannot_hand_back_costs_its_case_only(tmp_path):
    """An object array, a stated shape that is not the value's, a value that raises while converted to NumPy, and
    complex numbers: each is its case's `error`, with the reason; the cases around them pass. An object array
    or an unconvertible value used to end the run with a traceback; a lying shape was judged a shape divergence,
    and complex numbers a dtype divergence, of a value the harness had not read."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(f"- {{id: ok-before, {CASE}, reduction: sum}}\n"
                     + "".join(f"- {{id: fault-{kind}, {CASE}, reduction: none}}\n" for kind in GARBAGE)
                     + f"- {{id: ok-after, {CASE}, reduction: none}}\n")
    out = tmp_path / "out"
    code = main(["run", "--framework", ADAPTERS + "GarbageValueAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"])
    rows = {r.case_id: r for r in iter_results(out)}
    assert code == 0 and [rows[i].verdict.value for i in ("ok-before", "ok-after")] == ["pass", "pass"]
    reasons = {"object": "holds Python objects", "lies": "states the shape (1, 2) for a value of shape (3, 5)",
               "unconvertible": "cannot be converted to a NumPy array (TypeError: cannot convert this tensor",
               "complex": "holds complex numbers"}
    for kind, reason in reasons.items():
        row = rows[f"fault-{kind}"]
        assert row.verdict.value == "error" and "AdapterError" in row.message and reason in row.message, row.message


@pytest.mark.parametrize("where", ["run directory", "results.jsonl", "run.json"])
def test_a_symbolic_link_that_loops_is_one_line(doctored, tmp_path, capsys, where):
    """`report` resolved the paths it was given and read run.json as they were: a loop was a traceback."""
    if where == "run directory":
        given = tmp_path / "loop"
        os.symlink(given, given)
        looped = given
    else:
        given = doctored
        looped = doctored / where
        looped.unlink()
        os.symlink(looped, looped)
    assert _report(tmp_path, given) == 2
    _one_line_error(capsys, str(looped), "a symbolic link that loops")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("field, value", [
    ("modes", 5),
    ("modes", [["eager"]]),
    ("selection", "all"),
    ("selection.parts", 5),
    ("selection.modes", 3),
    ("selection.narrowed_by", 7),
    ("modes_not_run", ["compiled"]),
])
def test_run_json_fields_that_reports_read_are_type_checked(doctored, tmp_path, capsys, field, value):
    manifest = json.loads((doctored / "run.json").read_text())
    if "." in field:
        outer, inner = field.split(".")
        manifest[outer][inner] = value
    else:
        manifest[field] = value
    (doctored / "run.json").write_text(json.dumps(manifest))
    assert _report(tmp_path, doctored) == 2
    _one_line_error(capsys, str(doctored / "run.json"), f"field {field!r} holds")


@pytest.mark.parametrize("verdict", [["pass"], {"pass": True}])
def test_a_row_whose_verdict_is_a_list_or_mapping_is_one_line(doctored, tmp_path, capsys, verdict):
    lines = (doctored / "results.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["verdict"] = verdict
    (doctored / "results.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    assert _report(tmp_path, doctored) == 2
    _one_line_error(capsys, str(doctored / "results.jsonl"), "line 1", "field 'verdict' holds")


@pytest.mark.parametrize("name", ["results.jsonl", "run.json"])
def test_json_nested_past_pythons_stack_is_one_line(doctored, tmp_path, capsys, name):
    """json.loads raises RecursionError, not ValueError, on a deep enough document: it escaped every reader."""
    (doctored / name).write_text("[" * 200_000 + "]" * 200_000 + "\n")
    assert _report(tmp_path, doctored) == 2
    _one_line_error(capsys, str(doctored / name), "nested too deeply")


def test_a_row_longer_than_any_run_writes_is_refused(doctored, tmp_path, capsys):
    """A row's line is read whole into memory: a line of 5 MiB is not one a run writes (its texts are cut far
    shorter), and is refused before it is parsed."""
    lines = (doctored / "results.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["message"] = "x" * 5 * 2**20
    (doctored / "results.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    assert _report(tmp_path, doctored) == 2
    _one_line_error(capsys, str(doctored / "results.jsonl"), "line 1", "longer than")


def _chain(tmp_path, length: int) -> None:
    """Profiles p0 -> p1 -> ... -> p{length-1}, each extending the next; the last one extends nothing."""
    for i in range(length):
        parent = f"extends: p{i + 1}\n" if i + 1 < length else ""
        (tmp_path / f"p{i}.yaml").write_text(f"framework: p{i}\n{parent}deviations: []\n")


def test_a_chain_of_extends_has_a_stated_depth_and_no_recursion(tmp_path, spec):
    """A chain of 2,001 profiles was followed by recursion, into a RecursionError; a chain now holds at most 16
    profiles, the port's own included (docs/guide/ports.md), and the profile that extends past them is named."""
    from conformance.core.errors import SpecError
    from conformance.judge.profiles import load_profile

    _chain(tmp_path, 16)
    assert load_profile("p0", spec, tmp_path) == []
    _chain(tmp_path, 2001)
    with pytest.raises(SpecError) as info:
        load_profile("p0", spec, tmp_path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(str(tmp_path / "p15.yaml") + ": extends: ")
    assert "more than 16 profiles" in text and "Fix:" in text


def test_a_case_file_of_more_values_than_its_limit_is_refused_while_parsed(tmp_path, capsys):
    """A case file's values are counted as the parser makes them: one shape of millions of values used to be
    parsed for many minutes and gigabytes before anything looked at it. The limit, 500,000 values, is
    docs/guide/cases.md's."""
    cases = tmp_path / "big.yaml"
    cases.write_text("- id: big\n  input: [" + ",".join(["0"] * 500_000) + "]\n  target: 0.5\n")
    assert main(["cases", "--count", "--cases", str(cases), "--suite", "none"]) == 2
    _one_line_error(capsys, str(cases), "more than 500000 values", "split the file")


def test_a_case_file_of_more_cases_than_its_limit_is_refused(tmp_path, capsys):
    """10,000 cases a file at most (docs/guide/cases.md)."""
    cases = tmp_path / "many.yaml"
    cases.write_text("".join(f"- {{id: c{i}, input: 0, target: 0}}\n" for i in range(10_001)))
    assert main(["cases", "--count", "--cases", str(cases), "--suite", "none"]) == 2
    _one_line_error(capsys, str(cases), "10001 cases, more than the 10000 a case file may hold")


@pytest.mark.parametrize("text, words", [
    ("- {id: a, input: !!float abc, target: 0.5}\n", "'abc' is not a number"),
    ("- {id: a, input: !!int 1.5, target: 0.5}\n", "'1.5' is not an integer"),
])
def test_an_explicit_number_tag_on_other_text_is_one_line(tmp_path, capsys, text, words):
    """`!!float abc` reached float() and escaped as a ValueError traceback."""
    cases = tmp_path / "tagged.yaml"
    cases.write_text(text)
    assert main(["cases", "--count", "--cases", str(cases), "--suite", "none"]) == 2
    _one_line_error(capsys, str(cases), "line 1", words)
