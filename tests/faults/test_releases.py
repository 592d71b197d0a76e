"""An older release of a framework: what it lacks is reported once, with the reason, and what it computes is
judged (issue 30). The stand-in `klfake` (tests/faults/adapters.py) is made through the real call machinery: its
kl_div has no log_target argument and its `klfake.losses` module does not exist yet."""

from __future__ import annotations

import json

from conformance.adapters.base import signature_arguments
from conformance.cli import main
from conformance.core.results import iter_results
from tests.faults.adapters import NoApiAdapter, OldReleaseAdapter
from tests.helpers import make_case

CASES = """
- {id: probs-sum, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: probs-none, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
- {id: logs-sum, input: [[-1.0, -2.0]], target: [[-1.5, -0.5]], reduction: sum, log_target: true, dtype: float64}
"""
ADAPTERS = "tests.faults.adapters:"


def _run(tmp_path, adapter, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", *extra])


def test_a_missing_argument_makes_only_the_cases_that_need_it_unsupported(tmp_path, capsys):
    """log_target=False is the default, left out of the call, so the release computes those cases and they are
    judged; log_target=True needs the argument: unsupported, the reason naming the release and the argument."""
    assert _run(tmp_path, "OldReleaseAdapter", "--api", "klfake.kl_div", "--strict") == 0
    rows = {r.case_id: r for r in iter_results(tmp_path / "out") if r.api == "klfake.kl_div"}
    assert {rows["probs-sum"].verdict.value, rows["probs-none"].verdict.value} == {"pass"}
    assert rows["logs-sum"].verdict.value == "unsupported"
    assert "klfake 0.9's klfake.kl_div has no argument log_target" in rows["logs-sum"].message
    assert "klfake.losses" not in capsys.readouterr().out  # not selected, so not missed


def test_a_gate_fails_closed_on_an_api_the_release_lacks(tmp_path, capsys):
    """An API not run is what was not checked: with a gate the run is incomplete (exit 3), saying which API and
    why, however well the rest conforms; without a gate it is said once and the run exits 0."""
    assert _run(tmp_path, "OldReleaseAdapter", "--strict") == 3
    printed = capsys.readouterr()
    assert "did not run API klfake.losses.kl_div: klfake 0.9 has no klfake.losses" in printed.out + printed.err
    assert _run(tmp_path, "OldReleaseAdapter", out="plain") == 0
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count("klfake.losses.kl_div: klfake 0.9 has no klfake.losses") == 1


def test_a_missing_api_is_not_run_and_recorded_once(tmp_path):
    """No row for the API the release lacks (not a flood of errors): run.json, summary.json and the report
    name it once, with the reason."""
    assert _run(tmp_path, "OldReleaseAdapter") == 0
    out = tmp_path / "out"
    assert {r.api for r in iter_results(out)} == {"klfake.kl_div"}
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["apis_not_run"] == {"klfake.losses.kl_div": "klfake 0.9 has no klfake.losses"}
    assert all("losses" not in t for t in manifest["targets"])
    assert json.loads((out / "summary.json").read_text())["runs"][0]["apis_not_run"] == manifest["apis_not_run"]
    report = (out / "report.md").read_text()
    assert report.count("klfake 0.9 has no klfake.losses") == 1
    assert (out / "report.html").read_text().count("klfake.losses.kl_div: klfake 0.9 has no klfake.losses") == 1


def test_a_release_without_any_api_is_not_run_in_one_line(tmp_path, capsys):
    assert _run(tmp_path, "NoApiAdapter") == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    lines = [line for line in captured.out.splitlines() if "not run" in line]
    assert lines == [f"{ADAPTERS}NoApiAdapter: not run: klfake 0.9 has no klfake.losses. Report: "
                     f"{tmp_path / 'out' / 'report.md'}"]
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["status"] == "not_run" and manifest["reason"] == "klfake 0.9 has no klfake.losses"
    assert manifest["framework_version"] == "0.9"
    assert (tmp_path / "out" / "report.md").read_text().count("has no klfake.losses") == 1
    assert _run(tmp_path, "NoApiAdapter", "--strict", out="strict") == 3  # nothing was checked


def test_an_option_the_release_does_not_take_is_a_note_not_a_stop(tmp_path, capsys):
    assert _run(tmp_path, "NoCacheOptionAdapter", "--strict") == 0
    err = capsys.readouterr().err
    note = "klfake 0.9 does not take the option compile_cache_dir: the run goes on without it"
    assert err.count(note) == 1
    assert json.loads((tmp_path / "out" / "run.json").read_text())["notes"] == [note]
    assert {r.case_id: r.verdict.value for r in iter_results(tmp_path / "out")} == {
        "probs-sum": "pass", "probs-none": "pass", "logs-sum": "unsupported"}


def test_the_call_and_its_reproducer_leave_out_only_a_default_the_release_lacks():
    adapter = OldReleaseAdapter()
    api = adapter.api("klfake.kl_div")
    case = make_case([[-1.0]], [[1.0]], reduction="sum")
    assert "log_target=False" in adapter.call(case, api).source()  # nothing learnt yet: every argument passed
    adapter.load()
    offer = adapter.learn_release()
    assert offer.arguments == {"klfake.kl_div": frozenset({"input", "target", "reduction"})}
    assert adapter.call(case, api).source() == "klfake.kl_div(x, t, reduction='sum')"
    assert "log_target" not in adapter.repro_source(case, api, "cpu", "forward")
    logs = make_case([[-1.0]], [[0.0]], reduction="sum", log_target=True)
    assert adapter.unsupported_reason(logs, api) == ("klfake 0.9's klfake.kl_div has no argument log_target "
                                                      "(the case needs log_target=True)")
    assert NoApiAdapter().api_unavailable(NoApiAdapter.apis[0]) == "klfake 0.9 has no klfake.losses"


def test_a_dtype_the_release_lacks_makes_its_cases_unsupported_not_errors(tmp_path, capsys):
    """klfake 0.9 has no float16 (as OneFlow 0.8.0 has no int16): building such a tensor would raise, so the
    cases that need the dtype are unsupported with the reason naming the release, and the others are judged."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES + "- {id: half-sum, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                             "dtype: float16}\n"
                             "- {id: mixed-sum, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                             "dtype: {input: float32, target: float16}}\n")
    assert main(["run", "--framework", ADAPTERS + "OldReleaseAdapter", "--api", "klfake.kl_div", "--cases",
                 str(cases), "--suite", "none", "--out", str(tmp_path / "out"), "--no-progress", "--strict"]) == 0
    rows = {r.case_id: r for r in iter_results(tmp_path / "out")}
    assert {rows[c].verdict.value for c in ("half-sum", "mixed-sum")} == {"unsupported"}
    assert {rows[c].message for c in ("half-sum", "mixed-sum")} == {"klfake 0.9 has no dtype klfake.float16"}
    assert rows["probs-sum"].verdict.value == "pass"
    adapter = OldReleaseAdapter()
    adapter.load()
    assert adapter.learn_release().missing_dtypes == {
        d: f"klfake 0.9 has no dtype klfake.{d}" for d in ("float16", "bfloat16", "int8", "int16", "int32", "int64",
                                                           "uint8", "bool")}
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "kl-conformance: strict: 0 undocumented; gate passed (--strict)"
    # the reproducer refuses in one line, as the run did
    assert main(["repro", "half-sum", "--framework", ADAPTERS + "OldReleaseAdapter", "--api", "klfake.kl_div",
                 "--from", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "klfake 0.9 has no dtype klfake.float16" in err[0]


def test_signatures_that_cannot_say_pass_every_argument():
    """A builtin without a signature, or one taking **kwargs, is passed every argument: the call tells."""
    assert signature_arguments(getattr) is None
    assert signature_arguments(lambda x, t, **kw: None) is None
    assert signature_arguments(type("Loss", (), {"__init__": lambda self, reduction="mean": None,
                                                 "forward": lambda self, input, label: None})) == \
        frozenset({"reduction", "input", "label"})


def _profile(tmp_path, oldest):
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "numpy-test.yaml").write_text(f"framework: numpy-test\noldest_release: {oldest}\ndeviations: []\n")
    return str(profiles)


def test_a_release_older_than_the_profile_says_is_noted(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KL_TEST_VERSION", "1.9.3")
    assert _run(tmp_path, "VersionedAdapter", "--part", "forward", "--only", "probs-*", "--profiles",
                _profile(tmp_path, '"1.10"')) == 0
    note = ("numpy-test 1.9.3 is older than 1.10, the oldest release its profile says the adapter supports "
            "(oldest_release): what the release lacks may show as findings")
    assert json.loads((tmp_path / "out" / "run.json").read_text())["notes"] == [note]
    assert note in capsys.readouterr().err
    monkeypatch.setenv("KL_TEST_VERSION", "1.10.0")
    assert _run(tmp_path, "VersionedAdapter", "--part", "forward", "--only", "probs-*", "--profiles",
                _profile(tmp_path, '"1.10"'), "--force") == 0
    assert "notes" not in json.loads((tmp_path / "out" / "run.json").read_text())


def test_a_bad_oldest_release_is_one_line_and_exit_2(tmp_path, capsys):
    assert _run(tmp_path, "NumpyAdapter", "--profiles", _profile(tmp_path, '"two point six"')) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "numpy-test.yaml" in err[0] and "oldest_release" in err[0]
    assert not (tmp_path / "out").exists()


def test_an_api_not_run_narrows_the_run_for_its_entries_only(tmp_path):
    """A known-findings entry pinned to the API the release lacks was not checked (never stale); one pinned to
    the API that ran was, as in a run of the whole suite."""
    from conformance.core.scope import Scope

    assert _run(tmp_path, "OldReleaseAdapter", "--no-repro") == 0
    scope = Scope.of([json.loads((tmp_path / "out" / "run.json").read_text())])
    assert "--api" in scope.narrowing("klfake", api="klfake.losses.kl_div")
    assert "--api" not in scope.narrowing("klfake", api="klfake.kl_div")
    assert not scope.selects("klfake", "klfake.losses.kl_div", "cpu", "forward")
