"""Hostile inputs: every YAML, number, formula, profile and cache entry the harness reads is bounded, and
a bad one is one line naming the file and the place, exit 2, never a hang, a traceback or a pass."""

from __future__ import annotations

import re

import pytest

from conformance.cli import main
from conformance.core.errors import CaseFileError, SpecError
from conformance.core.specload import default_spec_path, load_spec
from conformance.judge.profiles import load_profile
from conformance.cases.userfile import load_case_file


def _laughs(levels: int = 9) -> str:
    """The "billion laughs" case file: each level holds nine aliases of the one before."""
    lines = ["- id: laughs", '  target: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]']
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    lines.append(f"  input: *l{levels - 1}")
    return "\n".join(lines) + "\n"


def _one_line_exit_2(capsys, args, *words) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "Fix:" in err, err
    for word in words:
        assert word in err, err
    return err


def test_billion_laughs_case_file_is_refused_at_load(tmp_path, capsys):
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs())
    assert len(path.read_bytes()) < 600
    _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "aliases", "line ")


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("- &a {id: loop, input: [1.0], target: [0.5], note: *a}\n")
    with pytest.raises(CaseFileError, match="recursive alias"):
        load_case_file(path)


@pytest.mark.parametrize("literal", ["1" * 4301, "-" + "9" * 5000, "0x" + "f" * 4000, "0o" + "7" * 6000])
def test_integers_beyond_pythons_limit_are_refused(tmp_path, capsys, literal):
    path = tmp_path / "big.yaml"
    path.write_text(f"- id: big\n  input: [{literal}]\n  target: [0.5]\n")
    _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "decimal digits",
                     "line 2")


def test_a_lone_surrogate_in_a_case_id_is_refused_at_load(tmp_path, capsys):
    path = tmp_path / "surrogate.yaml"
    path.write_text('- id: "a\\ud800b"\n  input: [-1.0]\n  target: [0.5]\n')
    for args in (["cases", "--cases", str(path), "--suite", "none"],
                 ["cases", "--cases", str(path), "--suite", "none", "--shard", "1/2"]):
        _one_line_exit_2(capsys, args, str(path), "surrogate", "line 1")


def _spec_with(tmp_path, old: str, new: str, name: str = "spec.yaml", raw: bytes | None = None):
    text = default_spec_path().read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / name
    if raw is not None:
        path.write_bytes(text.replace(old, "").encode("utf-8").replace(b"#MARK", raw))
    path.write_text(text.replace(old, new, 1), encoding="utf-8") if raw is None else None
    return path


@pytest.mark.parametrize("old, new, words", [
    ("    factor: 8\n", "    factor: .nan\n", "not finite"),
    ("    factor: 8\n", "    factor: .inf\n", "not finite"),
    ("    factor: 8\n", "    factor: 8\n    factor: 9\n", "given twice"),
    ("    factor: 8\n", "    factor: " + "9" * 5000 + "\n", "decimal digits"),
    # libyaml refuses the escape itself; PyYAML's own parser reads it, and the loader refuses the string
    ("    factor: 8\n", '    factor: 8\n    extra: "\\udc00"\n', "surrogate|invalid Unicode"),
])
def test_hostile_specs_are_refused(tmp_path, capsys, old, new, words):
    path = _spec_with(tmp_path, old, new)
    with pytest.raises(SpecError, match=words):
        load_spec(path)
    err = _one_line_exit_2(capsys, ["--spec", str(path), "cases", "--count"], str(path))
    assert re.search(words, err), err


def test_a_spec_and_a_profile_that_are_not_utf8_are_named(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(default_spec_path().read_bytes().replace(b"Cover & Thomas", b"Cover \xe9 Thomas"))
    _one_line_exit_2(capsys, ["--spec", str(spec), "cases", "--count"], str(spec), "not UTF-8", "line 25")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "torch.yaml").write_bytes((default_spec_path().parent / "profiles" / "torch.yaml").read_bytes()
                                          + b"# caf\xe9\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_profile("torch", load_spec(), profiles)


@pytest.mark.parametrize("dtype, value", [("int8", "128"), ("int8", "-129"), ("uint8", "-1"), ("uint8", "256.0"),
                                          ("int16", "40000"), ("int32", "2147483648"),
                                          ("int64", "9223372036854775808"), ("int64", "-1e19")])
def test_integers_outside_the_dtypes_range_are_refused(tmp_path, capsys, dtype, value):
    path = tmp_path / "range.yaml"
    path.write_text(f"- id: wraps\n  dtype: {{input: float32, target: {dtype}}}\n  input: [-1.0, -2.0]\n"
                    f"  target: [1, {value}]\n")
    err = _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "case 'wraps'",
                           "field 'target'", "range")
    assert "choose a wider dtype" in err


def test_integers_at_the_ends_of_the_range_load(tmp_path):
    path = tmp_path / "ends.yaml"
    path.write_text("- {id: ends, dtype: {input: float32, target: int8}, input: [-1.0, -2.0], target: [-128, 127]}\n")
    assert load_case_file(path)[0].target.tolist() == [-128.0, 127.0]
