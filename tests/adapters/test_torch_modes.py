"""torch's modes beside eager, on real torch: Inductor (`torch.compile`) and the ONNX export run by onnxruntime.

A compiled mode must prove it compiled: Dynamo silently runs a call eagerly once a function passes its recompile
limit, so a naive compiled run quietly becomes an eager one. LowLimitTorch lowers the limit to force that fallback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.adapters.torch import TorchAdapter
from conformance.cli import main
from conformance.core.model import Expected
from conformance.core.results import iter_results
from tests.helpers import make_case

FRAMEWORK = "torch"
HERE = "tests.adapters.test_torch_modes:"
ROOT = str(Path(__file__).resolve().parents[2])  # for the worker to import this module's adapter

# float16 `mean` (issue 29): eager rounds each term to float16, so 5 * (log 5 + 60000) overflows to +inf as the
# spec's reductions.operand says; Inductor keeps the terms in float32 and returns 300008 / 6, rounded: 50016
FLOAT16_MEAN = ("- {id: f16-mean, input: [[-60000.0, 0.0, 0.0], [0.0, 0.0, 0.0]], "
                "target: [[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]], reduction: mean, dtype: float16}\n")
# one call signature (the same API and arguments) in several shapes: a compile each
SHAPES = "".join(f"- {{id: sum-{n}, input: {[[-1.0, -2.0]] * n}, target: {[[0.25, 0.75]] * n}, reduction: sum, "
                 f"dtype: float32}}\n" for n in (1, 2, 3, 4))


class LowLimitTorch(TorchAdapter):
    """torch with Dynamo's recompile limit at 1: from a function's second signature on, Dynamo runs it eagerly."""

    recompile_limit = 1


@pytest.fixture
def torch_adapter(framework_adapter):
    return framework_adapter


def _run(tmp_path, cases: str, *extra, framework="torch", out="out"):
    path = tmp_path / "cases.yaml"
    path.write_text(cases)
    code = main(["run", "--framework", framework, "--cases", str(path), "--suite", "none", "--out",
                 str(tmp_path / out), "--no-progress", "--no-repro", "--part", "forward", *extra])
    return code, {(r.case_id, r.api, r.mode): r for r in iter_results(tmp_path / out)}


def test_modes_are_named_as_the_issue_names_them(torch_adapter):
    assert torch_adapter.mode_names() == ("eager", "inductor", "inductor-emulated", "onnx-torchscript", "onnx-dynamo")
    gradients = {m.name: m.gradients for m in torch_adapter.modes}
    assert gradients == {"inductor": True, "inductor-emulated": True, "onnx-torchscript": False, "onnx-dynamo": False}


def test_dynamo_falling_back_to_eager_is_a_fallback_row(torch_adapter, tmp_path, monkeypatch):
    """Past the recompile limit Dynamo runs the call eagerly and returns eager's (right) answer: each such row is
    `fallback`, never a pass; the first signature, which did compile, passes."""
    monkeypatch.setattr(sys, "path", [*sys.path, ROOT])  # a spawned worker starts with this sys.path
    code, rows = _run(tmp_path, SHAPES, "--mode", "inductor", "--api", "torch.nn.functional.kl_div",
                      framework=HERE + "LowLimitTorch")
    verdicts = {case: r.verdict.value for (case, _, mode), r in rows.items() if mode == "inductor"}
    assert verdicts == {"sum-1": "pass", "sum-2": "fallback", "sum-3": "fallback", "sum-4": "fallback"}
    fallback = rows[("sum-2", "torch.nn.functional.kl_div", "inductor")]
    assert "Dynamo ran the call eagerly" in fallback.message and "recompile limit" in fallback.message


def test_a_compiled_run_of_several_signatures_does_not_fall_back(torch_adapter, tmp_path):
    code, rows = _run(tmp_path, SHAPES, "--mode", "inductor", "--api", "torch.nn.functional.kl_div")
    assert {r.verdict.value for r in rows.values()} == {"pass"} and len(rows) == 4


def test_inductor_float16_intermediates_are_flagged_and_emulation_restores_eager(torch_adapter, tmp_path):
    code, rows = _run(tmp_path, FLOAT16_MEAN, "--mode", "eager", "--mode", "inductor", "--mode",
                      "inductor-emulated", "--api", "torch.nn.functional.kl_div")
    verdicts = {mode: r.verdict for (_, _, mode), r in rows.items()}
    assert verdicts["eager"].value == "pass" and verdicts["inductor-emulated"].value == "pass"
    assert verdicts["inductor"].is_divergence
    # documented by what Inductor's maintainers state of the mode (spec/profiles/torch.yaml), for that mode only
    inductor = rows[("f16-mean", "torch.nn.functional.kl_div", "inductor")]
    assert inductor.documented_by == ("inductor-keeps-half-precision-intermediates-in-float32",), inductor


def test_an_onnx_mode_cannot_be_fed_a_bfloat16_input_and_says_so(torch_adapter, tmp_path):
    """A mixed call with a bfloat16 input exports (the graph casts it), but onnxruntime is fed NumPy arrays, and
    NumPy has no bfloat16: an unsupported row with that reason, not the harness's own conversion error reported as
    the framework's."""
    case = ("- {id: bf16-f32, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, "
            "dtype: {input: bfloat16, target: float32}}\n")
    code, rows = _run(tmp_path, case, "--mode", "onnx-torchscript", "--mode", "onnx-dynamo")
    assert len(rows) == 4
    for row in rows.values():
        assert row.verdict.value == "unsupported" and "NumPy has no bfloat16" in row.message, row


@pytest.mark.parametrize("mode, value", [("eager", np.inf), ("inductor", 50016.0), ("inductor-emulated", np.inf)])
def test_the_modes_answers_of_the_float16_mean(torch_adapter, mode, value):
    case = make_case([[-60000.0, 0, 0], [0, 0, 0]], [[5.0, 0, 0], [0, 0, 0]], reduction="mean", dtype="float16")
    adapter = TorchAdapter()
    adapter.load()
    observed = adapter.run(case, adapter.apis[0], "cpu", "forward", mode)
    assert (observed.value, observed.dtype, observed.fallback) == (value, "float16", None)


def _script_result(adapter, case, mode, part, tmp_path, recorded="a value"):
    """The reproducer `repro_script` writes for `mode`, run with this environment's python: what it printed."""
    script, suffix = adapter.repro_script(case, adapter.apis[0], "cpu", part, ("a case", "a message", "its params."),
                                          Expected("float32", (), np.asarray(1.0), np.asarray(0.0)), recorded, mode)
    path = tmp_path / f"repro_{mode}{suffix}"
    path.write_text(script, encoding="utf-8")
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    (shown,) = [line for line in run.stdout.splitlines() if line.startswith("torch:")]
    return shown, run


@pytest.mark.parametrize("mode, part, expected", [
    # float16 mean: Inductor's float32 terms (eager: +inf)
    ("inductor", "forward", "array(50016.)"),
    # the TorchScript exporter's where(t > 0, ...): a NaN target gives 0 (eager: NaN)
    ("onnx-torchscript", "forward", "array(0.)"),
])
def test_a_reproducer_shows_the_modes_answer(torch_adapter, tmp_path, mode, part, expected):
    if mode == "inductor":
        case = make_case([[-60000.0, 0, 0], [0, 0, 0]], [[5.0, 0, 0], [0, 0, 0]], reduction="mean", dtype="float16")
    else:
        case = make_case([[-1.0]], [[np.nan]], reduction="sum", dtype="float32")
    adapter = TorchAdapter()
    adapter.load()
    observed = adapter.run(case, adapter.apis[0], "cpu", part, mode)
    shown, run = _script_result(adapter, case, mode, part, tmp_path)
    assert shown.startswith(f"torch:  {expected} ") and observed.value == float(expected[6:-1]), (shown, run.stderr)
    assert shown.endswith(observed.dtype) and run.returncode == 1, run.stdout + run.stderr[-2000:]


def test_inductor_keeps_its_cache_under_the_cache_dir(torch_adapter, tmp_path):
    code, rows = _run(tmp_path, SHAPES, "--mode", "inductor", "--api", "torch.nn.functional.kl_div", "--cache-dir",
                      str(tmp_path / "cache"), "--only", "sum-1")  # one compile, cold: the cache directory is new
    assert {r.verdict.value for r in rows.values()} == {"pass"} and len(rows) == 1
    assert any((tmp_path / "cache" / "torchinductor").rglob("*")), "Inductor wrote nothing under --cache-dir"


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_inductor_double_backward_is_never_a_pass(torch_adapter, layout, tmp_path):
    """AOTAutograd has no double backward: it raises, or (a non-contiguous input) the second gradient comes back
    None; either is a row of its own (an exception, MissingGradient), never eager's gradient."""
    case = make_case([[-1.0, -2.0], [-0.5, -1.5]], [[0.2, 0.3], [0.4, 0.1]], reduction="sum", dtype="float32",
                     layout=layout)
    adapter = TorchAdapter()
    adapter.load()
    eager = adapter.run(case, adapter.apis[0], "cpu", "grad2_input")
    observed = adapter.run(case, adapter.apis[0], "cpu", "grad2_input", "inductor")
    assert eager.value is not None and observed.value is None and observed.fallback is None
    assert observed.exception_type in ("RuntimeError", "MissingGradient"), observed
    if observed.exception_type == "RuntimeError":
        assert "does not currently support double backward" in observed.exception_message
        return
    # its reproducer differentiates as the run did, so it shows no gradient too (it raised an unrelated error)
    shown, run = _script_result(adapter, case, "inductor", "grad2_input", tmp_path,
                                recorded=f"raises {observed.exception_type}")
    assert shown.startswith(f"torch:  raises {observed.exception_type}") and run.returncode == 1, \
        run.stdout[-2000:] + run.stderr[-2000:]


def test_the_torchscript_exports_zero_at_a_negative_target_is_documented_for_that_mode_only(torch_adapter, tmp_path):
    """The TorchScript export writes where(target > 0, t(log t - x), 0): a negative target, outside the documented
    domain, gives 0 where eager gives NaN. The profile states it for mode onnx-torchscript (basis domain); the
    dynamo export, which gives eager's NaN, is not touched by it."""
    case = "- {id: neg, input: [[-1.0, -2.0]], target: [[-0.5, 0.5]], reduction: none, dtype: float32}\n"
    code, rows = _run(tmp_path, case, "--mode", "eager", "--mode", "onnx-torchscript", "--mode", "onnx-dynamo",
                      "--api", "torch.nn.functional.kl_div")
    exported = rows[("neg", "torch.nn.functional.kl_div", "onnx-torchscript")]
    assert exported.verdict.is_divergence and exported.documented_by == ("onnx-export-clamps-negative-targets",)
    for mode in ("eager", "onnx-dynamo"):
        assert rows[("neg", "torch.nn.functional.kl_div", mode)].verdict.value == "pass", mode


def test_the_exported_mean_of_no_terms_is_documented_by_onnx_for_the_onnx_modes_only(torch_adapter, tmp_path):
    """Both exporters write reduction='mean' as ONNX's ReduceMean, whose mean of an empty set ONNX leaves undefined;
    onnxruntime gives 0 where eager gives NaN. The profile states it for the ONNX modes (basis docs): eager's NaN
    passes, and Inductor is not touched by it."""
    case = "- {id: none-left, input: [[], [], []], target: [[], [], []], reduction: mean, dtype: float32}\n"
    code, rows = _run(tmp_path, case, "--mode", "eager", "--mode", "onnx-torchscript", "--mode", "onnx-dynamo",
                      "--api", "torch.nn.functional.kl_div")
    for mode in ("onnx-torchscript", "onnx-dynamo"):
        exported = rows[("none-left", "torch.nn.functional.kl_div", mode)]
        assert exported.verdict.is_divergence and exported.documented_by == ("onnx-mean-of-nothing-is-undefined",), \
            (mode, exported.message)
    assert rows[("none-left", "torch.nn.functional.kl_div", "eager")].verdict.value == "pass"


def test_exported_models_are_kept_under_the_cache_dir_and_read_back_unchanged(torch_adapter, tmp_path, monkeypatch):
    """Each ONNX model is exported once (adapters/onnxcache.py): a later run reads it back from --cache-dir, with
    the exporter unused, and gives the same rows."""
    cache = tmp_path / "cache"
    modes = ("--mode", "onnx-dynamo", "--mode", "onnx-torchscript", "--api", "torch.nn.functional.kl_div")
    _, cold = _run(tmp_path, SHAPES, *modes, "--cache-dir", str(cache), out="cold")
    assert len(list(cache.glob("onnx-*/*.onnx-entry"))) == 8  # four shapes, two exporters
    _, warm = _run(tmp_path, SHAPES, *modes, "--cache-dir", str(cache), out="warm")
    assert {k: (r.verdict, r.max_abs_err, r.message) for k, r in warm.items()} == \
        {k: (r.verdict, r.max_abs_err, r.message) for k, r in cold.items()}
    assert {r.verdict.value for r in cold.values()} == {"pass"} and len(cold) == 8

    def no_export(*args, **kwargs):
        raise AssertionError("exported again: the model was not read back from the cache")
    monkeypatch.setattr("conformance.adapters.torch._export", no_export)
    adapter = TorchAdapter()
    adapter.compile_cache_dir = cache
    adapter.load()
    case = make_case([[-1.0, -2.0]] * 3, [[0.25, 0.75]] * 3, reduction="sum", dtype="float32")
    for mode in ("onnx-dynamo", "onnx-torchscript"):
        observed = adapter.run(case, adapter.apis[0], "cpu", "forward", mode)
        assert observed.exception_type is None and observed.value is not None, observed
