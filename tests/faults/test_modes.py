"""The mode axis on the command line, with NumPy stand-ins: `modes` lists each adapter's modes and why one
cannot run here; reproducers (`repro --mode`, a run's own, `--all`) and the self-test are made in the row's mode."""

from __future__ import annotations

import json
import sys

from conformance.cli import main

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0], [-0.5, -1.5]], target: [[0.25, 0.75], [0.5, 0.5]], reduction: none,
   dtype: float64}
"""


def test_modes_lists_each_mode_eager_first_and_why_one_cannot_run(capsys):
    """`modes` named every mode of the adapter, eager first, each with what it wraps the call in, and said
    that `missing` cannot run here with the adapter's reason, after loading the adapter in a worker."""
    assert main(["modes", "--framework", ADAPTERS + "ModalAdapter"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(ADAPTERS + "ModalAdapter ")
    listed = [line.split()[0] for line in lines[1:]]
    assert listed == ["eager", "shifted", "forward-only", "missing"]
    by_mode = dict(zip(listed, lines[1:]))
    assert "planted shift" in by_mode["shifted"] and by_mode["shifted"].endswith("usable")
    assert by_mode["missing"].endswith("not usable here: kl_conformance_no_such_runtime is not installed")
    assert by_mode["eager"].endswith("; usable")


def test_modes_names_the_oldest_release_supported_and_an_installed_one_older(capsys):
    """The profile's oldest_release is printed beside the installed release, and a release older than it is
    said to be (what it lacks may show as findings); an adapter whose profile states none prints nothing."""
    assert main(["modes", "--framework", ADAPTERS + "OlderThanItsProfileAdapter"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"{ADAPTERS}OlderThanItsProfileAdapter 0.9; oldest release supported: 1.10 "
                     "(this one is older: what it lacks may show as findings)")
    assert main(["modes", "--framework", ADAPTERS + "ModalAdapter"]) == 0
    assert "oldest release" not in capsys.readouterr().out


def test_modes_of_a_framework_that_cannot_load_gives_its_reason(capsys):
    assert main(["modes", "--framework", ADAPTERS + "UnloadableAdapter"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("(not loaded here)")
    assert [line.split()[0] for line in lines[1:]] == ["eager"]
    assert "not usable here: No module named 'numpy_kl'" in lines[1]


def test_modes_refuses_an_unknown_framework_in_one_line(capsys):
    assert main(["modes", "--framework", "no-such-framework"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--framework" in err and "no-such-framework" in err


def _run(tmp_path, *extra, out="out"):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    return main(["run", "--framework", ADAPTERS + "ModalAdapter", "--cases", str(cases), "--suite", "none",
                 "--part", "forward", "--out", str(tmp_path / out), "--no-progress", *extra])


def _scripts(folder):
    return {p.name: p.read_text() for p in folder.glob("*.py") if not p.name.endswith(".snippet.py")}


def test_a_run_writes_each_rows_reproducer_in_the_rows_mode(tmp_path):
    """The shifted mode's divergence was written as an eager script (eager's right answer): the reproducer
    did not show the finding. Now the script is written in the row's mode, under a name that holds it."""
    assert _run(tmp_path, "--mode", "eager", "--mode", "shifted") == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    diverging = [r for r in rows if r["verdict"] != "pass"]
    assert [(r["case_id"], r["mode"]) for r in diverging] == [("the-fault", "shifted")]
    scripts = _scripts(tmp_path / "out" / "repro")
    assert len(scripts) == 1
    (name, text), = scripts.items()
    assert "shifted" in name and "# mode: shifted" in text and "+ 1.0" in text
    assert "mode shifted" in text.splitlines()[1] or "mode shifted" in text
    # a run's script of a compiled mode keeps its whole case: minimising would compile each candidate's shape
    assert "x_values = values([" in text and text.split("x_values = values(")[1].split("\n")[0].endswith("(2, 2))")
    # the defect's upstream snippet too is written in the mode: an eager one showed eager's right answer
    (snippet,) = (tmp_path / "out" / "repro").glob("*.snippet.py")
    assert "+ 1.0" in snippet.read_text(), snippet.read_text()


def test_repro_all_writes_each_script_in_its_rows_mode(tmp_path):
    assert _run(tmp_path, "--mode", "shifted", "--no-repro") == 0
    assert main(["repro", "--all", str(tmp_path / "again"), "--from", str(tmp_path / "out"),
                 "--framework", ADAPTERS + "ModalAdapter"]) == 0
    (name, text), = _scripts(tmp_path / "again").items()
    assert "shifted" in name and "# mode: shifted" in text and "+ 1.0" in text


def test_repro_mode_makes_the_call_and_the_script_in_that_mode(tmp_path, capsys):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    common = ["repro", "the-fault", "--framework", ADAPTERS + "ModalAdapter", "--cases", str(cases)]
    assert main([*common, "--mode", "shifted"]) == 0
    shifted = capsys.readouterr().out
    assert "# mode: shifted" in shifted and "+ 1.0" in shifted
    # minimised in the mode: the shifted call diverges on one element alone, so the script holds one
    assert "mode shifted" in shifted
    assert main(common) == 0
    eager = capsys.readouterr().out
    assert "# mode: eager" in eager and "+ 1.0" not in eager


def test_repro_refuses_a_mode_the_adapter_lacks_or_cannot_run(tmp_path, capsys):
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    common = ["repro", "the-fault", "--framework", ADAPTERS + "ModalAdapter", "--cases", str(cases)]
    assert main([*common, "--mode", "no-such-mode"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--mode" in err and "'shifted'" in err
    assert main([*common, "--mode", "missing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kl_conformance_no_such_runtime is not installed" in err
    # a gradient in a mode without autograd is refused as the run reports it: unsupported, with the reason
    assert main([*common, "--mode", "forward-only", "--part", "grad_input"]) == 2
    assert "mode forward-only has no gradients" in capsys.readouterr().err


def _selftest(tmp_path, *extra):
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n")
    return main(["selftest", "--framework", ADAPTERS + "ModalAdapter", "--suite", "none", "--cases", str(cases),
                 "--out", str(tmp_path / "out"), "--variant", "value_outside_rounding", *extra])


def test_selftest_plants_its_faults_through_each_mode_asked_for(tmp_path):
    """Each mode's planted call is a row of its own: one planted fault per mode, each flagged."""
    assert _selftest(tmp_path, "--mode", "eager", "--mode", "shifted") == 0
    out = tmp_path / "out"
    report = json.loads((out / "selftest.json").read_text())
    assert [(v["name"], v["planted"], v["flagged"]) for v in report["variants"]] == [("value_outside_rounding", 2, 2)]
    for run in ("control", "value_outside_rounding"):
        modes = [json.loads(line)["mode"] for line in (out / run / "results.jsonl").read_text().splitlines()]
        assert set(modes) == {"eager", "shifted"}
    assert "in mode shifted" in (out / "selftest.md").read_text().splitlines()[0]


def test_selftest_through_a_mode_that_cannot_run_is_incomplete_and_an_unknown_one_refused(tmp_path, capsys):
    assert _selftest(tmp_path, "--mode", "missing") == 3
    err = capsys.readouterr().err
    assert "mode missing" in err and "kl_conformance_no_such_runtime is not installed" in err
    assert not (tmp_path / "out" / "selftest.json").exists()
    assert _selftest(tmp_path, "--mode", "no-such-mode", "--force") == 2
    assert "unknown mode 'no-such-mode'" in capsys.readouterr().err


def test_api_run_makes_the_calls_in_each_mode(tmp_path):
    import conformance.api as kl

    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    outcome = kl.run(ADAPTERS + "ModalAdapter", selection=kl.Selection(suite="none", case_files=(str(cases),)),
                     parts=("forward",), modes=("eager", "shifted", "missing"))
    verdicts = {(r.case_id, r.mode): r.verdict.value for r in outcome.rows}
    assert verdicts == {("ok-one", "eager"): "pass", ("the-fault", "eager"): "pass",
                        ("ok-one", "shifted"): "pass", ("the-fault", "shifted"): "value"}
    assert outcome.manifest["modes_not_run"] == {"missing": "kl_conformance_no_such_runtime is not installed"}


def test_the_pytest_plugin_makes_items_per_mode(tmp_path):
    """--kl-mode: one item per mode, the mode in its name; the shifted mode's divergence fails with a repro
    command in that mode; a mode that cannot run here skips its items with the reason."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.append({str(root)!r})\n")
    (tmp_path / "cases.yaml").write_text(CASES)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                           "--kl-framework", ADAPTERS + "ModalAdapter", "--kl-cases", "cases.yaml", "--kl-suite",
                           "none", "--kl-part", "forward", "--kl-mode", "eager", "--kl-mode", "shifted",
                           "--kl-mode", "missing"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "1 failed, 3 passed, 2 skipped" in output, output
    assert "FAILED kl-conformance[numpy-test]::the-fault[numpy.kl_div-cpu-shifted-forward]" in output
    assert "--mode=shifted --part=forward" in output
    assert "mode missing cannot run here: kl_conformance_no_such_runtime is not installed" in output
