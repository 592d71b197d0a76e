"""Each profile entry says on what basis the framework states it (issue 38, item 4): `basis` is docs,
maintainers or domain, and `reference` is where the framework states it."""

import pytest

from conformance.core.errors import SpecError
from conformance.judge.profiles import default_profiles_dir, load_profile


def test_a_deviation_without_a_basis_is_refused_naming_the_field(tmp_path, spec):
    (tmp_path / "torch.yaml").write_text("framework: torch\ndeviations:\n- {id: x, apis: [a], set: "
                                         "{shapes.broadcasting: none}, rationale: r, reference: 'https://x'}\n")
    with pytest.raises(SpecError) as info:
        load_profile("torch", spec, tmp_path)
    assert str(info.value).startswith(str(tmp_path / "torch.yaml")) and "'basis' is a required property" in str(info.value)


def test_a_basis_outside_the_three_is_refused(tmp_path, spec):
    (tmp_path / "torch.yaml").write_text("framework: torch\ndeviations:\n- {id: x, apis: [a], set: "
                                         "{shapes.broadcasting: none}, rationale: r, basis: folklore, "
                                         "reference: 'https://x'}\n")
    with pytest.raises(SpecError, match=r"deviations\[0\]\.basis.*'folklore' is not one of"):
        load_profile("torch", spec, tmp_path)


def test_the_basis_is_loaded_and_inherited_with_the_deviation(tmp_path, spec):
    (tmp_path / "port.yaml").write_text("framework: port\nextends: torch\ndeviations: []\n")
    own = {d.id: d.basis for d in load_profile("torch", spec)}
    inherited = {d.id: d.basis for d in load_profile("port", spec, tmp_path)}
    assert own["grad-target-nan-at-zero-target"] == "maintainers"
    assert inherited["torch:grad-target-nan-at-zero-target"] == "maintainers"
    assert inherited["torch:batchmean-divides-by-input-dim0"] == "docs"


@pytest.mark.parametrize("path", sorted(default_profiles_dir().glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_entry_cites_where_the_framework_states_it(spec, path):
    for deviation in load_profile(path.stem, spec):
        assert deviation.basis in ("docs", "maintainers", "domain")
        assert deviation.reference.startswith("https://"), deviation.id
        # a maintainer's statement is an issue or a pull request, or a design note of the framework's own docs
        if deviation.basis == "maintainers":
            assert "/issues/" in deviation.reference or "/pull/" in deviation.reference \
                or "/notes/" in deviation.reference, deviation.id
