"""Reproducers: standalone scripts that run in the framework's environment and show the divergence."""

from __future__ import annotations

import re
import subprocess
import sys

from conformance.cli import main
from conformance.core.results import iter_results

PER_RUN = 10  # one reproducer per cause group, up to this many
R_FRAMEWORKS = {"rtorch"}  # frameworks whose reproducers are R scripts


def _run_script(framework: str, script: str, tmp_path) -> subprocess.CompletedProcess:
    """Save the reproducer with its language's suffix and run it: R ones with the R and library path
    the adapter uses (KL_RSCRIPT, KL_RTORCH_LIB), as a user runs them with their R."""
    if framework in R_FRAMEWORKS:
        from conformance.adapters.rtorch import find_rscript, r_environment

        path = tmp_path / "repro.R"
        path.write_text(script)
        return subprocess.run([find_rscript(), str(path)], capture_output=True, text=True, timeout=300,
                              env=r_environment())
    path = tmp_path / "repro.py"
    path.write_text(script)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)


def _opens_as_reproducer(script: str) -> bool:
    return script.startswith(('"""Reproduces kl_div case', "# Reproduces kl_div case"))


def _printed(output: str, label: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith(label))
    return line[len(label):].strip()


def test_each_cause_has_a_reproducer_that_shows_it(default_run, tmp_path, capsys):
    framework, out = default_run
    seen, picked = set(), []
    for r in iter_results(out):
        if r.verdict.is_divergence and not r.documented and r.verdict.value not in ("crash", "timeout") \
                and (r.cause, r.verdict) not in seen:
            seen.add((r.cause, r.verdict))
            picked.append(r)
    assert picked
    for r in picked[:PER_RUN]:
        assert main(["repro", r.case_id, "--framework", framework, "--api", r.api, "--device", r.device,
                     "--part", r.part, "--from", str(out)]) == 0
        script = capsys.readouterr().out
        assert _opens_as_reproducer(script) and "import conformance" not in script
        done = _run_script(framework, script, tmp_path)
        # a reproducer exits 1 while its finding reproduces (for `git bisect run`)
        assert done.returncode == 1, done.stdout[-800:] + done.stderr[-800:]
        got, want = _printed(done.stdout, f"{framework}:"), _printed(done.stdout, "expected:")
        assert got != want, f"{r.case_id} {r.api} {r.part}: the reproducer shows no divergence ({got})"


def test_repro_minimises_to_one_element(default_run, capsys):
    framework, out = default_run
    r = next(r for r in iter_results(out) if r.verdict.value == "nonfinite" and r.case_id.startswith("fwd/none/")
             and "/4x6/" in r.case_id and not r.documented)
    assert main(["repro", r.case_id, "--framework", framework, "--api", r.api, "--part", r.part,
                 "--from", str(out)]) == 0
    script = capsys.readouterr().out
    if framework in R_FRAMEWORKS:
        assert "x_values <- c(" in script and "x_shape <- c(1L, 1L)" in script
    else:
        assert "x_values = values([" in script and ", (1, 1))" in script


def _takes_log_targets_only(framework: str) -> bool:
    """Whether every API of `framework` takes the target as log-probabilities only (MLX)."""
    from conformance.adapters.registry import get_adapter

    return all(api.only_log_target for api in get_adapter(framework).apis)


def _takes_probabilities(framework: str) -> bool:
    """Whether every API of `framework` takes probabilities as input (Keras): user cases must be written so."""
    from conformance.adapters.registry import get_adapter

    return all(api.prob_input for api in get_adapter(framework).apis)


def test_repro_of_a_user_case_from_the_run_directory(default_run, tmp_path, capsys):
    framework, _ = default_run
    cases = tmp_path / "mine.yaml"
    # written as the framework's APIs take it: probabilities (Keras), log targets only (MLX), or as torch does
    cases.write_text("- {id: my-zero-target, input: [0.0, 0.25], target: [0.0, 0.5], reduction: none, "
                     "input_space: probability}\n" if _takes_probabilities(framework) else
                     "- {id: my-zero-target, input: [-.inf, -1.0], target: [-.inf, -0.6931471805599453], "
                     "reduction: none, log_target: true}\n" if _takes_log_targets_only(framework) else
                     "- {id: my-zero-target, input: [-.inf, -1.0], target: [0.0, 0.5], reduction: none}\n")
    run = tmp_path / "run"
    assert main(["run", "--framework", framework, "--cases", str(cases), "--suite", "none", "--out", str(run),
                 "--no-progress", "--part", "forward"]) == 0
    cases.unlink()  # the run directory keeps its own copy
    assert main(["repro", "my-zero-target", "--framework", framework, "--from", str(run)]) == 0
    assert "Reproduces kl_div case my-zero-target" in capsys.readouterr().out


def test_repro_of_an_unknown_case_is_a_usage_error(default_run, capsys):
    framework, _ = default_run
    assert main(["repro", "no-such-case", "--framework", framework]) == 2
    assert "not a generated id" in capsys.readouterr().err


def test_run_writes_a_reproducer_per_undocumented_defect(default_run):
    """One script per undocumented defect a call can show again (of its example, its simplest row), and for a
    Python framework the defect's snippet beside it; `repro --all` writes every row's."""
    framework, out = default_run
    defects = {r.defect for r in iter_results(out) if r.verdict.is_divergence and not r.documented
               and r.verdict.value not in ("crash", "timeout")}
    scripts = [s for s in (out / "repro").glob("*.R" if framework in R_FRAMEWORKS else "*.py")
               if not s.name.endswith(".snippet.py")]
    assert len(scripts) == len(defects) > 0
    assert all(_opens_as_reproducer(s.read_text()) for s in scripts[:20])
    snippets = {s.name.removesuffix(".snippet.py") for s in (out / "repro").glob("*.snippet.py")}
    assert snippets == (set() if framework in R_FRAMEWORKS else defects)
    # a draft's environment is the framework's: for R torch the harness's Python and NumPy are said to be its own
    environments = [d.read_text().split("## Environment", 1)[1].split("##", 1)[0] for d in (out / "issues").glob("*.md")]
    assert environments and all(("- the harness that judged it: Python " in e) == (framework in R_FRAMEWORKS)
                                for e in environments)


def _holds_one_element(script: str, framework: str) -> bool:
    if framework in R_FRAMEWORKS:
        return re.search(r"x_shape <- c\((1L, )*1L\)", script) is not None
    return re.search(r"x_values = values\(\[[^\]]*\], \((1, )*1,?\)\)", script) is not None


def test_every_divergence_is_minimised_with_its_progress_shown(default_run, tmp_path):
    """Each reproducer holds a single element exactly when the element its row shows (any element, where it
    shows none) alone diverges with the run's verdict: checked
    here element by element, one call each, for a sample of the run's divergences. The phase reports its
    progress to the run's bar."""
    from dataclasses import replace

    import numpy as np

    from conformance.adapters.registry import get_adapter
    from conformance.core.rundirs import script_name
    from conformance.core.specload import load_spec
    from conformance.judge.casejudge import expected_for
    from conformance.judge.compare import classify, shown_at
    from conformance.repro.minimise import MAX_CANDIDATES
    from conformance.repro.scripts import write_all
    from conformance.repro.source import CaseSource

    framework, out = default_run
    spec = load_spec()
    shown = []
    written, whole = write_all(str(out), spec, tmp_path / "repro", cache_dir=tmp_path / "cache",
                               progress=lambda done, total: shown.append((done, total)))
    rows = [r for r in iter_results(out) if r.verdict.is_divergence and not r.documented
            and r.verdict.value not in ("crash", "timeout")]
    assert whole == 0 and written == len(rows) > 0  # every undocumented row's, not the run's one per defect
    assert shown[-1] == (written, written) and [d for d, _ in shown] == sorted(d for d, _ in shown)
    adapter = get_adapter(framework)
    adapter.load()
    checked = 0
    cases = CaseSource(str(out), None, None)
    for r in rows:
        case = cases.get(r.case_id)
        if case.input.shape != case.target.shape or case.input.size <= 1 or checked >= 12:
            continue
        checked += 1
        api = adapter.api(r.api)
        shape = (1,) * case.input.ndim
        # the element the row shows, alone, where it shows one of the input's shape; else any element
        at = shown_at(r.message)
        inside = at is not None and len(at) == case.input.ndim \
            and all(0 <= i < n for i, n in zip(at, case.input.shape))
        elements = ([int(np.ravel_multi_index(at, case.input.shape))] if inside
                    else range(min(case.input.size, MAX_CANDIDATES)))
        one_diverges = any(
            classify(expected_for(one, spec, r.part, api.dialect), adapter.run(one, api, r.device, r.part),
                     spec).verdict is r.verdict
            for one in (replace(case, input=np.full(shape, case.input.reshape(-1)[i]),
                                target=np.full(shape, case.target.reshape(-1)[i]), layout="contiguous")
                        for i in elements))
        suffix = ".R" if framework in R_FRAMEWORKS else ".py"
        script = (tmp_path / "repro" / script_name(r.case_id, r.api, r.device, r.part, suffix)).read_text()
        assert _holds_one_element(script, framework) == one_diverges, (r.case_id, r.api, r.part)
    assert checked


def test_a_row_judged_beside_the_profile_is_reproduced_beside_it(default_run, tmp_path):
    """`repro --all` judged such a row against the spec alone: a value divergence that remains beside NaNs the
    profile documents was written as a script that showed the documented NaNs (and still failed once the
    undocumented part was fixed). The script is judged as the run judged the row, by the spec with the API's
    declared deviations applied, and says so."""
    import pytest

    from conformance.core.defects import BESIDE_PROFILE
    from conformance.core.rundirs import script_name

    framework, out = default_run
    if framework in R_FRAMEWORKS:
        pytest.skip("R torch's scripts state no judgement of their own")
    beside = [r for r in iter_results(out) if BESIDE_PROFILE in r.message and not r.is_accepted
              and r.verdict.is_finding]
    if not beside:
        pytest.skip(f"no row of {framework}'s default run is judged beside its profile")
    assert main(["repro", "--all", str(tmp_path / "all"), "--from", str(out), "--framework", framework]) == 0
    for r in beside[:: max(1, len(beside) // 3)][:3]:
        text = (tmp_path / "all" / script_name(r.case_id, r.api, r.device, r.part, ".py", r.mode)).read_text()
        judged = text.splitlines()[2]
        assert "of its profile applied" in judged, judged
        assert judged.split("): ", 1)[1].startswith(f"{r.verdict.value}:"), (r.message, judged)
        assert _run_script(framework, text, tmp_path).returncode == 1  # it reproduces the row's finding
    # by the profiles the run judged by: an exact copy of them is the same, another set is refused in one line
    import shutil

    from conformance.core.profilefile import default_profiles_dir

    shutil.copytree(default_profiles_dir(), tmp_path / "same")
    assert main(["repro", "--all", str(tmp_path / "again"), "--from", str(out), "--framework", framework,
                 "--profiles", str(tmp_path / "same")]) == 0
    shutil.copytree(default_profiles_dir(), tmp_path / "other")
    (tmp_path / "other" / "extra.yaml").write_text("framework: extra\ndeviations: []\n")
    assert main(["repro", "--all", str(tmp_path / "refused"), "--from", str(out), "--framework", framework,
                 "--profiles", str(tmp_path / "other")]) == 2
    assert not (tmp_path / "refused").exists() or not list((tmp_path / "refused").glob("*.py"))
