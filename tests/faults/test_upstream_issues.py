"""Known upstream issues (issue 38, item 4): a profile's `upstream:` entries, read by the core so that the
reports can link a defect to its issue without importing the judge, checked by the schema and, when the run
loads the profile, against the spec."""

import subprocess
import sys

import pytest

from conformance.core.errors import SpecError
from conformance.core.upstream import upstream_issues
from conformance.judge.profiles import load_profile

ISSUE = ("  - {url: 'https://github.com/o/r/issues/1', state: %s, title: t, cause: %s%s}\n")


def _profile(tmp_path, state="open", cause="gradients.conventions.target_zero", extra=""):
    (tmp_path / "torch.yaml").write_text("framework: torch\ndeviations: []\nupstream:\n" + ISSUE % (state, cause, extra))
    return tmp_path


def test_an_entry_is_read_with_its_state_cause_and_parts(tmp_path, spec):
    _profile(tmp_path, "fixed", "gradients.conventions.target_zero", ", fixed_in: '2.1', parts: [grad_target]")
    (issue,) = upstream_issues("torch", tmp_path)
    assert (issue.framework, issue.url, issue.state, issue.fixed_in) == ("torch", "https://github.com/o/r/issues/1",
                                                                         "fixed", "2.1")
    assert issue.covers("gradients.conventions.target_zero", "grad_target")
    assert not issue.covers("gradients.conventions.target_zero", "forward")
    assert not issue.covers("pointwise.conventions.target_zero", "grad_target")
    assert load_profile("torch", spec, tmp_path) == []  # the run's loader takes it too


def test_an_entry_with_modes_covers_a_defect_only_where_each_of_its_modes_matches(tmp_path, spec):
    """Dynamo's TorchRuntimeError has the cause eager's documented RuntimeError has (errors.integral_dtype): an
    issue about the compiler's behaviour must not be linked to eager's documented defect, nor to a defect that
    also shows in a mode the issue does not concern."""
    _profile(tmp_path, "open", "errors.integral_dtype", ", parts: [forward], modes: ['inductor*', onnx-dynamo]")
    (issue,) = upstream_issues("torch", tmp_path)
    assert issue.modes == ("inductor*", "onnx-dynamo")
    assert issue.covers("errors.integral_dtype", "forward", ["inductor", "inductor-emulated", "onnx-dynamo"])
    assert not issue.covers("errors.integral_dtype", "forward", ["eager"])
    assert not issue.covers("errors.integral_dtype", "forward", ["inductor", "onnx-torchscript"])
    assert load_profile("torch", spec, tmp_path) == []
    _profile(tmp_path, "open", "errors.integral_dtype", ", modes: []")
    with pytest.raises(SpecError, match=r"upstream\[0\]"):
        upstream_issues("torch", tmp_path)


def test_the_report_links_the_compilers_issue_to_the_compiled_defect_and_not_to_eagers():
    from conformance.report.defects import Defects
    from tests.helpers import make_result

    eager = make_result(case_id="e", verdict="error", cause="errors.integral_dtype", documented=True,
                        documented_by=("dev",))
    compiled = make_result(case_id="i", verdict="error", cause="errors.integral_dtype", mode="inductor")
    defects = Defects([eager, compiled])
    linked = {d.example.mode: defects.upstream(d) for d in defects.ordered()}
    assert linked["eager"] is None
    assert linked["inductor"].url == "https://github.com/pytorch/pytorch/issues/148475"


@pytest.mark.parametrize("state, extra, words", [
    ("fixed", "", "'fixed_in' is a required property"),  # a fix names its release
    ("open", ", fixed_in: '2.1'", "should not be valid"),  # only a fix has one
    ("wontfix", "", "'wontfix' is not one of"),
    ("open", ", parts: [backward]", "'backward' is not one of"),
])
def test_a_malformed_entry_is_refused_naming_the_file_and_field(tmp_path, state, extra, words):
    _profile(tmp_path, state, "gradients.conventions.target_zero", extra)
    with pytest.raises(SpecError) as info:
        upstream_issues("torch", tmp_path)
    text = str(info.value)
    assert text.startswith(str(tmp_path / "torch.yaml")) and "upstream[0]" in text and words in text


def test_a_cause_the_spec_does_not_have_is_refused_when_the_run_loads_the_profile(tmp_path, spec):
    _profile(tmp_path, "open", "gradients.conventions.target_zeroo")
    with pytest.raises(SpecError, match=r"upstream\[0\]\.cause: cause 'gradients\.conventions\.target_zeroo' is not "
                                        r"a path of the spec"):
        load_profile("torch", spec, tmp_path)


def test_causes_joined_and_errors_by_id_are_accepted(tmp_path, spec):
    _profile(tmp_path, "open", "gradients.conventions.target_zero + gradients.conventions.infinite_input")
    load_profile("torch", spec, tmp_path)
    _profile(tmp_path, "open", "errors.integral_dtype")
    load_profile("torch", spec, tmp_path)
    _profile(tmp_path, "open", "errors.no_such_error")
    with pytest.raises(SpecError, match="is not a path of the spec"):
        load_profile("torch", spec, tmp_path)


def test_no_profile_means_no_known_issue(tmp_path):
    assert upstream_issues("nosuch", tmp_path) == []


def test_the_shipped_entries_load(spec):
    issues = upstream_issues("torch")
    assert any(i.url == "https://github.com/pytorch/pytorch/issues/89558" and i.state == "closed-by-design"
               for i in issues)
    for framework in ("torch", "rtorch", "optax"):
        load_profile(framework, spec)


def test_the_reports_read_them_without_the_judge():
    """The report wing imports the core only: reading upstream issues must not pull in the judge."""
    code = ("import sys; from conformance.core.upstream import upstream_issues; upstream_issues('torch'); "
            "print(sorted(m for m in sys.modules if m.startswith('conformance.') and not m.startswith("
            "('conformance.core', 'conformance.spec'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
