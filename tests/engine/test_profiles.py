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
     "reference: 'https://x'}\n", "no.such.path = 'y' is not a choice"),
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
    assert changed.data["reductions"]["batchmean"]["divisor"] == "input_dim0"
    assert changed.convention("target_zero") == spec.convention("target_zero")
    assert changed.hash != spec.hash
