"""Known-findings files: validated with one-line messages; entries match by glob and selector."""

from __future__ import annotations

import pytest

from conformance.core.errors import KnownFileError
from conformance.core.known import load_known
from tests.helpers import make_result


def _load(tmp_path, text):
    path = tmp_path / "known.yaml"
    path.write_text(text)
    return path, load_known(path)


@pytest.mark.parametrize("text, where, words", [
    ("{id: a}\n", None, "expected a YAML list of entries"),
    ("- just-a-string\n", "entry 1", "expected a mapping"),
    ("- {id: a, case_id: '*'}\n", "entry 1, field 'reason'", "missing field 'reason'"),
    ("- {id: a, case_id: '*', reason: r, colour: red}\n", "entry 1, field 'colour'", "unknown field 'colour'"),
    ("- {id: a, case_id: '*', reason: r, part: fwd}\n", "entry 1, field 'part'", "unknown part 'fwd'"),
    ("- {id: a, case_id: '*', reason: r, verdict: pass}\n", "entry 1, field 'verdict'", "not a divergence verdict"),
    ("- {id: a, case_id: 5, reason: r}\n", "entry 1, field 'case_id'", "non-empty string"),
    ("- {id: a, case_id: '*', reason: r}\n- {id: a, case_id: 'x', reason: r}\n", "entry 2, field 'id'",
     "duplicate id 'a'"),
    ("- {id: a, case_id: '*', reason: r, reason: s}\n", "line 1", "given twice"),
])
def test_bad_entries_name_file_entry_and_field(tmp_path, text, where, words):
    path = tmp_path / "known.yaml"
    path.write_text(text)
    with pytest.raises(KnownFileError) as info:
        load_known(path)
    message = str(info.value)
    assert message.startswith(str(path)) and words in message and "Fix:" in message, message
    if where:
        assert where in message, message


def test_entries_match_by_glob_and_every_given_selector(tmp_path):
    _, known = _load(tmp_path, """
- id: onehot-forward
  case_id: "fwd/*/onehot/*"
  framework: torch
  api: "torch.nn.*"
  part: forward
  verdict: nonfinite
  reason: r
- id: all-torch
  case_id: "*"
  framework: torch
  reason: r
  link: https://example.org/issue
""")
    onehot = "fwd/sum/log_target=1/4x6/float32/onehot/s0"
    hit = make_result(onehot, verdict="nonfinite", api="torch.nn.KLDivLoss")
    assert known.mark(hit).known_by == ("onehot-forward", "all-torch")
    assert known.mark(make_result(onehot, verdict="value", api="torch.nn.KLDivLoss")).known_by == ("all-torch",)
    assert known.mark(make_result(onehot, verdict="nonfinite", part="grad_input")).known_by == ("all-torch",)
    assert known.mark(make_result(onehot, verdict="nonfinite", framework="oneflow")).known_by == ()
    assert known.mark(make_result(onehot, verdict="pass")).known_by == ()  # a pass is never "known"
    assert known.mark(make_result(onehot, verdict="unsupported")).known_by == ()


def test_cause_narrows_an_entry_to_one_finding(tmp_path):
    _, known = _load(tmp_path, "- {id: neg-inf, case_id: '*', cause: 'pointwise.conventions.log_target_*', "
                               "reason: r}\n")
    same = make_result(verdict="nonfinite", cause="pointwise.conventions.log_target_neg_inf")
    other = make_result(verdict="nonfinite", cause="pointwise.conventions.target_zero")
    assert known.mark(same).known_by == ("neg-inf",) and known.mark(other).known_by == ()


def test_stale_means_concerned_but_accepting_nothing(tmp_path):
    _, known = _load(tmp_path, "- {id: fixed, case_id: 'a*', reason: r}\n- {id: elsewhere, case_id: 'z*', reason: r}\n"
                               "- {id: live, case_id: 'b*', reason: r}\n")
    rows = [make_result("a1"), make_result("a2"), make_result("b1", verdict="value")]
    known.start_audit()
    for row in rows:
        known.audit_row(row)
    assert {a.entry.id: a.status for a in known.audit()} == \
        {"fixed": "stale", "elsewhere": "not in these results", "live": "matched"}
    assert [a.entry.id for a in known.stale()] == ["fixed"]
    assert "entry 1 (id 'fixed'): stale: matches none of the 2 results it concerns" in \
        known.stale_message(known.stale()[0])


def test_an_empty_list_is_a_valid_file(tmp_path):
    _, known = _load(tmp_path, "[]\n")
    assert known.entries == [] and known.mark(make_result(verdict="value")).known_by == ()


def test_entries_are_numbered_from_1_as_a_user_counts_them(tmp_path):
    """Messages said "entry 2" of a file's third item: they count from 1, as an editor's reader does."""
    path = tmp_path / "known.yaml"
    path.write_text("- {id: a, case_id: '*', reason: r}\n- {id: b, case_id: '*', reason: r}\n- {id: c, case_id: '*'}\n")
    with pytest.raises(KnownFileError, match=r": entry 3, field 'reason': missing field 'reason'"):
        load_known(path)
