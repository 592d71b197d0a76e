"""Ports judged like a framework, with the NumPy stand-in as that framework: a profile's `extends:`, `run
--like`, `report --like`, `--like-run`, and an adapter that carries its own profile (also by entry point)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conformance.adapters.base import Api, check_script_names, layout_buffer_source, layout_view_source
from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import load_schema
from tests.faults.adapters import NumpyAdapter

ONLY = ["--only", "fwd/*/log_target=0/4x6/float64/*"]
HERE = "tests.faults.test_ports:"
FRAMEWORK = "tests.faults.adapters:NumpyAdapter"  # its rows name it numpy-test
PROFILE = ("framework: numpy-test\ndeviations:\n- {id: negative-target-gives-zero, apis: [numpy.kl_div], "
           "set: {pointwise.conventions.target_negative: zero}, rationale: r, basis: docs, reference: 'https://x'}\n")


class NumpyPort(NumpyAdapter):
    """A port that copies the NumPy stand-in under another name, its API mirroring the stand-in's."""

    name = "numpy-port"
    apis = (Api("port.kl_div", mirrors="numpy.kl_div"),)


class NumpyPortOwnSum(NumpyPort):
    """A port with a bug of its own: sum is twice the loss."""

    def compute(self, case):
        value = super().compute(case)
        return value * 2 if case.params.reduction == "sum" else value


class ReproPort(NumpyPortOwnSum):
    """A port that writes its reproducer with the public helpers only (adapters/base.py REPRODUCER_HELPERS)."""

    def repro_source(self, case, api, device, part):
        check_script_names(case, device, part, self.known_devices)
        swap = "np.swapaxes({}, -1, -2)"
        x = layout_view_source(layout_buffer_source("x_values", case.layout), case.layout, swap)
        t = layout_view_source(layout_buffer_source("t_values", case.layout), case.layout, swap)
        return "\n".join([
            f"x, t = np.broadcast_arrays({x}, {t})",
            "with np.errstate(all='ignore'):",
            "    loss = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1.0)) - x), 0.0)",
            f"result = {{'none': loss, 'sum': 2 * loss.sum(), 'mean': loss.mean()}}[{case.params.reduction!r}]",
            "result_dtype = 'float64'"])


class CarryingPort(NumpyPort):
    """A port that carries its profile as a dict: read without --profiles."""

    name = "numpy-carrying"
    profile = {"framework": "numpy-carrying", "deviations": [
        {"id": "negative-target-gives-zero", "apis": ["port.kl_div"], "rationale": "r", "basis": "docs", "reference": "https://x",
         "set": {"pointwise.conventions.target_negative": "zero"}}]}


@pytest.fixture
def profiles(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "numpy-test.yaml").write_text(PROFILE)
    return folder


def _run(tmp_path, framework, out, *extra):
    return main(["run", "--framework", framework, *ONLY, "--out", str(tmp_path / out), "--no-progress",
                 "--no-repro", "--no-cache", *extra])


def _undocumented(run_dir):
    """(case, part, verdict, cause) of each undocumented divergence, whatever the API is called."""
    return sorted((r.case_id, r.part, r.verdict.value, r.cause) for r in iter_results(run_dir)
                  if r.verdict.is_divergence and not r.is_accepted)


@pytest.fixture
def framework_run(tmp_path, profiles):
    assert _run(tmp_path, FRAMEWORK, "framework", "--profiles", str(profiles)) == 0
    return tmp_path / "framework"


def test_like_leaves_exactly_the_frameworks_undocumented_findings(tmp_path, profiles, framework_run):
    """Without --like every behaviour the framework documents counts against its port; with it, the port
    has the framework's undocumented findings, no more."""
    assert _run(tmp_path, HERE + "NumpyPort", "plain", "--profiles", str(profiles)) == 0
    assert _run(tmp_path, HERE + "NumpyPort", "like", "--profiles", str(profiles), "--like", "numpy-test") == 0
    theirs = _undocumented(framework_run)
    assert _undocumented(tmp_path / "like") == theirs
    assert len(_undocumented(tmp_path / "plain")) > len(theirs)
    documented = [r for r in iter_results(tmp_path / "like") if r.documented]
    assert documented and {r.documented_by for r in documented} == {("numpy-test:negative-target-gives-zero",)}
    assert json.loads((tmp_path / "like" / "run.json").read_text())["like"] == "numpy-test"
    summary = json.loads((tmp_path / "like" / "summary.json").read_text())["like"]
    assert summary["framework"] == "numpy-test" and summary["documented_by_like"] == len(documented)
    assert "## Judged like numpy-test" in (tmp_path / "like" / "report.md").read_text()


def test_extends_in_the_ports_profile_does_what_like_does(tmp_path, profiles, framework_run):
    (profiles / "numpy-port.yaml").write_text("framework: numpy-port\nextends: numpy-test\ndeviations: []\n")
    assert _run(tmp_path, HERE + "NumpyPort", "extends", "--profiles", str(profiles)) == 0
    assert _undocumented(tmp_path / "extends") == _undocumented(framework_run)


def test_like_run_marks_shared_and_own_findings(tmp_path, profiles, framework_run, capsys):
    """A copy shares every divergence with the framework's recorded run; a port with a bug of its own has
    that bug, and only it, as its own."""
    assert _run(tmp_path, HERE + "NumpyPort", "copy", "--profiles", str(profiles), "--like", "numpy-test",
                "--like-run", str(framework_run)) == 0
    copy = json.loads((tmp_path / "copy" / "summary.json").read_text())["like"]
    assert copy["own"] == 0 and copy["shared"] == copy["divergences"] > 0
    assert _run(tmp_path, HERE + "NumpyPortOwnSum", "own", "--profiles", str(profiles), "--like", "numpy-test",
                "--like-run", str(framework_run)) == 0
    out = capsys.readouterr().out
    whole = json.loads((tmp_path / "own" / "summary.json").read_text())
    jsonschema.validate(whole, load_schema("summary.schema.json"))
    own = whole["like"]
    sums = {r.case_id for r in iter_results(tmp_path / "own") if r.verdict.is_divergence and "/sum/" in r.case_id}
    shared_sums = {r.case_id for r in iter_results(framework_run) if r.verdict.is_divergence and "/sum/" in r.case_id}
    assert own["own"] >= len(sums - shared_sums) > 0 and own["own_undocumented"] == own["own"]
    assert f"the port's own ({own['own_undocumented']} undocumented)" in out.splitlines()[-2]
    report = (tmp_path / "own" / "report.md").read_text()
    assert "its own (" in report and all(case.replace("_", "\\_") in report for case in sorted(sums - shared_sums))
    assert "Judged like numpy-test" in (tmp_path / "own" / "report.html").read_text()


def test_report_like_merges_ports_judged_like_that_framework(tmp_path, profiles, framework_run, capsys):
    assert _run(tmp_path, HERE + "NumpyPort", "like", "--profiles", str(profiles), "--like", "numpy-test") == 0
    assert main(["report", str(tmp_path / "like"), "--out", str(tmp_path / "merged"), "--like", "numpy-test",
                 "--like-run", str(framework_run)]) == 0
    merged = json.loads((tmp_path / "merged" / "summary.json").read_text())["like"]
    assert merged["own"] == 0 and merged["shared"] > 0
    # a port run judged without --like cannot be reported like a framework: its rows carry no such marks
    assert _run(tmp_path, HERE + "NumpyPort", "plain", "--profiles", str(profiles)) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged2"), "--like",
                 "numpy-test"]) == 2
    err = capsys.readouterr().err
    assert "judged without --like, not like 'numpy-test'" in err and err.count("\n") == 1
    assert not (tmp_path / "merged2").exists()
    # a name no adapter or profile has: the fix does not tell the user to run the port "with --like nosuch"
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "merged2"), "--like", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "not like 'nosuch'" in err and "--like nosuch" not in err and "--like FRAMEWORK (one of [" in err, err


@pytest.mark.parametrize("extra, words", [
    (["--like", "nosuch"], "--like: unknown framework 'nosuch'"),
    (["--like-run", "DIR"], "--like-run needs --like FRAMEWORK"),
    (["--like", "torch", "--like-run", "DIR"], "a run of ['numpy-test'], not of 'torch'"),
    (["--like", "numpy-test", "--like-run", "nowhere"], "no results.jsonl in the recorded run"),
])
def test_bad_like_options_are_one_line_and_write_nothing(tmp_path, profiles, framework_run, capsys, extra, words):
    extra = [str(framework_run) if e == "DIR" else str(tmp_path / e) if e == "nowhere" else e for e in extra]
    capsys.readouterr()
    assert _run(tmp_path, HERE + "NumpyPort", "port", "--profiles", str(profiles), *extra) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert not (tmp_path / "port").exists()


def test_extends_cycle_in_a_run_is_one_line(tmp_path, profiles, capsys):
    (profiles / "numpy-port.yaml").write_text("framework: numpy-port\nextends: numpy-test\ndeviations: []\n")
    (profiles / "numpy-test.yaml").write_text("framework: numpy-test\nextends: numpy-port\ndeviations: []\n")
    assert _run(tmp_path, HERE + "NumpyPort", "port", "--profiles", str(profiles)) == 2
    err = capsys.readouterr().err
    assert "extends makes a cycle (numpy-port -> numpy-test -> numpy-port)" in err and err.count("\n") == 1
    assert not (tmp_path / "port").exists()


def test_an_adapter_carries_its_own_profile(tmp_path):
    """No --profiles: the adapter's own profile documents its divergences."""
    assert _run(tmp_path, HERE + "CarryingPort", "carried") == 0
    documented = {r.documented_by for r in iter_results(tmp_path / "carried") if r.documented}
    assert documented == {("negative-target-gives-zero",)}
    # summary.json names where the port states it: the basis its carried profile gives, which no shipped one has
    summary = json.loads((tmp_path / "carried" / "summary.json").read_text())
    assert {d["basis"] for d in summary["defects"] if d["status"] == "documented"} == {"docs"}


def test_an_entry_point_adapter_runs_by_name_with_its_profile(tmp_path, monkeypatch):
    """An adapter of another distribution, registered under the entry-point group, runs by its name and
    brings its profile (the worker finds the same entry point)."""
    from conformance.adapters.registry import ENTRY_POINT_GROUP, known_adapters

    dist = tmp_path / "site" / "numpy_port-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy-port\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nnumpy-carrying = {HERE}CarryingPort\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert known_adapters()["numpy-carrying"] == HERE + "CarryingPort"
    assert _run(tmp_path, "numpy-carrying", "by-name") == 0
    documented = {r.documented_by for r in iter_results(tmp_path / "by-name") if r.documented}
    assert documented == {("negative-target-gives-zero",)}


def test_a_profile_path_is_read_from_the_adapters_module_folder(tmp_path, spec):
    """A relative `profile` is a file beside the adapter's module (shipped in its package); an absolute one is
    read as it is."""
    from pathlib import Path

    from conformance.judge.profiles import load_profile

    class FilePort(NumpyPort):
        profile = "profiles/port.yaml"
    assert FilePort().carried_profile() == Path(__file__).parent / "profiles" / "port.yaml"
    # a subclass in another module (as the self-test plants one) reads the file its stating class names
    planted = type("Planted__port__value", (FilePort,), {"__module__": "conformance.selftest.planter"})
    assert planted().carried_profile() == Path(__file__).parent / "profiles" / "port.yaml"
    (tmp_path / "port.yaml").write_text(PROFILE.replace("numpy-test", "numpy-port").replace("numpy.kl_div",
                                                                                            "port.kl_div"))
    FilePort.profile = str(tmp_path / "port.yaml")
    assert [d.id for d in load_profile("numpy-port", spec, carried=FilePort().carried_profile())] == \
        ["negative-target-gives-zero"]


@pytest.mark.parametrize("layout", ["4x6", "4x6.T", "4x6.strided"])
def test_a_port_writes_its_reproducer_with_the_public_helpers(tmp_path, capsys, layout):
    """The reproducer of a port's own bug, written by the port's adapter from the public helpers alone, runs
    standalone and reproduces the finding (exit 1)."""
    import subprocess
    import sys

    import conformance.adapters.base as base

    assert all(not name.startswith("_") and hasattr(base, name) for name in base.REPRODUCER_HELPERS)
    case = f"fwd/sum/log_target=0/{layout}/float64/unnormalized/s0"
    capsys.readouterr()
    assert main(["repro", case, "--framework", HERE + "ReproPort", "--no-minimize"]) == 0
    script = tmp_path / "repro.py"
    script.write_text(capsys.readouterr().out)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 1 and "reproduces: a value" in done.stdout


def test_run_help_documents_an_adapter_class_path(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert info.value.code == 0 and "package.module:Class" in text and "--like FRAMEWORK" in text \
        and "--like-run DIR" in text


@pytest.mark.parametrize("theirs, same", [
    ({"got": {"shape": [2], "values": [1.0, "nan"]}}, True),
    ({"got": {"shape": [2], "values": [1.25, "nan"]}}, False),  # outside the port's bound
    ({"got": {"shape": [2], "values": [1.0, "inf"]}}, False),  # another non-finite pattern
    ({"got": {"shape": [1, 2], "values": [1.0, "nan"]}}, False),
    ({"raised": "RuntimeError: no"}, False),
])
def test_shared_observations_agree_within_the_ports_bound(theirs, same):
    from conformance.report.like import _same_observation

    ours = {"got": {"shape": [2], "values": [1.1, "nan"]}, "bound": {"shape": [2], "values": [0.125, "inf"]}}
    assert _same_observation(ours, theirs) is same
    assert _same_observation({"raised": "RuntimeError: a"}, {"raised": "RuntimeError: b"}) is True
    # where the spec expects NaN the bound is NaN: the finite values the framework and its port give must match
    nan_bound = {"got": {"shape": [1], "values": [0.0]}, "bound": {"shape": [1], "values": ["nan"]}}
    assert _same_observation(nan_bound, {"got": {"shape": [1], "values": [0.0]}}) is True
    assert _same_observation(nan_bound, {"got": {"shape": [1], "values": [0.5]}}) is False


def test_a_ports_reproduce_command_judges_it_as_its_run_did(tmp_path, profiles, framework_run, capsys):
    """The reproduce command a report prints for a port run with `--like` and `--profiles` carries both (and
    the `module:Class` the run was given): the script it writes shows the port's own bug beside the framework's
    documented behaviour. Without them it showed that documented behaviour (NaN where negative targets give 0)."""
    import shlex
    import subprocess
    import sys

    assert _run(tmp_path, HERE + "ReproPort", "own", "--profiles", str(profiles), "--like", "numpy-test") == 0
    summary = json.loads((tmp_path / "own" / "summary.json").read_text())
    commands = [d["reproduce"] for d in summary["defects"]]
    assert commands and all(f"--profiles={profiles.resolve()}" in c and "--like=numpy-test" in c
                            and f"--framework={HERE}ReproPort" in c for c in commands)
    report = (tmp_path / "own" / "report.md").read_text()
    assert "--like=numpy-test" in report and "--framework=numpy-port" not in report
    case = "fwd/sum/log_target=0/4x6/float64/negative_target/s0"
    row = next(r for r in iter_results(tmp_path / "own") if r.case_id == case)
    assert "beside the profile" in row.message and not row.is_accepted
    from conformance.core.manifest import read_manifest
    from conformance.report.reprocommand import repro_command

    words = shlex.split(repro_command(row, read_manifest(tmp_path / "own")).split(" > ")[0])
    expected = []
    for given in (words, [w for w in words if not w.startswith(("--like=", "--profiles="))]):
        capsys.readouterr()
        assert main(given[1:]) == 0
        script = tmp_path / "repro.py"
        script.write_text(capsys.readouterr().out)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        expected.append(next(line for line in done.stdout.splitlines() if line.startswith("expected:")))
    assert "nan" not in expected[0] and "nan" in expected[1]  # the port's doubled sum; the profile's zeros

    base = ["repro", case, "--framework", HERE + "ReproPort", "--from", str(tmp_path / "own"),
            "--profiles", str(profiles)]
    for like, said in (("torch", "not like 'torch'"), ("no-such-framework", "unknown framework")):
        code = main([*base, "--like", like]) if like == "torch" else \
            main(["repro", case, "--framework", HERE + "ReproPort", "--like", like])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "" and said in captured.err, captured.err
        assert len(captured.err.strip().splitlines()) == 1
    assert main([*base, "--like", "numpy-test"]) == 0 and "port.kl_div" in capsys.readouterr().out
    # merged beside the framework's run of the same release, each draft's command is its own run's
    assert main(["report", str(framework_run), str(tmp_path / "own"), "--out", str(tmp_path / "both")]) == 0
    drafts = {p.name: p.read_text() for p in (tmp_path / "both" / "issues").glob("*.md")}
    ports = [text for name, text in drafts.items() if name.startswith("numpy-port-")]
    assert ports and all(f"--framework={HERE}ReproPort" in t and "--like=numpy-test" in t for t in ports)
    assert all("--like" not in t and "--framework=tests.faults.adapters:NumpyAdapter" in t
               for name, t in drafts.items() if name.startswith("numpy-test-"))
    # two runs of one release judged by two profile sets are not one report: one would print the other's commands
    assert main(["run", "--framework", HERE + "ReproPort", "--only", "fwd/sum/log_target=1/4x6/float64/*", "--out",
                 str(tmp_path / "shipped"), "--no-progress", "--no-repro", "--no-cache"]) == 0  # other cases
    capsys.readouterr()
    assert main(["report", str(tmp_path / "own"), str(tmp_path / "shipped"), "--out", str(tmp_path / "mixed")]) == 2
    err = capsys.readouterr().err
    assert "was judged here with --profiles (shipped), in" in err and "--like numpy-test: a behaviour" in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "mixed").exists()
