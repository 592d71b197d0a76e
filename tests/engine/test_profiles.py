"""Deviation profiles: validated, and applied only to their APIs."""

from __future__ import annotations

import pytest

from conformance.core.errors import SpecError
from conformance.judge.profiles import DeviationLedger, apply_deviations, load_profile


@pytest.mark.parametrize("name", ["torch", "oneflow", "mindspore"])
def test_shipped_profiles_are_valid(spec, name):
    deviations = load_profile(name, spec)
    assert deviations and all(d.reference.startswith("http") for d in deviations)


@pytest.mark.parametrize("body, words", [
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {reductions.batchmean.divisor: rows}, "
     "rationale: r, basis: docs, reference: 'https://x'}\n", "'rows' is not a choice the spec lists"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {no.such.path: y}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n", "'no.such.path' is not a choice point"),
    # a set: key is a choice point's path, without `.choice` (spec version 2); spec paths that are no
    # choice point are refused at load, not when the run applies them
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {gradients.conventions.nan_propagation.choice: "
     "formula}, rationale: r, basis: docs, reference: 'https://x'}\n", "'gradients.conventions.nan_propagation.choice' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {tolerance.pointwise.factor: '9'}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n", "'tolerance.pointwise.factor' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {pointwise.conventions: zero}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n", "'pointwise.conventions' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], exceptions: {typo: RuntimeError}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n", "unknown error id 'typo'"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {shapes.broadcasting: none}, rationale: r, basis: docs}\n",
     "'reference' is a required property"),
    # rows name a deviation by its id (documented_by): two with one id would make that ambiguous
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {shapes.broadcasting: none}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n- {id: x, apis: [b], set: {shapes.broadcasting: none}, rationale: r, basis: docs, "
     "reference: 'https://x'}\n", "deviations[1].id: duplicate deviation id 'x'"),
])
def test_bad_profiles_name_file_and_field(tmp_path, spec, body, words):
    (tmp_path / "torch.yaml").write_text(body)
    with pytest.raises(SpecError) as info:
        load_profile("torch", spec, tmp_path)
    assert str(info.value).startswith(str(tmp_path / "torch.yaml")) and words in str(info.value)


def test_apply_deviations_changes_only_what_it_declares(spec):
    (deviation,) = [d for d in load_profile("torch", spec) if d.id == "batchmean-divides-by-input-dim0"]
    changed = apply_deviations(spec, [deviation])
    assert changed.data["reductions"]["batchmean"]["divisor"]["choice"] == "input_dim0"
    assert changed.convention("target_zero") == spec.convention("target_zero")
    assert changed.hash != spec.hash


def test_a_set_key_names_the_choice_point_and_applies_to_its_choice(tmp_path, spec):
    (tmp_path / "torch.yaml").write_text(
        "framework: torch\ndeviations:\n- {id: x, apis: [a], set: {gradients.conventions.nan_propagation: formula},"
        " rationale: r, basis: docs, reference: 'https://x'}\n")
    changed = apply_deviations(spec, load_profile("torch", spec, tmp_path))
    assert changed.data["gradients"]["conventions"]["nan_propagation"]["choice"] == "formula"
    assert set(changed.data["gradients"]["conventions"]["nan_propagation"]) == \
        set(spec.data["gradients"]["conventions"]["nan_propagation"])


def test_a_refused_set_key_lists_the_choice_points(tmp_path, spec):
    from conformance.core.choices import choice_points

    (tmp_path / "torch.yaml").write_text("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {dtypes.mixeds: "
                                         "reject}, rationale: r, basis: docs, reference: 'https://x'}\n")
    with pytest.raises(SpecError) as info:
        load_profile("torch", spec, tmp_path)
    text = str(info.value)
    assert "\n" not in text and "deviations[0].set" in text
    assert all(point in text for point in choice_points(spec.data))


PORT_DEVIATION = ("- {id: own, apis: [port.kl_div], set: {shapes.broadcasting: none}, rationale: r, basis: docs, "
                  "reference: 'https://x'}\n")


def test_extends_inherits_the_frameworks_deviations_named_by_framework(tmp_path, spec):
    """A port's profile says `extends: torch`: torch's deviations are the port's too, each "torch:<id>"."""
    (tmp_path / "port.yaml").write_text("framework: port\nextends: torch\ndeviations:\n" + PORT_DEVIATION)
    deviations = load_profile("port", spec, tmp_path)
    torch_ids = [d.id for d in load_profile("torch", spec)]
    assert [d.id for d in deviations] == ["own", *(f"torch:{i}" for i in torch_ids)]
    assert {d.of for d in deviations[1:]} == {"torch"} and deviations[0].of == ""


def test_inherited_deviations_apply_to_the_apis_that_mirror_theirs(tmp_path, spec):
    """An inherited deviation names torch's APIs: it applies to the port API that mirrors one of them (by
    default the API of the same name), never to the others."""
    from conformance.judge.profiles import DeviationLedger

    (tmp_path / "port.yaml").write_text("framework: port\nextends: torch\ndeviations:\n" + PORT_DEVIATION)
    apis = ["port.kl_div", "torch.nn.KLDivLoss", "port.other"]
    ledger = DeviationLedger(spec, "port", apis, tmp_path, mirrors={"port.kl_div": "torch.nn.functional.kl_div"})
    torch_ids = {f"torch:{d.id}" for d in load_profile("torch", spec)}
    assert {d.id for d in ledger.by_api["port.kl_div"]} == torch_ids | {"own"}
    assert {d.id for d in ledger.by_api["torch.nn.KLDivLoss"]} == torch_ids
    assert ledger.by_api["port.other"] == ()


def test_like_adds_a_frameworks_deviations_without_a_profile(spec, tmp_path):
    from conformance.judge.profiles import DeviationLedger

    plain = DeviationLedger(spec, "port", ["torch.nn.KLDivLoss"], tmp_path)
    like = DeviationLedger(spec, "port", ["torch.nn.KLDivLoss"], tmp_path, like="torch")
    assert plain.by_api["torch.nn.KLDivLoss"] == ()
    assert {d.id for d in like.by_api["torch.nn.KLDivLoss"]} == {f"torch:{d.id}" for d in load_profile("torch", spec)}


@pytest.mark.parametrize("files, words", [
    ({"port.yaml": "framework: port\nextends: nosuch\ndeviations: []\n"},
     "extends 'nosuch', a framework without a profile"),
    ({"port.yaml": "framework: port\nextends: mid\ndeviations: []\n",
      "mid.yaml": "framework: mid\nextends: port\ndeviations: []\n"}, "extends makes a cycle (port -> mid -> port)"),
    ({"port.yaml": "framework: port\nextends: port\ndeviations: []\n"}, "extends makes a cycle (port -> port)"),
    ({"port.yaml": "framework: port\nextends: 'to/rch'\ndeviations: []\n"}, "does not match"),
])
def test_bad_extends_is_one_line_naming_the_file(tmp_path, spec, files, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(SpecError) as info:
        load_profile("port", spec, tmp_path)
    text = str(info.value)
    assert "\n" not in text and words in text and "extends" in text and str(tmp_path) in text


def test_a_carried_profile_is_used_where_no_file_is(spec, tmp_path):
    """An adapter outside the repository carries its profile (a dict or a file): it is read without --profiles,
    and a file of the same name in --profiles comes first."""
    carried = {"framework": "port", "extends": "torch", "deviations": []}
    assert [d.id for d in load_profile("port", spec, carried=carried)] == \
        [f"torch:{d.id}" for d in load_profile("torch", spec)]
    (tmp_path / "port.yaml").write_text("framework: port\ndeviations:\n" + PORT_DEVIATION)
    assert [d.id for d in load_profile("port", spec, tmp_path, carried=carried)] == ["own"]


def test_the_ports_guide_profile_loads(tmp_path, spec):
    """docs/guide/ports.md's example of a port's profile is one the loader takes, and it inherits torch's."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "ports.md").read_text(encoding="utf-8")
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mytorch.yaml").write_text(example)
    ids = [d.id for d in load_profile("mytorch", spec, tmp_path)]
    assert ids == ["float16-computed-in-float32", *(f"torch:{d.id}" for d in load_profile("torch", spec))]


def test_optax_documents_targets_outside_kl_divergences_domain_in_every_mode(spec):
    """optax documents kl_divergence's targets as "Expected to be strictly positive": zero and negative targets
    are outside that domain in eager and jit alike; kl_divergence_with_log_targets states no such domain. JAX's
    X64 flag makes both functions' Python floats float64, and XLA's CPU arithmetic flushes subnormals, as JAX
    documents."""
    probs, logs = "optax.losses.kl_divergence", "optax.losses.kl_divergence_with_log_targets"
    ledger = DeviationLedger(spec, "optax", [probs, logs])
    for mode in ("eager", "jit"):
        declared = ledger.declared(probs, mode)
        assert {d.id for d in declared} == {"zero-target-outside-the-documented-domain",
                                            "negative-target-outside-the-documented-domain",
                                            "python-floats-are-float64-under-x64", "xla-flushes-subnormals"}, mode
        assert {d.basis for d in declared if d.id.endswith("-domain")} == {"domain"}
        changed = apply_deviations(spec, list(declared))
        conventions = changed.data["pointwise"]["conventions"], changed.data["gradients"]["conventions"]
        assert conventions[0]["target_zero"]["choice"] == "ieee"
        assert conventions[1]["target_zero"]["choice"] == "nan"
        assert conventions[1]["target_negative"]["choice"] == "formula"
        assert conventions[0]["log_target_neg_inf"]["choice"] == spec.data["pointwise"]["conventions"][
            "log_target_neg_inf"]["choice"]
        # JAX's X64 flag and XLA's flush-to-zero are both functions'; the log-space one states no domain
        assert {d.id for d in ledger.declared(logs, mode)} == {"python-floats-are-float64-under-x64",
                                                               "xla-flushes-subnormals"}
        assert changed.data["dtypes"]["inferred"]["python_float"]["choice"] == "float64"
        assert changed.data["dtypes"]["subnormals"]["choice"] == "flushed"
        assert {d.basis for d in declared if d.id == "xla-flushes-subnormals"} == {"docs"}


def test_an_exception_type_may_be_namespaced_as_r_torch_raises_it():
    """R torch passes every libtorch error on as `Rcpp::exception`: the schema refused that type, so R torch's
    profile could not state libtorch's documented refusals."""
    import jsonschema

    from conformance.core.specload import load_schema

    schema = load_schema("profile.schema.json")
    entry = {"framework": "rtorch", "deviations": [{
        "id": "x", "apis": ["torch::nnf_kl_div"], "exceptions": {"integral_dtype": {"type": "Rcpp::exception", "match": "^kl_div"}},
        "rationale": "r", "basis": "maintainers", "reference": "https://github.com/pytorch/pytorch/pull/82714"}]}
    jsonschema.validate(entry, schema)
    entry["deviations"][0]["exceptions"]["integral_dtype"]["type"] = "Rcpp::"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(entry, schema)


def test_a_deviation_limited_to_devices_dtypes_and_parts_documents_those_calls_only(tmp_path, spec):
    """Keras on torch under jit: Inductor's float32 gradients of float16 calls are torch's statement, not Keras' on
    another backend, nor of its float64 calls or its loss. An entry says so with `device`, `dtypes` and `parts`;
    an inherited one keeps them."""
    from tests.helpers import make_case

    (tmp_path / "port.yaml").write_text(
        "framework: port\ndeviations:\n- {id: narrow, apis: [port.kl_div], set: {dtypes.computation: float32}, "
        "rationale: r, basis: maintainers, reference: 'https://x', mode: jit, device: 'torch:*', "
        "dtypes: [float16, bfloat16], parts: [grad_input, grad_target]}\n")
    ledger = DeviationLedger(spec, "port", ["port.kl_div"], tmp_path)
    half, wide = make_case([-1.0], [0.5], dtype="float16"), make_case([-1.0], [0.5], dtype="float64")
    mixed = make_case([-1.0], [0.5], dtype=("float64", "float16"))

    def ids(mode="jit", device="torch:cpu", case=half, part="grad_input"):
        return [d.id for d in ledger.declared("port.kl_div", mode, device, case, part)]
    assert ids() == ids(part="grad_target") == ids(case=make_case([-1.0], [0.5], dtype="bfloat16")) == ["narrow"]
    assert ids(mode="eager") == ids(device="jax:cpu") == ids(case=wide) == ids(case=mixed) == ids(part="forward") == []
    assert ledger.spec_for("port.kl_div", "jit", device="jax:cpu", case=half, part="grad_input").hash == spec.hash
    (tmp_path / "heir.yaml").write_text("framework: heir\nextends: port\ndeviations: []\n")
    (inherited,) = load_profile("heir", spec, tmp_path)
    assert (inherited.device, inherited.dtypes, inherited.parts) == ("torch:*", ("float16", "bfloat16"),
                                                                     ("grad_input", "grad_target"))


@pytest.mark.parametrize("field, value", [("device", "''"), ("dtypes", "[float8]"), ("parts", "[grad3]"),
                                          ("dtypes", "[]")])
def test_a_deviations_limits_are_checked(tmp_path, spec, field, value):
    (tmp_path / "port.yaml").write_text(
        f"framework: port\ndeviations:\n- {{id: x, apis: [port.kl_div], set: {{dtypes.computation: float32}}, "
        f"rationale: r, basis: docs, reference: 'https://x', {field}: {value}}}\n")
    with pytest.raises(SpecError) as info:
        load_profile("port", spec, tmp_path)
    assert str(info.value).startswith(str(tmp_path / "port.yaml")) and field in str(info.value)
