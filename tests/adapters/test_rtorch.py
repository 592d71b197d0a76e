"""R torch through its adapter: the documentation page's claims (shared/seeds/002) and the quirks found.

The first tests need no R torch: they check that a machine without it reports why (the
adapter's reason, the run's not_run, the merged report). They run wherever `--framework
rtorch` is asked for. The rest run on the real R torch and skip, with the reason, where
it is not installed (tox -e tests-rtorch then prints one loud line saying so).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conformance.adapters.base import FrameworkUnavailable
from conformance.adapters.registry import get_adapter
from conformance.adapters.rtorch import find_rscript, r_environment
from conformance.cli import main
from conformance.core.model import Verdict
from conformance.judge.compare import classify
from conformance.judge.explain import explain
from conformance.reference.forward import expected_forward
from tests.helpers import make_case

FRAMEWORK = "rtorch"
APIS = ("torch::nnf_kl_div", "torch::nn_kl_div_loss")


@pytest.fixture
def rtorch_requested(request):
    if FRAMEWORK not in request.config.getoption("--framework"):
        pytest.skip("R torch tests run with --framework rtorch (tox -e tests-rtorch)")


def _unavailable_reason() -> str:
    adapter = get_adapter(FRAMEWORK)
    with pytest.raises(FrameworkUnavailable) as caught:
        adapter.load()
    return str(caught.value)


# --- without R torch: the reason, and not_run ---------------------------------------------------

def test_a_missing_rscript_is_named(rtorch_requested, monkeypatch, tmp_path):
    monkeypatch.setenv("KL_RSCRIPT", str(tmp_path / "Rscript"))
    assert _unavailable_reason() == f"KL_RSCRIPT={tmp_path / 'Rscript'} is not an executable file; point it at R's Rscript"


def test_no_r_on_path_is_the_reason(rtorch_requested, monkeypatch, tmp_path):
    monkeypatch.delenv("KL_RSCRIPT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _unavailable_reason().startswith("R is not installed: no Rscript on PATH and KL_RSCRIPT is not set")


def test_a_missing_rtorch_library_directory_is_named(rtorch_requested, monkeypatch, tmp_path):
    monkeypatch.setenv("KL_RTORCH_LIB", str(tmp_path / "nowhere"))
    if shutil.which("Rscript") is None and not os.environ.get("KL_RSCRIPT"):
        monkeypatch.setenv("KL_RSCRIPT", shutil.which("true") or "/bin/true")  # the library is checked before R runs
    assert _unavailable_reason() == (f"KL_RTORCH_LIB={tmp_path / 'nowhere'} is not a directory; point it at the R "
                                     "library that holds the torch package")


def test_r_without_the_torch_package_says_so(rtorch_requested, monkeypatch, tmp_path):
    """Real R, with every library path that could hold torch emptied."""
    try:
        find_rscript()
    except FrameworkUnavailable as exc:
        pytest.skip(f"needs R: {exc}")
    empty = tmp_path / "lib"
    empty.mkdir()
    for name in ("R_LIBS", "R_LIBS_USER", "R_LIBS_SITE"):
        monkeypatch.setenv(name, str(empty))
    monkeypatch.delenv("KL_RTORCH_LIB", raising=False)
    reason = _unavailable_reason()
    assert reason.startswith("the R package torch is not installed in R's library paths (") and str(empty) in reason
    assert 'install.packages("torch")' in reason and "KL_RTORCH_LIB" in reason


def test_an_unavailable_rtorch_run_is_not_run_and_the_merged_report_says_why(rtorch_requested, monkeypatch,
                                                                                 tmp_path, capsys):
    monkeypatch.setenv("KL_RSCRIPT", str(tmp_path / "no-R"))
    run = tmp_path / "run"
    assert main(["run", "--framework", FRAMEWORK, "--only", "fwd/sum/*", "--out", str(run), "--no-progress"]) == 0
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "not_run" and "KL_RSCRIPT=" in manifest["reason"]
    merged = tmp_path / "merged"
    assert main(["report", str(run), "--out", str(merged)]) == 0
    assert "not run: rtorch" in capsys.readouterr().out
    report = (merged / "report.md").read_text()
    assert "not_run" in report and "is not an executable file" in report


# --- on the real R torch ------------------------------------------------------------------------

def _run(adapter, case, api="torch::nnf_kl_div", part="forward"):
    return adapter.run(case, adapter.api(api), "cpu", part)


def _rscript(code: str) -> subprocess.CompletedProcess:
    """Run R code with the adapter's R and library path (for claims the adapter cannot express)."""
    return subprocess.run([find_rscript(), "--no-init-file", "-e", code], capture_output=True, text=True,
                          env=r_environment(), timeout=300)


def test_identity_names_r_torch_libtorch_and_r(framework_adapter):
    version = framework_adapter.version()
    assert version.split(" ")[0].count(".") == 2 and "(libtorch " in version and ", R " in version


@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
def test_every_documented_reduction_computes_the_spec(framework_adapter, spec, reduction):
    """seeds/002: 'none' | 'batchmean' | 'sum' | 'mean' on log-probabilities and probabilities (N, *)."""
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 3, 5))
    x = logits[0] - np.log(np.exp(logits[0]).sum(-1, keepdims=True))
    t = np.exp(logits[1]) / np.exp(logits[1]).sum(-1, keepdims=True)
    case = make_case(x, t, reduction=reduction, dtype="float32")
    for api in APIS:
        observed = _run(framework_adapter, case, api)
        judgement = classify(expected_forward(case, spec), observed, spec)
        assert judgement.verdict is Verdict.PASS, f"{api}: {judgement.message}"
        assert observed.shape == ((3, 5) if reduction == "none" else ())  # seeds/002, Shape


def test_mean_warns_to_use_batchmean(framework_adapter):
    """seeds/002, Note: 'mean' doesn't return the true KL divergence; use 'batchmean'."""
    case = make_case([[-1.0, -2.0]], [[0.3, 0.7]], reduction="mean", dtype="float32")
    for api in APIS:
        observed = _run(framework_adapter, case, api)
        assert any(w.startswith("RWarning: ") and "batchmean" in w for w in observed.warnings), observed.warnings
    assert not _run(framework_adapter, make_case([[-1.0]], [[0.3]], reduction="sum"), APIS[0]).warnings


def test_log_target_is_not_an_argument_although_the_page_mentions_it(framework_adapter):
    """seeds/002 says targets 'could be considered as log-probabilities with log_target set to TRUE';
    neither R function takes it, so the harness reports log_target cases as unsupported."""
    case = make_case([-1.0], [-0.5], reduction="sum", log_target=True)
    for api in framework_adapter.apis:
        assert framework_adapter.unsupported_reason(case, api) == f"{api.name} has no log_target argument"
    done = _rscript("library(torch); x <- torch_tensor(c(-1, -2)); "
                    "tryCatch(nnf_kl_div(x, x, log_target = TRUE), error = function(e) cat(conditionMessage(e)))")
    assert "unused argument (log_target = TRUE)" in done.stdout, done.stdout + done.stderr


def test_batchmean_divides_by_input_dim1_before_broadcasting(framework_adapter, spec):
    """R torch divides the sum by input$size(1) (R's first dimension), as PyTorch does by input.size(0)."""
    target = np.array([[0.1, 0.2, 0.3, 0.1, 0.2, 0.1]] * 4)
    case = make_case(np.full(6, -np.log(6.0)), target, reduction="batchmean")
    observed = _run(framework_adapter, case)
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.VALUE
    assert [str(a) for a in explain(case, observed, spec)] == ["reductions.batchmean.divisor = input_dim0"]


def test_an_unknown_reduction_computes_none(framework_adapter, spec):
    """R torch maps every reduction other than 'mean', 'sum' (and 'batchmean') to 'none', silently:
    'SUM' returns the unreduced loss where the spec raises ValueError."""
    x, t = [[-1.0, -2.0], [-0.5, -1.5]], [[0.3, 0.7], [0.6, 0.4]]
    for api in APIS:
        shouted = _run(framework_adapter, make_case(x, t, reduction="SUM"), api)
        assert classify(expected_forward(make_case(x, t, reduction="SUM"), spec), shouted, spec).verdict is Verdict.ERROR
        unreduced = _run(framework_adapter, make_case(x, t, reduction="none"), api)
        assert shouted.shape == (2, 2) and np.array_equal(shouted.value, unreduced.value)


def test_exceptions_are_r_conditions_as_data(framework_adapter):
    observed = _run(framework_adapter, make_case(np.zeros((4, 6)), np.zeros((4, 5)), reduction="sum"))
    assert observed.raised and observed.value is None
    # libtorch's error as an R condition (class Rcpp::exception in R torch 0.11); its C++ backtrace is cut off
    assert observed.exception_type and "must match the size" in observed.exception_message
    assert "Exception raised from" not in observed.exception_message


def test_strided_layout_is_a_real_view(framework_adapter):
    """The adapter's strided tensors are views of every other element (buffer[.., 1:N:2]), not copies."""
    done = _rscript("library(torch); b <- torch_tensor(matrix(as.numeric(1:8), 2, 4, byrow = TRUE)); "
                    "v <- b[.., 1:N:2]; b[1, 1] <- 100; "
                    "cat(v$is_contiguous(), paste(v$stride(), collapse = ','), as.numeric(v[1, 1]))")
    assert done.stdout.split() == ["FALSE", "4,2", "100"], done.stdout + done.stderr


def test_r_killed_between_calls_is_restarted(framework_adapter):
    case = make_case([-1.0], [0.5], reduction="sum")
    session = framework_adapter._session
    session._process.kill()
    session._process.wait()
    observed = _run(framework_adapter, case)
    assert observed.value is not None and session.restarts == 1


@pytest.mark.parametrize("case_id", ["fwd/none/log_target=0/4x6/float32:float16/softmax/s0",
                                     "fwd/sum/log_target=0/4x6/float64:float16/unnormalized/s0"])
def test_libtorch_1_13_computes_a_float16_targets_term_in_float32_and_it_is_pytorch_117034(framework_adapter, spec,
                                                                                            case_id):
    """libtorch 1.13.1's CPU xlogy of a float16 target is computed in float32 and rounded once to float16 (checked
    here in mpmath on these targets), where torch 2's rounds log(t) to float16 first: the spec's own_dtype takes
    both (a sum every element alike), so the call is pytorch#117034's, not `unexplained`."""
    import mpmath

    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id
    from conformance.core.choices import Alternative, with_alternatives

    case = build_case(parse_id(case_id), DEFAULT_SEED)
    zero = make_case(np.zeros(np.shape(case.target)), case.target, dtype=("float32", "float16"))
    terms = _run(framework_adapter, zero).value.ravel()  # xlogy(t, t) - t * 0: the target's term, promoted
    t = np.asarray(case.target, dtype=np.float64).ravel()
    with mpmath.workprec(100):
        through = [float(np.float16(np.float32(float(mpmath.mpf(v) * float(np.float32(float(mpmath.log(v))))))))
                   for v in t]
        two_roundings = [float(np.float16(float(mpmath.mpf(v) * float(np.float16(float(mpmath.log(v)))))))
                         for v in t]
    assert terms.tolist() == through
    assert terms.tolist() != two_roundings  # the forms differ on these targets
    observed = _run(framework_adapter, case)
    assert classify(expected_forward(case, spec), observed, spec).verdict is Verdict.VALUE
    own = (Alternative("dtypes.argument_terms", "own_dtype"),)
    assert classify(expected_forward(case, with_alternatives(spec, own)), observed, spec).verdict is Verdict.PASS
    assert explain(case, observed, spec) == own
