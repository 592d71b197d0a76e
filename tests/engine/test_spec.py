"""The spec file: the shipped one validates; a malformed one fails with file, YAML path and fix."""

from __future__ import annotations

import pytest
import yaml

from conformance.cli import main
from conformance.errors import SpecError
from conformance.specload import default_spec_path, load_spec


def _mutated(tmp_path, mutate):
    data = yaml.safe_load(default_spec_path().read_text())
    mutate(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_spec_is_valid_and_hashed():
    spec = load_spec()
    assert len(spec.hash) == 16 and spec.convention("target_zero") == "zero"


def test_hash_ignores_layout_but_not_meaning(tmp_path):
    same = tmp_path / "same.yaml"
    same.write_text("# a comment\n" + default_spec_path().read_text())
    assert load_spec(same).hash == load_spec().hash
    changed = _mutated(tmp_path, lambda d: d["tolerance"]["pointwise"].update(factor=9))
    assert load_spec(changed).hash != load_spec().hash


@pytest.mark.parametrize("mutate, where, words", [
    (lambda d: d["reductions"]["batchmean"].update(divisor="rows"), "reductions.batchmean.divisor", "'rows' is not one of"),
    (lambda d: d["pointwise"]["conventions"]["target_zero"].update(choice="maybe"), "pointwise.conventions.target_zero.choice", "'maybe'"),
    (lambda d: d["tolerance"].pop("pointwise"), "tolerance", "'pointwise' is a required property"),
    (lambda d: d["errors"][0].update(exception=3), "errors[0].exception", "not of type"),
    (lambda d: d["dtypes"].update(colour="red"), "dtypes", "Additional properties"),
    (lambda d: d["dtypes"]["promotion"].pop(0), "dtypes.promotion", "no promotion row"),
])
def test_malformed_spec_names_the_yaml_path(tmp_path, mutate, where, words):
    path = _mutated(tmp_path, mutate)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {where}: "), message
    assert words in message and "Fix:" in message, message


def test_yaml_syntax_error_names_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: kl_div\nsignature: [unclosed\n")
    with pytest.raises(SpecError, match=r"line \d+, column \d+: invalid YAML"):
        load_spec(path)


def test_cli_exits_2_on_a_bad_spec_with_one_line(tmp_path, capsys):
    path = _mutated(tmp_path, lambda d: d["reductions"]["batchmean"].update(divisor="rows"))
    assert main(["--spec", str(path), "cases", "--count"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reductions.batchmean.divisor" in err[0] and "Traceback" not in err[0]
