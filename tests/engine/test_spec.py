"""The spec file: the shipped one validates; a malformed one fails with file, YAML path and fix."""

from __future__ import annotations

import pytest
import yaml

from conformance.cli import main
from conformance.core.errors import SpecError
from conformance.core.specload import default_spec_path, load_spec


def _mutated(tmp_path, mutate):
    data = yaml.safe_load(default_spec_path().read_text())
    mutate(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_spec_is_valid_and_hashed():
    spec = load_spec()
    assert len(spec.hash) == 16 and spec.convention("target_zero") == "zero"


def test_spec_and_profiles_load_as_pure_python_pyyaml_loads_them():
    """The fast loader (libyaml's parser, where PyYAML has it) reads the shipped spec and every profile
    exactly as PyYAML's own SafeLoader does: the same data, so the same spec hash."""
    from conformance.core.specload import SAFE_LOADER, parse_yaml

    paths = [default_spec_path(), *sorted((default_spec_path().parent / "profiles").glob("*.yaml"))]
    assert len(paths) > 1
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert parse_yaml(text, str(path), SpecError) == yaml.load(text, Loader=yaml.SafeLoader), path
    # where PyYAML was built with libyaml, the fast parser is the one in use
    assert SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def test_hash_ignores_layout_but_not_meaning(tmp_path):
    same = tmp_path / "same.yaml"
    same.write_text("# a comment\n" + default_spec_path().read_text())
    assert load_spec(same).hash == load_spec().hash
    changed = _mutated(tmp_path, lambda d: d["tolerance"]["pointwise"].update(factor=9))
    assert load_spec(changed).hash != load_spec().hash


@pytest.mark.parametrize("mutate, where, words", [
    (lambda d: d["reductions"]["batchmean"]["divisor"].update(choice="rows"), "reductions.batchmean.divisor.choice",
     "'rows' is not one of its choices"),
    # a choice point has one shape, {choice, choices} (spec version 2)
    (lambda d: d["shapes"].update(broadcasting="numpy"), "shapes.broadcasting", "is not of type 'object'"),
    (lambda d: d["dtypes"]["mixed"].update(mixeds={"promote": "x"}), "dtypes.mixed", "Additional properties"),
    (lambda d: d["dtypes"]["mixed"].update(choices={"promote": 3, "reject": "x"}), "dtypes.mixed.choices.promote",
     "not of type"),
    (lambda d: d["reductions"]["mean"].update(divisor="batch"), "reductions.mean.divisor", "'numel' was expected"),
    (lambda d: d["pointwise"]["conventions"]["target_zero"].update(choice="maybe"), "pointwise.conventions.target_zero.choice", "'maybe'"),
    (lambda d: d["tolerance"].pop("pointwise"), "tolerance", "'pointwise' is a required property"),
    (lambda d: d["errors"][0].update(exception=3), "errors[0].exception", "not of type"),
    (lambda d: d["dtypes"].update(colour="red"), "dtypes", "Additional properties"),
    (lambda d: d["dtypes"]["promotion"].pop(0), "dtypes.promotion", "no promotion row"),
    # the loader refuses a spec that states something false (issue 11: no decorative fields)
    (lambda d: d["dtypes"]["unit_roundoff"].update(float32=1e-7), "dtypes.unit_roundoff.float32",
     "the format's is 5.960464477539063e-08"),
    (lambda d: d["dtypes"]["smallest_subnormal"].update(bfloat16=1e-45), "dtypes.smallest_subnormal.bfloat16",
     "the format's is 9.183549615799121e-41"),
    (lambda d: d["dtypes"]["promotion"].append({"input": "float32", "target": "float16", "result": "float32"}),
     "dtypes.promotion[6]", "a second row"),
    (lambda d: d["dtypes"]["promotion"][0].update(result="bfloat16"), "dtypes.promotion[0]",
     "cannot hold every value"),
    (lambda d: d["tolerance"]["pointwise"].update(formula="factor * (u * magnitude + eps)"),
     "tolerance.pointwise.formula", "unknown name 'eps'"),
    (lambda d: d["tolerance"]["reduction"].update(gamma="__import__('os')"), "tolerance.reduction.gamma",
     "a call of something other than a listed function"),
    (lambda d: d["gradients"]["log_target_true"]["terms"]["target"].append("exp(target).real"),
     "gradients.log_target_true.terms.target[3]", "Attribute is not allowed"),
    (lambda d: d["gradients"]["upstream"].update(reduced=1.0), "gradients.upstream",
     "every adapter and reproducer applies"),
    (lambda d: d["warnings"]["expected"][0].update(when="reduction is mean"), "warnings.expected[0].when",
     "is not of type 'object'"),
    # a documents_only alternative must be one the point lists, and not its own choice
    (lambda d: d["gradients"]["conventions"]["nan_propagation"].update(documents_only=["anything"]),
     "gradients.conventions.nan_propagation.documents_only", "'anything', which is not one of the alternatives"),
    (lambda d: d["gradients"]["conventions"]["nan_propagation"].update(documents_only=["propagate"]),
     "gradients.conventions.nan_propagation.documents_only", "'propagate', which is not one of the alternatives"),
    # the spec says whether a zero's sign matters; the comparator knows only `never`
    (lambda d: d["tolerance"]["comparison"].pop("signed_zero"), "tolerance.comparison",
     "'signed_zero' is a required property"),
    (lambda d: d["tolerance"]["comparison"]["signed_zero"].update(matters="always"),
     "tolerance.comparison.signed_zero.matters", "is not one of ['never']"),
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


@pytest.mark.parametrize("path, text", [
    (("pointwise", "log_target_false", "formula"), "target * (log(target) + input)"),
    (("pointwise", "log_target_true", "formula"), "exp(target) * target"),
    (("gradients", "log_target_false", "target"), "log(target) - input"),
    (("gradients", "second_order", "formula", "log_target_true"), "-exp(input)"),
])
def test_a_formula_the_reference_does_not_compute_is_refused(tmp_path, capsys, path, text):
    """A formula is a statement about the reference: one that disagrees with it is refused (exit 2)."""
    def mutate(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = text

    spec_path = _mutated(tmp_path, mutate)
    assert main(["--spec", str(spec_path), "cases", "--count"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ".".join(path) in err[0] and "the reference computes" in err[0], err


def test_the_tolerance_formulas_drive_the_bound(tmp_path):
    """Editing a tolerance formula changes the bound (the code reads it, it is not decoration)."""
    from conformance.reference.forward import expected_forward
    from tests.helpers import make_case

    case = make_case([-1.0, -2.0], [0.5, 0.25], reduction="sum", dtype="float32")
    base = expected_forward(case, load_spec())
    doubled = load_spec(_mutated(tmp_path, lambda d: d["tolerance"]["reduction"].update(
        formula="2 * ((sum_bounds + gamma * sum_abs) / divisor + 2 * u * abs(result))")))
    assert float(expected_forward(case, doubled).bound) == 2 * float(base.bound)


@pytest.mark.parametrize("change", ["drop", "add"])
def test_every_choice_point_has_a_touches_test_and_no_other(tmp_path, monkeypatch, change):
    """The spec's {choice, choices} nodes are the choice points; conformance/core/choices.py's `touches`
    tests are keyed by them, and the loader refuses a spec and a table that disagree."""
    from conformance.core import choices

    touches = dict(choices.TOUCHES)
    if change == "drop":
        touches.pop("dtypes.mixed")
    else:
        touches["dtypes.colour"] = lambda case, x, t: True
    monkeypatch.setattr(choices, "TOUCHES", touches)
    with pytest.raises(SpecError) as info:
        load_spec()
    assert ("dtypes.mixed" if change == "drop" else "dtypes.colour") in str(info.value)
    assert "Fix:" in str(info.value)


def test_choice_points_are_the_specs_choice_nodes(spec):
    from conformance.core.choices import TOUCHES, choice_points, get_path

    assert sorted(choice_points(spec.data)) == sorted(TOUCHES)
    for path in choice_points(spec.data):
        node = get_path(spec.data, path)
        assert node["choice"] in node["choices"] and len(node["choices"]) >= 2
