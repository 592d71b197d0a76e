"""A port that copies torch (torch's adapter under another name), judged like torch: it has exactly torch's
undocumented findings; judged on its own, more. With torch's recorded run (--like-run), each divergent row of a
port says shared or own: a copy's are all shared; a port whose sum is twice torch's has those rows as its own.
Runs only with --framework torch."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.adapters.torch import TorchAdapter
from conformance.cli import main
from conformance.core.results import iter_results

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # the worker imports this module by its dotted name
    sys.path.append(ROOT)

# a few globs: documented torch behaviours (batchmean's divisor, the integral-dtype error) beside undocumented ones
ONLY = ["--only", "fwd/*/log_target=0/4x6/float32/negative_target/*",
        "--only", "fwd/*/log_target=0/4x6/float32/zero_prob/*",
        "--only", "fwd/batchmean/*/6:4x6/*", "--only", "fwd/sum/*/4x6/int64*"]


class TorchCopy(TorchAdapter):
    """torch under another name: a port that copies torch exactly."""

    name = "torch-copy"


class TorchOwnSum(TorchCopy):
    """A copy of torch with a bug of its own: the forward value of a sum is twice torch's."""

    def run(self, case, api, device, part):
        seen = super().run(case, api, device, part)
        if part == "forward" and case.params.reduction == "sum" and seen.value is not None:
            return dataclasses.replace(seen, value=seen.value * 2)
        return seen


class TorchOwnError(TorchCopy):
    """A copy of torch that refuses integral inputs with a ValueError of its own where torch raises a RuntimeError:
    the same verdict and cause as torch's row (errors.integral_dtype), another exception, so its own."""

    def invoke(self, case, api, inputs, mode="eager"):
        if not inputs[0].dtype.is_floating_point:
            raise ValueError("integral inputs are refused")
        return super().invoke(case, api, inputs, mode)


def _undocumented(out: Path) -> list[tuple]:
    return sorted((r.case_id, r.api, r.device, r.part, r.verdict.value, r.cause) for r in iter_results(out)
                  if r.verdict.is_divergence and not r.is_accepted)


def test_a_port_that_copies_torch_has_torchs_undocumented_findings_like_torch(framework, tmp_path):
    if framework != "torch":
        pytest.skip("the port copies torch: run with --framework torch")
    port = f"{__name__}:TorchCopy"

    def run(framework_name: str, out: str, *extra: str) -> Path:
        assert main(["run", "--framework", framework_name, *ONLY, "--out", str(tmp_path / out), "--no-progress",
                     "--no-repro", *extra]) == 0
        return tmp_path / out
    torch_run = run("torch", "torch")
    theirs = _undocumented(torch_run)
    assert theirs and any(r.documented for r in iter_results(torch_run))
    like = run(port, "like", "--like", "torch", "--like-run", str(torch_run))
    assert _undocumented(like) == theirs
    marks = json.loads((like / "summary.json").read_text())["like"]
    assert marks["own"] == 0 and marks["shared"] == marks["divergences"] > 0
    alone = run(port, "alone")
    assert set(theirs) < set(_undocumented(alone))


def test_each_divergence_of_a_port_of_torch_says_shared_or_own(framework, tmp_path, capsys):
    if framework != "torch":
        pytest.skip("the port copies torch: run with --framework torch")

    def run(framework_name: str, out: str, *extra: str) -> int:  # with two sums torch computes right
        return main(["run", "--framework", framework_name, *ONLY,
                     "--only", "fwd/sum/log_target=0/4x6/float32/softmax/*",
                     "--only", "fwd/sum/log_target=0/4x6/float32/onehot/*", "--out", str(tmp_path / out),
                     "--no-progress", "--no-repro", *extra])
    assert run("torch", "torch") == 0
    like = ["--like", "torch", "--like-run", str(tmp_path / "torch")]
    assert run(f"{__name__}:TorchCopy", "copy", *like, "--fail-on-own") == 0
    copy = [r for r in iter_results(tmp_path / "copy") if r.verdict.is_divergence]
    assert copy and {r.like for r in copy} == {"shared"}
    assert run(f"{__name__}:TorchOwnSum", "own", *like) == 0
    rows = list(iter_results(tmp_path / "own"))
    divergent = [r for r in rows if r.verdict.is_divergence]
    own = [r for r in divergent if r.like == "own"]
    assert own and all(r.part == "forward" and "/sum/" in r.case_id for r in own)
    assert all(r.like == "shared" for r in divergent if "/sum/" not in r.case_id)
    assert all(r.like is None for r in rows if not r.verdict.is_divergence)
    properties = [p.get("value") for p in ET.parse(tmp_path / "own" / "junit.xml").iter("property")
                  if p.get("name") == "like"]
    assert sorted(properties) == sorted(r.like for r in divergent)
    undocumented_own = [r for r in own if not r.is_accepted]
    capsys.readouterr()
    assert run(f"{__name__}:TorchOwnSum", "own-gate", *like, "--fail-on-own") == (1 if undocumented_own else 0)
    assert f"own: {len(undocumented_own)} undocumented" in capsys.readouterr().err


def test_the_plugin_marks_and_gates_a_port_as_run_does(framework, tmp_path, capsys):
    """--kl-like, --kl-like-run and --kl-fail-on-own: the port's own divergences fail their items, the shared ones
    xfail with the recorded run named, and the session decides as `run --fail-on-own` does."""
    if framework != "torch":
        pytest.skip("the port copies torch: run with --framework torch")
    only = [*ONLY, "--only", "fwd/sum/log_target=0/4x6/float32/softmax/*"]
    assert main(["run", "--framework", "torch", *only, "--out", str(tmp_path / "torch"), "--no-progress",
                 "--no-repro"]) == 0
    like = ["--like", "torch", "--like-run", str(tmp_path / "torch"), "--fail-on-own"]
    capsys.readouterr()
    code = main(["run", "--framework", f"{__name__}:TorchOwnSum", *only, *like, "--out", str(tmp_path / "own"),
                 "--no-progress", "--no-repro"])
    decision = [line for line in capsys.readouterr().err.splitlines() if "gate failed" in line]
    own = [r for r in iter_results(tmp_path / "own") if r.like == "own" and not r.is_accepted]
    assert code == 1 and own and len(decision) == 1, decision
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(f"import sys\nsys.path.append({ROOT!r})\n")
    junit = project / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rx", f"--junitxml={junit}",
                           "--kl-framework", f"{__name__}:TorchOwnSum",
                           *[f"--kl-{arg[2:]}" if arg.startswith("--") else arg for arg in [*only, *like]]],
                          cwd=project, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and decision[0] in output, output
    failed = {c.get("name") for c in ET.parse(junit).iter("testcase") if c.find("failure") is not None}
    shown = {f"{r.case_id}[{r.api}-{r.device}-{r.part}]" for r in own}
    assert failed == shown, (failed, shown)
    assert "like:    own (not in torch's recorded run" in output  # a failing item says the divergence is own
    assert "shared with torch's recorded run" in output  # -rx: a shared one xfails, naming the recorded run
    # a baseline that holds each own divergence unchanged: --kl-fail-on-own still fails them, as `run` does (the
    # items xfailed as "unchanged since the baseline" while the session failed on them)
    done = subprocess.run([*done.args, "--kl-baseline", str(tmp_path / "own")], cwd=project, capture_output=True,
                          text=True, timeout=900)
    failed = {c.get("name") for c in ET.parse(junit).iter("testcase") if c.find("failure") is not None}
    assert done.returncode == 1 and failed == shown, (failed, shown, done.stdout[-2000:])
    # own where only the observation differs (torch's row has the same verdict and cause): the session's gate
    # reads the rows as their run marked them, as `run` decides, with a baseline that accepts every row too
    integral = ["--only", "fwd/sum/*/4x6/int64*"]
    port = ["--framework", f"{__name__}:TorchOwnError", *integral, *like, "--no-progress", "--no-repro"]
    capsys.readouterr()
    assert main(["run", *port, "--out", str(tmp_path / "raise")]) == 1
    decision = [line for line in capsys.readouterr().err.splitlines() if "gate failed" in line]
    assert len(decision) == 1 and "own: 0 undocumented" not in decision[0], decision
    for extra in ([], ["--kl-baseline", str(tmp_path / "raise")]):
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               *[f"--kl-{arg[2:]}" if arg.startswith("--") else arg for arg in port[:-2]], *extra],
                              cwd=project, capture_output=True, text=True, timeout=900)
        output = done.stdout + done.stderr
        counted = re.search(r"own: \d+ undocumented; shared: \d+ undocumented", decision[0]).group()
        assert done.returncode == 1 and f"{counted}; gate failed" in output, output
