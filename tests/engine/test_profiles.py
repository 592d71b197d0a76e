"""Deviation profiles: validated, and applied only to their APIs."""

from __future__ import annotations

import pytest

from conformance.core.errors import SpecError
from conformance.judge.profiles import apply_deviations, load_profile


@pytest.mark.parametrize("name", ["torch", "oneflow", "mindspore"])
def test_shipped_profiles_are_valid(spec, name):
    deviations = load_profile(name, spec)
    assert deviations and all(d.reference.startswith("http") for d in deviations)


@pytest.mark.parametrize("body, words", [
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {reductions.batchmean.divisor: rows}, "
     "rationale: r, reference: 'https://x'}\n", "'rows' is not a choice the spec lists"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {no.such.path: y}, rationale: r, "
     "reference: 'https://x'}\n", "'no.such.path' is not a choice point"),
    # a set: key is a choice point's path, without `.choice` (spec version 2); spec paths that are no
    # choice point are refused at load, not when the run applies them
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {gradients.conventions.nan_propagation.choice: "
     "formula}, rationale: r, reference: 'https://x'}\n", "'gradients.conventions.nan_propagation.choice' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {tolerance.pointwise.factor: '9'}, rationale: r, "
     "reference: 'https://x'}\n", "'tolerance.pointwise.factor' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {pointwise.conventions: zero}, rationale: r, "
     "reference: 'https://x'}\n", "'pointwise.conventions' is not a choice point"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], exceptions: {typo: RuntimeError}, rationale: r, "
     "reference: 'https://x'}\n", "unknown error id 'typo'"),
    ("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {shapes.broadcasting: none}, rationale: r}\n",
     "'reference' is a required property"),
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
        " rationale: r, reference: 'https://x'}\n")
    changed = apply_deviations(spec, load_profile("torch", spec, tmp_path))
    assert changed.data["gradients"]["conventions"]["nan_propagation"]["choice"] == "formula"
    assert set(changed.data["gradients"]["conventions"]["nan_propagation"]) == \
        set(spec.data["gradients"]["conventions"]["nan_propagation"])


def test_a_refused_set_key_lists_the_choice_points(tmp_path, spec):
    from conformance.core.choices import choice_points

    (tmp_path / "torch.yaml").write_text("framework: torch\ndeviations:\n- {id: x, apis: [a], set: {dtypes.mixeds: "
                                         "reject}, rationale: r, reference: 'https://x'}\n")
    with pytest.raises(SpecError) as info:
        load_profile("torch", spec, tmp_path)
    text = str(info.value)
    assert "\n" not in text and "deviations[0].set" in text
    assert all(point in text for point in choice_points(spec.data))
