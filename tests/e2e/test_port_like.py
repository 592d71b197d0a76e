"""A port that copies torch (torch's adapter under another name), judged like torch: it has exactly torch's
undocumented findings; judged on its own, more. Runs only with --framework torch."""

from __future__ import annotations

import json
import sys
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
