"""Reproducers drive `git bisect run`: exit 1 while the run's finding reproduces, 0 once the call conforms to
the spec, 125 (skip) when the script cannot tell. Judged by the script itself with plain NumPy."""

from __future__ import annotations

import math
import subprocess
import sys

from conformance.cli import main

ADAPTERS = "tests.faults.adapters:"


def _reproducer(tmp_path, capsys, adapter: str, case: str) -> str:
    cases = tmp_path / "cases.yaml"
    cases.write_text(case + "\n")
    assert main(["repro", "the-fault", "--framework", ADAPTERS + adapter, "--cases", str(cases)]) == 0
    return capsys.readouterr().out


def _exit_code(tmp_path, script: str) -> tuple[int, str]:
    path = tmp_path / "repro.py"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


CASE = "- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}"


def test_a_divergence_exits_1_and_the_same_script_conforming_exits_0(tmp_path, capsys):
    script = _reproducer(tmp_path, capsys, "OffByOneAdapter", CASE)
    code, out = _exit_code(tmp_path, script)
    assert code == 1, out
    # decimal beside the exact hex: minimised to the first element, off by one: 1 + 0.25 * (log(0.25) + 1)
    got = 1.0 + 0.25 * (math.log(0.25) + 1.0)
    assert float(got).hex() in out and repr(got) in out
    assert "+ 1.0" in script
    fixed, out = _exit_code(tmp_path, script.replace(" + 1.0", ""))  # the framework's fix, as a bisect finds it
    assert fixed == 0, out


def test_a_failing_import_or_another_failure_is_a_skip(tmp_path, capsys):
    code, out = _exit_code(tmp_path, _reproducer(tmp_path, capsys, "UnimportableScriptAdapter", CASE))
    assert code == 125 and "kl_conformance_no_such_framework" in out, out
    script = _reproducer(tmp_path, capsys, "OffByOneAdapter", CASE)
    other, out = _exit_code(tmp_path, script.replace(" + 1.0", " + int('not a number')"))  # a ValueError now
    assert other == 125, out


def test_an_r_reproducer_without_the_torch_package_is_a_skip(tmp_path):
    """R torch's reproducers are R scripts: where the torch package does not load, they exit 125 too. Runs where
    R is installed without that package (rendering needs neither)."""
    import shutil

    import numpy as np
    import pytest

    from conformance.adapters.registry import get_adapter
    from conformance.core.model import Expected
    from tests.helpers import make_case

    rscript = shutil.which("Rscript")
    if rscript is None:
        pytest.skip("no Rscript here")
    loads = subprocess.run([rscript, "-e", 'quit(status = if (requireNamespace("torch", quietly = TRUE)) 0 else 3)'],
                           capture_output=True, timeout=120)
    if loads.returncode != 3:
        pytest.skip("the torch package loads in this R")
    adapter = get_adapter("rtorch")
    case = make_case([[-1.0, -2.0]], [[0.25, 0.75]], reduction="none", dtype="float32", case_id="c")
    expected = Expected(result_dtype="float32", shape=(1, 2), value=np.zeros((1, 2)), bound=np.zeros((1, 2)))
    script, suffix = adapter.repro_script(case, adapter.apis[0], "cpu", "forward", ("a", "b", "c."), expected)
    path = tmp_path / f"repro{suffix}"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run([rscript, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 125 and "cannot tell" in done.stdout, done.stdout + done.stderr


def test_a_framework_that_does_not_load_is_one_line_and_no_script(tmp_path, capsys):
    """Writing a reproducer runs the call once (to minimise it): where the framework does not import, `repro`
    says so in one line and writes nothing, as `repro --all` does, where it gave a traceback (keras without its
    backend installed). A --profiles DIR that cannot be read is refused whatever the call answers: it was read only
    for a call that diverged."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASE + "\n" + CASE.replace("the-fault", "ok-1") + "\n")
    code = main(["repro", "the-fault", "--framework", ADAPTERS + "UnloadableAdapter", "--cases", str(cases)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "No module named 'numpy_kl'" in lines[0] and "write the reproducer where" in lines[0]
    for case in ("ok-1", "the-fault"):
        assert main(["repro", case, "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases),
                     "--profiles", str(tmp_path / "nowhere")]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "--profiles" in captured.err and len(captured.err.strip().splitlines()) == 1


def test_a_reproducer_from_a_run_is_judged_by_the_profiles_the_run_recorded(tmp_path, capsys):
    """`repro CASE --from RUN` with other deviation profiles than the run judged by is refused in one line, as
    `repro --all --from RUN` refuses them: a row judged beside one set would be reproduced beside another."""
    import shutil

    from conformance.core.profilefile import default_profiles_dir

    cases = tmp_path / "cases.yaml"
    cases.write_text(CASE + "\n")
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / "run"), "--no-progress", "--no-repro"]) == 0
    capsys.readouterr()
    shutil.copytree(default_profiles_dir(), tmp_path / "other")
    (tmp_path / "other" / "extra.yaml").write_text("framework: extra\ndeviations: []\n")
    base = ["repro", "the-fault", "--framework", ADAPTERS + "OffByOneAdapter", "--from", str(tmp_path / "run")]
    assert main([*base, "--profiles", str(tmp_path / "other")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "other deviation profiles" in captured.err
    assert main(base) == 0 and "the-fault" in capsys.readouterr().out  # the run's own profiles: a script


def test_a_reproducer_shows_the_element_its_row_shows_or_the_whole_case(tmp_path, capsys):
    """Minimising kept the first single element that diverged alone with the row's verdict: where the row's own
    element conforms alone (a kernel wrong on whole vector blocks, right on one element), it took another that
    diverges alone for another reason (Paddle's exp rows, minimised to a NaN input's). It keeps the whole case."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: block, input: [[-1.0, -2.0], [-3.0, -4.0]], target: [[0.25, 0.75], [0.5, 0.5]], "
                     "reduction: none, dtype: float64}\n")
    assert main(["run", "--framework", ADAPTERS + "BlockPathAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / "run"), "--no-progress", "--no-repro", "--part", "forward"]) == 0
    assert main(["repro", "--all", str(tmp_path / "all"), "--from", str(tmp_path / "run"), "--framework",
                 ADAPTERS + "BlockPathAdapter"]) == 0
    capsys.readouterr()
    script = next((tmp_path / "all").glob("*.py")).read_text()
    assert "x_values = values(" in script and ", (2, 2))" in script.split("x_values = values(", 1)[1].split("\n")[0]
    code, out = _exit_code(tmp_path, script)
    assert code == 1, out  # it still shows the row's finding
