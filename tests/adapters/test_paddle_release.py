"""What differs by Paddle release (issue 30): Paddle before 2.7 has no log_target argument (2.6.2's kl_div takes
(input, label, reduction, name), KLDivLoss (reduction)). There the log_target=True cases are unsupported, the
reason naming the release and the argument, and the log_target=False ones are computed without the argument and
judged: on the default suite 2.6.2 gives the verdicts of 3.3.1 on every one of them. On a release with the argument
every case is made with it. tox -e tests-paddle-old runs this file on Paddle 2.6.2.
"""

from __future__ import annotations

import inspect
import json

import numpy as np

from conformance.cli import main
from conformance.core.results import iter_results
from tests.helpers import make_case

FRAMEWORK = "paddle"
FUNCTIONAL, LAYER = "paddle.nn.functional.kl_div", "paddle.nn.KLDivLoss"
ONLY = "fwd/sum/*/4x6/float32/softmax/*"  # one case with a log_target of each value


def _has_log_target() -> bool:
    import paddle

    return "log_target" in inspect.signature(paddle.nn.functional.kl_div).parameters


def test_the_release_decides_which_cases_are_made(framework_adapter):
    adapter = framework_adapter
    release = f"paddle {adapter.version()}"
    probs = make_case([[-1.0, -2.0]], [[0.25, 0.75]], reduction="sum", dtype="float32")
    logs = make_case([[-1.0, -2.0]], [[np.log(0.25), np.log(0.75)]], reduction="sum", log_target=True,
                     dtype="float32")
    for name in (FUNCTIONAL, LAYER):
        api = adapter.api(name)
        assert adapter.unsupported_reason(probs, api) is None
        call = adapter.call(probs, api)
        if _has_log_target():
            assert adapter.unsupported_reason(logs, api) is None
            assert "log_target=False" in call.source()
        else:
            assert adapter.unsupported_reason(logs, api) == (f"{release}'s {name} has no argument log_target "
                                                             "(the case needs log_target=True)")
            assert "log_target" not in call.source()
        observed = adapter.run(probs, api, "cpu", "forward")  # the call made is one the release takes
        assert observed.exception_type is None, observed.exception_message
        assert abs(float(observed.value) - (0.25 * (np.log(0.25) + 1) + 0.75 * (np.log(0.75) + 2))) < 1e-5


def test_a_run_judges_what_the_release_computes(tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--framework", "paddle", "--only", ONLY, "--part", "forward", "--out", str(out),
                 "--no-progress", "--no-repro"]) == 0
    rows = list(iter_results(out))
    assert {r.api for r in rows} == {FUNCTIONAL, LAYER}
    verdicts = {(r.api, r.log_target): r for r in rows}
    for name in (FUNCTIONAL, LAYER):
        assert verdicts[(name, False)].verdict.value == "pass"
        if _has_log_target():
            assert verdicts[(name, True)].verdict.value == "pass"
        else:
            assert verdicts[(name, True)].verdict.value == "unsupported"
            assert "has no argument log_target" in verdicts[(name, True)].message
    assert "apis_not_run" not in json.loads((out / "run.json").read_text())


def test_the_to_static_modes_run_on_paddle_3_only(framework_adapter):
    """The to_static modes are built on Paddle 3's translation (Paddle 2's cannot resolve the call's wrapper): on an
    older release each is not run, with that reason, so a run asking for them records why instead of erroring
    on every call."""
    adapter = framework_adapter
    major = int(adapter.version().split(".")[0])
    assert adapter.mode_unavailable("eager") is None
    for mode in adapter.modes:
        reason = adapter.mode_unavailable(mode.name)
        if major >= 3:
            assert reason is None, reason
        else:
            assert reason is not None and adapter.version() in reason and "need Paddle 3" in reason
