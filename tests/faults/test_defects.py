"""Defects (core/defects.py, report/defects.py): each distinct behaviour of a framework release once, whatever
the API of one implementation, the part, the dtype or the mode that shows it; summary.json's `defects`, the
known-findings entries that name one, the simplest example and the snippet its draft shows."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import jsonschema

from conformance.cli import main
from conformance.core.defects import defect_of, residual_cause, root_cause
from conformance.core.results import iter_results
from conformance.core.specload import load_schema, load_spec
from conformance.report.defects import Defects, title
from tests.helpers import make_result

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: fault-wide, input: [[-1.0, -2.0], [-0.5, -1.5]], target: [[0.25, 0.75], [0.5, 0.5]], reduction: sum, dtype: float64}
- {id: fault-small, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: ok, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
"""


def _run(tmp_path, adapter="TwoFormsAdapter", *extra):
    (tmp_path / "cases.yaml").write_text(CASES)
    out = tmp_path / "out"
    assert main(["run", "--framework", ADAPTERS + adapter, "--cases", str(tmp_path / "cases.yaml"), "--suite", "none",
                 "--out", str(out), "--no-progress", *extra]) == 0
    return out


def test_the_apis_of_one_implementation_share_a_defect_and_another_function_has_its_own(tmp_path):
    out = _run(tmp_path)
    rows = [r for r in iter_results(out) if r.verdict.is_divergence]
    by_api = {api: {r.defect for r in rows if r.api == api} for api in ("numpy.kl_div", "numpy.KLDivLoss",
                                                                         "numpy.kl_div_other")}
    assert all(len(ids) == 1 for ids in by_api.values())
    assert by_api["numpy.kl_div"] == by_api["numpy.KLDivLoss"] != by_api["numpy.kl_div_other"]
    # summary.json lists each once, by the schema, and they hold every divergent row exactly once
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, load_schema("summary.schema.json"))
    assert Counter({d["id"]: d["rows"] for d in summary["defects"]}) == Counter(r.defect for r in rows)
    shared = next(d for d in summary["defects"] if d["id"] in by_api["numpy.kl_div"])
    assert shared["apis"] == ["numpy.KLDivLoss", "numpy.kl_div"] and shared["status"] == "undocumented"
    # its example is its simplest row: reduction none, the smaller case, the function before the class
    assert shared["example"] == {"case_id": "fault-small", "api": "numpy.kl_div", "mode": "eager", "part": "forward",
                                 "device": "cpu"}
    assert shared["draft"] == f"issues/{shared['id']}.md" and (out / shared["draft"]).is_file()
    assert sorted(p.name for p in (out / "issues").iterdir()) == sorted(f"{d['id']}.md" for d in summary["defects"])
    # the terminal's defect line and report.md's table name it once
    report = (out / "report.md").read_text()
    assert report.index("undocumented defects") < report.index("## Divergences by cause")
    assert report.count(f"`{shared['id']}`") == 1


def test_a_defects_snippet_is_short_and_runs_standalone(tmp_path):
    out = _run(tmp_path)
    summary = json.loads((out / "summary.json").read_text())
    for defect in summary["defects"]:
        snippet = out / "repro" / f"{defect['id']}.snippet.py"
        lines = snippet.read_text().splitlines()
        assert len(lines) <= 15
        done = subprocess.run([sys.executable, str(snippet)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        # the stand-in is off by one: the snippet prints its value, one more than the spec's it states
        got = float(done.stdout.strip().strip("[]"))
        expected = float(lines[-1].split("# the spec expects ")[1].strip("[]"))
        assert abs(got - expected - 1.0) < 1e-7  # NumPy prints eight digits
        draft = (out / defect["draft"]).read_text()
        assert snippet.read_text().rstrip("\n") in draft


def test_a_runs_drafts_are_those_its_rows_give_read_back(tmp_path):
    """A run drafts from the defects its report gathered as it wrote the rows; `report` reads the rows back. Both
    give the same drafts, a known entry's marks included."""
    from conformance.core.known import load_known
    from conformance.core.rundirs import load_manifests
    from conformance.report.drafts import write_drafts

    (tmp_path / "known.yaml").write_text("- {id: small, case_id: fault-small, verdict: value, reason: accepted}\n")
    out = _run(tmp_path, "TwoFormsAdapter", "--known", str(tmp_path / "known.yaml"))
    again = tmp_path / "again"
    again.mkdir()
    write_drafts(again, [out], load_manifests([out])[1], load_known(str(tmp_path / "known.yaml")))
    drafted = sorted(p.name for p in (out / "issues").iterdir())
    assert drafted and drafted == sorted(p.name for p in (again / "issues").iterdir())
    assert all((out / "issues" / n).read_text() == (again / "issues" / n).read_text() for n in drafted)


def test_a_known_entry_may_name_a_defect_and_accepts_exactly_its_rows(tmp_path):
    out = _run(tmp_path)
    rows = [r for r in iter_results(out) if r.verdict.is_divergence]
    other = next(r.defect for r in rows if r.api == "numpy.kl_div_other")
    (tmp_path / "known.yaml").write_text(f"- {{id: other-form, defect: {other}, reason: fix pending}}\n")
    assert main(["report", str(out), "--out", str(tmp_path / "rep"), "--known", str(tmp_path / "known.yaml")]) == 0
    merged = list(iter_results(tmp_path / "rep"))
    assert {r.defect for r in merged if r.known_by} == {other}
    assert all(r.known_by == ("other-form",) for r in merged if r.defect == other)
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert {d["id"]: d["status"] for d in summary["defects"]}[other] == "known"
    # a defect id that is not one is refused in one line
    (tmp_path / "bad.yaml").write_text("- {id: x, defect: 'torch-../../x', reason: r}\n")
    assert main(["report", str(out), "--out", str(tmp_path / "bad"), "--known", str(tmp_path / "bad.yaml")]) == 2
    assert not (tmp_path / "bad").exists()


def test_a_residual_cause_drops_what_the_profile_states():
    documented = frozenset({"gradients.conventions.target_zero"})
    # a documented convention beside legacy precedence is a legacy-precedence defect
    assert residual_cause("gradients.conventions.target_zero + signature.legacy.precedence", documented) == \
        "signature.legacy.precedence"
    # a cause the profile states whole stays (the row is documented, or the statement does not cover it)
    assert residual_cause("gradients.conventions.target_zero", documented) == "gradients.conventions.target_zero"
    assert residual_cause("unexplained", documented) == "unexplained"


def test_rows_of_one_behaviour_are_one_defect_across_parts_dtypes_modes_and_what_they_show_splits_unexplained():
    explained = [make_result(case_id=f"c{i}", verdict="nonfinite", cause="pointwise.conventions.target_zero",
                             part=part, dtype=dtype, mode=mode)
                 for i, (part, dtype, mode) in enumerate([("forward", "float32", "eager"),
                                                          ("grad_input", "float16", "eager"),
                                                          ("forward", "float64", "inductor")])]
    assert len({r.defect for r in explained}) == 1
    # an unexplained value divergence a few bounds out is another behaviour than one that loses every digit
    near = make_result(case_id="n", verdict="value", cause="unexplained", max_abs_err=2e-6, bound=1e-6)
    far = make_result(case_id="f", verdict="value", cause="unexplained", max_abs_err=1.0, bound=1e-6)
    narrow = make_result(case_id="h", verdict="value", cause="unexplained", max_abs_err=2e-6, bound=1e-6,
                         dtype="float16")
    assert len({near.defect, far.defect, narrow.defect}) == 3
    # a documented row is not the undocumented defect of the same cause, and a pass has none
    documented = make_result(case_id="d", verdict="nonfinite", cause="pointwise.conventions.target_zero",
                             documented=True, documented_by=("dev",))
    assert documented.defect != explained[0].defect and make_result().defect == ""
    assert defect_of(explained[0], "other.implementation") != explained[0].defect
    defects = Defects(explained + [documented])
    assert [(d.status, d.rows, sorted(d.modes)) for d in defects.ordered()] == \
        [("undocumented", 3, ["eager", "inductor"]), ("documented", 1, ["eager"])]


def test_the_loss_and_its_gradients_at_one_edge_are_one_defect_and_a_signature_rule_beside_it_is_not_another():
    forward = make_result(case_id="f", verdict="nonfinite", cause="pointwise.conventions.log_target_neg_inf",
                          log_target=True)
    gradient = make_result(case_id="g", verdict="nonfinite", cause="gradients.conventions.log_target_neg_inf",
                           log_target=True, part="grad_target")
    with_legacy = make_result(case_id="l", verdict="nonfinite", part="grad_target", log_target=True,
                              cause="gradients.conventions.log_target_neg_inf + signature.legacy.precedence")
    legacy_alone = make_result(case_id="a", verdict="value", cause="signature.legacy.precedence")
    assert forward.defect == gradient.defect == with_legacy.defect != legacy_alone.defect
    assert root_cause("signature.legacy.precedence") == "signature.legacy.precedence"


def test_a_row_that_shows_two_behaviours_is_the_first_ones_defect_and_the_report_says_it_also_shows_the_other():
    """torch's mixed-dtype grad_target at a float32 subnormal target: the target's own terms in float32 (first in the
    spec's order) and the product rule that float32 rounding then shows. A maintainer who fixes the first fixes the
    row; the product rule alone is another defect."""
    both = make_result(case_id="b", verdict="value", part="grad_target",
                       cause="dtypes.argument_terms + gradients.target_product_rule")
    own = make_result(case_id="o", verdict="value", cause="dtypes.argument_terms", dtype="float32:float16")
    rule = make_result(case_id="r", verdict="value", part="grad_target", cause="gradients.target_product_rule")
    assert root_cause(both.cause) == "dtypes.argument_terms"
    assert both.defect == own.defect != rule.defect
    defects = Defects([both, own, rule])
    merged = defects.by_id[own.defect]
    assert merged.rows == 2 and merged.also == {"gradients.target_product_rule"}
    assert merged.example.case_id == "o", "the example shows the defect's behaviour alone, however simple the other"
    assert merged.cause == "dtypes.argument_terms", "the defect's cause is its example's, not its first row's"
    assert merged.where().endswith("; some rows also show gradients.target_product_rule")
    assert defects.by_id[rule.defect].also == set()


def test_the_rows_one_profile_statement_documents_are_one_defect_whatever_edge_or_cause_each_shows():
    """optax's zero-target entry states a NaN loss at an infinite input and a NaN grad_target at t = 0: one
    statement, one documented defect; rows another statement documents are another."""
    loss = make_result(case_id="l", verdict="nonfinite", cause="pointwise.conventions.target_zero",
                       documented=True, documented_by=("zero-target",))
    gradient = make_result(case_id="g", verdict="nonfinite", part="grad_target", cause="unexplained",
                           documented=True, documented_by=("zero-target",))
    other = make_result(case_id="o", verdict="nonfinite", cause="pointwise.conventions.target_zero",
                        documented=True, documented_by=("negative-target",))
    assert loss.defect == gradient.defect != other.defect
    assert [(d.status, d.rows) for d in Defects([loss, gradient, other]).ordered()] == \
        [("documented", 2), ("documented", 1)]


def test_an_accepted_defect_names_where_the_framework_states_it_and_its_upstream_issue():
    """Read from the shipped torch profile: grad_target NaN at a zero target, closed upstream as by design."""
    row = make_result(case_id="z", framework="torch", verdict="nonfinite", part="grad_target",
                      cause="gradients.conventions.target_zero", documented=True,
                      documented_by=("grad-target-nan-at-zero-target",))
    defects = Defects([row])
    (d,) = defects.ordered()
    assert (d.status, defects.basis(d)) == ("documented", "maintainers")
    issue = defects.upstream(d)
    assert issue.url == "https://github.com/pytorch/pytorch/issues/89558" and issue.state == "closed-by-design"
    # grad_input at the same edge is another part: that issue is about grad_target only
    (other_part,) = Defects([make_result(case_id="y", framework="torch", verdict="nonfinite",
                                         cause="gradients.conventions.target_zero", part="grad_input")]).ordered()
    assert Defects().upstream(other_part) is None


def test_a_value_divergence_names_the_input_and_target_at_its_worst_element(tmp_path, capsys):
    """Failure text a maintainer acts on without another file (issue 41): the row's message, the terminal's defect
    line and report.md's example say the input and target at the element shown, and the call's parameters."""
    out = _run(tmp_path, "OffByOneAdapter")
    printed = capsys.readouterr()
    rows = {r.case_id: r for r in iter_results(out) if r.verdict.is_divergence}
    small = rows["fault-small"]  # reduction none: one element per input pair
    index = tuple(int(i) for i in small.message.split("worst [")[1].split("]")[0].split(", "))
    inputs, targets = [[-1.0, -2.0]], [[0.25, 0.75]]
    at = f"; at input {inputs[index[0]][index[1]]!r}, target {targets[index[0]][index[1]]!r}"
    assert at in small.message
    assert "; at input" not in rows["fault-wide"].message  # a sum has no one element to name
    terminal = [line for line in (printed.out + printed.err).splitlines() if line.startswith("UNDOCUMENTED ")]
    assert len(terminal) == 1 and "e.g. reduction=none, log_target=False, float64: value: " in terminal[0]
    assert at.removeprefix("; ") in terminal[0]
    (example,) = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| `numpy-test-")]
    assert "reduction=none, log_target=False, float64: value: " in example and at.removeprefix("; ") in example


def test_the_example_is_inside_the_apis_domain_where_the_defect_shows_there():
    """A defect's example was an input of +inf where a log-probability is due, or a target of +inf: the simplest
    row is one whose shown element lies inside the API's domain, when the defect has one."""
    at = "value: 1 of 4 elements outside bound; worst [0]: got 1.0, expected 0.5, |err| 0.5 > bound 1e-06"
    rows = [make_result(case_id=f"fwd/none/log_target=0/4/float32/{family}/s0", family=family, verdict="value",
                        reduction="none", cause="unexplained", message=f"{at}; at input {x}, target {t}",
                        defect="torch-0000000001")
            for family, x, t in (("infinities", "inf", "0.5"), ("nan", "-1.0", "nan"), ("negative_target", "-1.0", "-0.5"),
                                 ("large", "-1.0", "inf"), ("softmax", "-1.0", "0.5"))]
    defects = Defects()
    for row in rows:
        defects.add(row)
    (defect,) = defects.by_id.values()
    assert defect.example.family == "softmax"
    defects = Defects()
    for row in rows[:4]:  # only outside: the defect still has an example
        defects.add(row)
    assert next(iter(defects.by_id.values())).example.family in {"infinities", "nan", "negative_target", "large"}


def test_one_refusal_is_one_defect_whatever_part_or_dtype_meets_it_and_its_title_says_what_was_raised():
    """The audit found OneFlow's mixed-dtype refusal (`InferDataType Failed`) spread over seven defects by part
    and dtype width, beside its 0-d batchmean refusal under one example; and every error defect titled "raises
    where the spec expects a value", also where the framework returned a value instead of raising."""
    refusal = "error: raised RuntimeError: InferDataType Failed. Expected kFloat, but got kDouble; spec expects a value"
    mixed = [make_result(case_id=f"m{i}", verdict="error", cause="unexplained", part=part, dtype=dtype,
                         message=refusal.replace("kFloat", kind))
             for i, (part, dtype, kind) in enumerate([("forward", "float32", "kFloat"),
                                                      ("grad_input", "float16", "kHalf"),
                                                      ("grad_target", "float64", "kDouble")])]
    batchmean = make_result(case_id="b", verdict="error", cause="unexplained", log_target=True,
                            message="error: raised RuntimeError: Reduction should be none, sum or mean.; spec "
                                    "expects a value")
    assert len({r.defect for r in mixed}) == 1 and batchmean.defect != mixed[0].defect
    defects = Defects(mixed + [batchmean])
    spec = load_spec()
    titles = {d.rows: title(d, spec) for d in defects.ordered()}
    assert titles[3] == ("kl_div: raises RuntimeError (InferDataType Failed) where the spec expects a value "
                         "(no spec choice reproduces it)")
    assert titles[1].startswith("kl_div(log_target=True) loss: raises RuntimeError (Reduction should be none, sum")
    returned = make_result(case_id="r", verdict="error", cause="errors.unknown_reduction",
                           message="error: returned a value; spec expects ValueError (errors.unknown_reduction)")
    (d,) = Defects([returned]).ordered()
    assert title(d, spec) == ("kl_div loss: returns a value where the spec expects an error (spec expects "
                              "ValueError (errors.unknown_reduction))")
    # another exception than the spec's was titled "raises where the spec expects a value (the spec expects
    # TypeError when ...)": it names both exceptions now
    other = make_result(case_id="i", verdict="error", cause="errors.integral_dtype",
                        message="error: raised RuntimeError: kl_div: Integral inputs not supported.; spec expects "
                                "TypeError (errors.integral_dtype)")
    (d,) = Defects([other]).ordered()
    assert title(d, spec) == ("kl_div loss: raises RuntimeError (kl_div: Integral inputs not supported) where the "
                              "spec expects TypeError when input or target has a dtype in dtypes.rejected")


def test_a_title_says_log_target_true_only_where_every_row_has_it():
    rows = [make_result(case_id=f"c{i}", verdict="nonfinite", cause="pointwise.conventions.target_zero",
                        log_target=lt) for i, lt in enumerate((True, False))]
    (d,) = Defects(rows).ordered()
    assert title(d, load_spec()).startswith("kl_div loss: ")
    (d,) = Defects(rows[:1]).ordered()
    assert title(d, load_spec()).startswith("kl_div(log_target=True) loss: ")


def test_two_documented_restrictions_are_two_unsupported_defects():
    """Every documented restriction's reason began "the documentation: ...", and the reason up to its first colon
    was the key: MindSpore's float64 restriction and its mixed-dtype one were one defect."""
    reasons = ["the documentation: the data type should be float16 or float32 (documented, docs: https://x)",
               "the documentation: logits and labels have the same data type (documented, docs: https://x)"]
    rows = [make_result(case_id=f"u{i}", verdict="unsupported", message=m) for i, m in enumerate(reasons)]
    assert rows[0].defect != rows[1].defect
    again = make_result(case_id="u2", verdict="unsupported", dtype="float64", message=reasons[0])
    assert again.defect == rows[0].defect


def test_an_api_refusing_each_unknown_reduction_is_one_unsupported_defect():
    """optax's losses take no reduction argument: "has no reduction 'avg'", "... 'SUM'" and "... 'elementwise_mean'"
    were three unsupported defects of one part, one for each name the cases passed."""
    reasons = [f"optax.losses.kl_divergence has no reduction {name!r} (it takes ['none'])"
               for name in ("avg", "SUM", "elementwise_mean")]
    rows = [make_result(case_id=f"u{i}", verdict="unsupported", message=m) for i, m in enumerate(reasons)]
    assert len({r.defect for r in rows}) == 1
    other = make_result(case_id="u9", verdict="unsupported", message="optax.losses.kl_divergence has no log_target "
                                                                     "argument")
    assert other.defect != rows[0].defect


def test_the_example_holds_an_element_where_the_defect_shows_in_one():
    """Paddle's gradient defects took an empty 0x5 case as their example (the smallest shape), whose snippet shows
    nothing."""
    rows = [make_result(case_id=f"fwd/none/log_target=0/{shape}/float32/softmax/s0", verdict="error",
                        cause="unexplained", reduction="none", message="error: raised RuntimeError: no; spec expects "
                                                                       "a value")
            for shape in ("0x5", "4x6", "7")]
    (d,) = Defects(rows).ordered()
    assert d.example.case_id == "fwd/none/log_target=0/7/float32/softmax/s0"
    (d,) = Defects(rows[:1]).ordered()
    assert d.example.case_id.split("/")[3] == "0x5"


def test_an_unexplained_row_within_rounding_of_a_behaviour_is_that_behaviours_defect_and_never_its_example():
    """torch's float16 grad_target at a float16 subnormal target is 1.07 bounds out, and the product rule it shows
    beyond rounding elsewhere reproduces it within rounding: one behaviour, shown once. The row keeps its cause
    (`unexplained`: within rounding is no evidence); the defect's example and cause come from a row that shows
    the behaviour beyond rounding, and its where says how many rows lie only within rounding of it."""
    within = "; within rounding of "
    rule = make_result(case_id="r", verdict="value", part="grad_target", cause="gradients.target_product_rule")
    near = make_result(case_id="a", verdict="value", part="grad_target", cause="unexplained",
                       message="value: 1 of 48 elements outside bound" + within + "gradients.target_product_rule = xlogy")
    # within rounding of two behaviours is the first's, as a row that shows both beyond rounding is
    both = make_result(case_id="b", verdict="value", part="grad_target", cause="unexplained",
                       message="value: 1 of 24 elements outside bound" + within
                       + "dtypes.argument_terms = own_dtype, gradients.target_product_rule = xlogy")
    own = make_result(case_id="o", verdict="value", cause="dtypes.argument_terms")
    lone = make_result(case_id="l", verdict="value", cause="unexplained", max_abs_err=2e-6, bound=1e-6)
    assert near.cause == both.cause == "unexplained"
    assert near.defect == rule.defect and both.defect == own.defect != rule.defect
    assert lone.defect not in {rule.defect, own.defect}
    defects = Defects([near, rule, both, own, lone])
    merged = defects.by_id[rule.defect]
    assert (merged.rows, merged.within) == (2, 1)
    assert merged.example.case_id == "r" and merged.cause == "gradients.target_product_rule", \
        "the example shows the behaviour beyond rounding, though the row within rounding sorts first"
    assert merged.where().endswith("; 1 of its 2 rows lie only within rounding of it")
    assert defects.by_id[own.defect].also == set(), "a row within rounding of two shows neither beyond rounding"
    # where no row shows it beyond rounding, the defect is the within-rounding rows', and its title says so
    (alone,) = Defects([near]).ordered()
    assert alone.cause == "unexplained" and "within rounding of" not in alone.where()
    assert title(alone, load_spec()).endswith(
        "no spec choice reproduces it beyond rounding; within rounding of gradients.target_product_rule = xlogy)")


def test_each_gradient_a_framework_does_not_give_is_a_defect_of_its_own(tmp_path):
    """Paddle's eager kl_div gives no gradient for the label, and its to_static programs no double backward
    (to_static's own limit): 1,118 rows as one defect, named by the exception the harness raises for a None
    gradient. Its words name the part now, so each missing gradient is a defect of its own."""
    from conformance.core.results import iter_results

    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: ok-1, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64, "
                     "grad: [input, target, grad2_input]}\n")
    assert main(["run", "--framework", "tests.faults.adapters:NoGradientAdapter", "--cases", str(cases), "--suite",
                 "none", "--out", str(tmp_path / "out"), "--no-progress", "--no-repro"]) == 0
    missing = {r.part: r for r in iter_results(tmp_path / "out") if "MissingGradient" in r.message}
    assert set(missing) == {"grad_input", "grad_target", "grad2_input"}
    assert len({r.defect for r in missing.values()}) == 3
    assert "no gradient with respect to target (None) from klfake.kl_div" in missing["grad_target"].message
