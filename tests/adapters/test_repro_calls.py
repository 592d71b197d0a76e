"""A reproducer makes the call the run made: its lines, run here, give the adapter's live observation.

Each adapter states each API call once (adapters/apicall.py: ApiCall; R torch's RCall); this checks, on the
real framework named by --framework, that the rendered call and the live one observe the same, for a
sample of cases per API and part (values bit for bit, or the same exception type). R torch's
reproducers are whole R scripts, run with Rscript.
"""

from __future__ import annotations

import runpy
import subprocess
import sys

import numpy as np
import pytest

from conformance.adapters.base import Adapter
from conformance.core.model import upstream_gradient
from tests.helpers import as_api_takes, load_adapter, make_case

PARTS = ("forward", "grad_input", "grad_target", "grad2_input")


@pytest.fixture
def adapter(framework, loaded_adapters):
    return load_adapter(loaded_adapters, framework)


def _writes_python(adapter) -> bool:
    """Whether the adapter's reproducers are Python lines around its ApiCall (R torch writes R scripts)."""
    return type(adapter).repro_script is Adapter.repro_script


def _samples():
    """A few cases: well-posed ones in each layout and reduction, mixed dtypes, and a shape mismatch."""
    rng = np.random.default_rng(11)
    x = np.log(rng.dirichlet(np.ones(5), size=(2, 3)))
    t = rng.dirichlet(np.ones(5), size=(2, 3))
    return [
        make_case(x, t, reduction="none", dtype="float32", layout="contiguous"),
        make_case(x, t, reduction="batchmean", dtype="float64", layout="transposed"),
        make_case(x, np.log(t), reduction="sum", log_target=True, dtype="float32", layout="strided"),
        make_case(x, t, reduction="mean", dtype=("float32", "float64")),
        make_case(x, t, reduction="elementwise_mean", dtype="float32"),
        make_case(x, t, reduction="mean", dtype="float32", size_average=False, reduce=True),
        make_case(np.zeros((4, 6)), np.full((4, 5), 0.2), reduction="sum", dtype="float32"),
    ]


def _check(adapter, case, api, device, part, scratch, spec):
    observed = adapter.run(case, api, device, part)
    if observed.unsupported:
        return
    if not _writes_python(adapter):
        _check_script(adapter, case, api, device, part, scratch, spec, observed)
        return
    namespace = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
    # run from a file, as a reproducer runs: MindSpore's grad reads the source of the function it differentiates
    script = scratch / f"repro_{api.name.replace('.', '_')}_{part}.py"
    script.write_text(adapter.repro_source(case, api, device, part), encoding="utf-8")
    try:
        namespace = runpy.run_path(str(script), init_globals=namespace)
    except Exception as exc:  # the reproducer raises where the run recorded an exception
        assert observed.raised, f"{api.name}/{part}/{case.params}: the reproducer raised {exc!r}, the run did not"
        assert type(exc).__name__ == observed.exception_type, f"{api.name}/{part}: {exc!r} vs {observed}"
        return
    result = namespace["result"]
    if observed.exception_type == "MissingGradient":
        assert isinstance(result, str) or result is None, f"{api.name}/{part}: {result!r}"
        return
    assert not observed.raised, f"{api.name}/{part}/{case.params}: the run raised {observed.exception_type}: " \
                                f"{observed.exception_message}, the reproducer gave {result!r}"
    np.testing.assert_array_equal(np.asarray(result), observed.value, err_msg=f"{api.name}/{part}/{case.params}")


def _check_script(adapter, case, api, device, part, scratch, spec, observed):
    """Run a whole reproducer script (R torch's, with Rscript) and read the result it prints."""
    from conformance.adapters.rtorch import find_rscript, r_environment
    from conformance.judge.casejudge import expected_for

    from conformance.judge.compare import passes

    expected = expected_for(case, spec, part, api.dialect)
    recorded = f"raises {observed.exception_type}" if observed.raised else "a value"
    script, suffix = adapter.repro_script(case, api, device, part, ("a case", "a message", "its params."), expected,
                                          recorded)
    path = scratch / f"repro_{part}{suffix}"
    path.write_text(script, encoding="utf-8")
    run = subprocess.run([find_rscript(), "--no-init-file", str(path)], env=r_environment(), capture_output=True,
                         text=True, timeout=300)
    # as `git bisect run` reads it: 0 where the call conforms, 1 where the run's observation reproduces
    assert run.returncode == (0 if passes(expected, observed) else 1), run.stdout[-1000:] + run.stderr[-2000:]
    (shown,) = [line for line in run.stdout.splitlines() if line.startswith(f"{adapter.name}:")]
    shown = shown.split(":", 1)[1].strip()
    if shown.startswith("raises "):
        assert observed.raised and shown.startswith(f"raises {observed.exception_type}:"), (shown, observed)
        return
    assert not observed.raised, f"{api.name}/{part}: the run raised {observed.exception_type}, the script: {shown}"
    values, rest = shown[1:].split("] shape (")
    numbers = np.array([float(v) for v in values.split(", ")] if values else [], dtype=np.float64)
    shape, dtype = rest.split(") ")
    assert dtype == observed.dtype and tuple(int(n) for n in shape.split(", ") if n) == observed.shape
    np.testing.assert_array_equal(numbers, observed.value.reshape(-1), err_msg=f"{api.name}/{part}")


@pytest.mark.parametrize("part", PARTS)
def test_reproducer_makes_the_live_call(adapter, spec, part, tmp_path):
    device = adapter.devices()[0]
    checked = 0
    # a whole script per call starts a fresh R each time: fewer samples there
    samples = _samples() if _writes_python(adapter) else _samples()[:3]
    for api in adapter.apis:
        if adapter.unsupported_part(api, part):
            continue
        for case in samples:
            case = as_api_takes(case, api, spec)
            if adapter.unsupported_reason(case, api):
                continue
            _check(adapter, case, api, device, part, tmp_path, spec)
            checked += 1
    if not checked:
        # torch refuses integer inputs in every part it runs (where the issue found the fault): it must be checked
        assert adapter.name != "torch" or part == "grad2_input", f"torch raised on no integer {part} call"
        pytest.skip(f"{adapter.name} raises on no integer {part} call: no exception to compare")


def test_call_text_is_the_call(adapter, spec):
    """The ApiCall's source, evaluated on the live inputs, is what invoke returns."""
    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name}'s call is R source: test_reproducer_makes_the_live_call runs it")
    device = adapter.devices()[0]
    case = _samples()[0]
    for api in adapter.apis:
        api_case = as_api_takes(case, api, spec)
        if adapter.unsupported_reason(api_case, api):
            continue
        call = adapter.call(api_case, api)
        observed = adapter.run(api_case, api, device, "forward")
        if observed.unsupported or observed.raised:
            continue
        inputs = adapter._cache.get(api_case, device, adapter.build)
        namespace = {call.root: sys.modules[call.root], "x": inputs[0], "t": inputs[1]}
        rendered = eval(compile(call.source(), "<call>", "eval"), namespace)  # the test's own text, not a case's
        value, _, _ = adapter.to_numpy(rendered)
        np.testing.assert_array_equal(value, observed.value)


@pytest.mark.parametrize("part", PARTS)
def test_reproducer_of_an_integer_case_shows_the_runs_exception(adapter, spec, part, tmp_path):
    """torch's forward reproducers called requires_grad_ on every tensor: an integer case then raised that
    refusal ("only Tensors of floating point dtype can require gradients") instead of the one the run
    recorded. A reproducer must show the run's finding, message and all, and nothing else."""
    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name} writes R scripts: test_reproducer_makes_the_live_call runs them")
    device = adapter.devices()[0]
    checked = 0
    for api in adapter.apis:
        if adapter.unsupported_part(api, part):
            continue
        case = as_api_takes(make_case([[-1.0, -2.0]], [[0.0, 1.0]], reduction="sum", dtype="int64"), api, spec)
        observed = adapter.run(case, api, device, part)
        if adapter.unsupported_reason(case, api) or observed.unsupported or not observed.raised:
            continue
        script = tmp_path / f"repro_{api.name.replace('.', '_')}_{part}.py"
        script.write_text(adapter.repro_source(case, api, device, part), encoding="utf-8")
        namespace = {"np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient}
        with pytest.raises(Exception) as raised:
            runpy.run_path(str(script), init_globals=namespace)
        shown = f"{type(raised.value).__name__}: {str(raised.value).splitlines()[0] if str(raised.value) else ''}"
        recorded = f"{observed.exception_type}: {observed.exception_message.splitlines()[0]}"
        assert shown[:200] == recorded[:200], f"{api.name}/{part}"
        checked += 1
    if not checked:
        # torch refuses integer inputs in every part it runs (where the issue found the fault): it must be checked
        assert adapter.name != "torch" or part == "grad2_input", f"torch raised on no integer {part} call"
        pytest.skip(f"{adapter.name} raises on no integer {part} call: no exception to compare")


class _Holding:
    """A case source that holds one case (write_script asks its source for the case by id)."""

    def __init__(self, case):
        self.case = case

    def get(self, case_id):
        return self.case


def _script_exit(adapter, spec, case, tmp_path, env=None) -> tuple[int, str, bool]:
    """Write the reproducer of `case` on the adapter's first API that runs it, run it, and say whether the live
    call diverges."""
    from conformance.judge.casejudge import expected_for
    from conformance.judge.compare import classify
    from conformance.repro.scripts import write_script

    device = adapter.devices()[0]
    for api in adapter.apis:  # the first API that runs the case (MindSpore's mint APIs have no CPU kernel)
        taken = as_api_takes(case, api, spec)
        observed = None if adapter.unsupported_reason(taken, api) else adapter.run(taken, api, device, "forward")
        if observed is not None and observed.unsupported is None:
            case = taken
            break
    else:
        pytest.skip(f"no API of {adapter.name} runs the case {case.id} on {device}")
    diverges = classify(expected_for(case, spec, "forward", api.dialect), observed, spec).verdict.is_divergence
    path = tmp_path / "repro.py"
    path.write_text(write_script(spec, adapter.name, case.id, _Holding(case), api.name, device, minimize=False))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    return done.returncode, done.stdout + done.stderr[-2000:], diverges


def test_reproducer_exits_1_on_a_divergence_and_0_on_a_conforming_call(adapter, spec, tmp_path):
    """`git bisect run` reads the exit status: 1 while the finding reproduces, 0 once the call conforms."""
    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name} writes R scripts")
    zero_target = make_case([-np.inf, -1.0], [0.0, 0.5], reduction="none", dtype="float32", case_id="zero-target")
    code, out, diverges = _script_exit(adapter, spec, zero_target, tmp_path)
    assert diverges or adapter.name != "torch", "torch gives NaN where the target is 0 and the input -inf"
    assert code == (1 if diverges else 0), out
    rng = np.random.default_rng(3)
    t = rng.dirichlet(np.ones(4), size=3)
    plain = make_case(np.log(rng.dirichlet(np.ones(4), size=3)), t, reduction="sum", dtype="float64", case_id="plain")
    code, out, diverges = _script_exit(adapter, spec, plain, tmp_path)
    assert not diverges or adapter.name != "torch"
    assert code == (1 if diverges else 0), out


def test_reproducer_of_an_unimportable_framework_exits_125(adapter, spec, tmp_path):
    """A bisect step where the framework does not build (here: its package raises on import) is a skip, never
    a verdict on the commit."""
    import os

    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name} writes R scripts")
    case = make_case([-np.inf, -1.0], [0.0, 0.5], reduction="none", dtype="float32", case_id="zero-target")
    broken = tmp_path / "broken"
    for name in {adapter.call(as_api_takes(case, api, spec), api).root for api in adapter.apis}:
        (broken / name).mkdir(parents=True)
        (broken / name / "__init__.py").write_text("raise ImportError('this build of the framework is broken')\n")
    env = {**os.environ, "PYTHONPATH": str(broken)}
    code, out, _ = _script_exit(adapter, spec, case, tmp_path, env=env)
    assert code == 125 and "this build of the framework is broken" in out, out


def test_reproducer_of_a_list_built_case_builds_from_a_list(adapter, spec, tmp_path):
    """A case whose tensors the run made from nested Python floats (issue 30 item 3) is reproduced the same way:
    the script hands the framework `.tolist()` of the values, never the NumPy array, and exits as the run judged."""
    from conformance.cases.generate import DEFAULT_SEED, build_case
    from conformance.cases.ids import parse_id

    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name} writes R scripts")
    case = build_case(parse_id("fwd/none/log_target=0/4x6/float64,from=list/certain/s0"), DEFAULT_SEED)
    code, out, diverges = _script_exit(adapter, spec, case, tmp_path)
    script = (tmp_path / "repro.py").read_text()
    made = [line.strip() for line in script.splitlines() if line.strip().startswith(("x = ", "t = "))]
    assert len(made) == 2 and all(".tolist()" in line for line in made), made
    assert code == (1 if diverges else 0), out


@pytest.mark.parametrize("part", ["forward", "grad_input"])
def test_a_bfloat16_result_is_read_by_value_not_by_its_bits(adapter, spec, part):
    """A reproducer brings its result to NumPy float64 as the run's to_numpy does. For bfloat16, which NumPy
    lacks, that is through float32: some frameworks' .numpy() gives the raw bits (Paddle: 16256 for 1.0), and a
    gradient reproducer that read them reproduced every bfloat16 gradient. The script's line runs here on a
    bfloat16 tensor the adapter builds (few frameworks compute a bfloat16 kl_div gradient on a CPU)."""
    if not _writes_python(adapter):
        pytest.skip(f"{adapter.name} writes R scripts")
    case = make_case([[-1.0, -2.0]], [[0.25, 0.75]], reduction="none", dtype="bfloat16")
    try:
        x, _ = adapter.build(case, "cpu")
    except Exception as exc:  # a framework without bfloat16 tensors on this machine
        pytest.skip(f"{adapter.name} builds no bfloat16 tensor here: {type(exc).__name__}: {exc}")
    api = adapter.apis[0]
    lines = adapter.repro_source(as_api_takes(case, api, spec), api, "cpu", part).splitlines()
    (line,) = [line.strip() for line in lines if line.strip().startswith("result = ")]
    namespace: dict = {"np": np}
    exec("\n".join(line for line in lines if line.startswith(("import ", "from ", "os."))), namespace)
    namespace["out"] = namespace["grad"] = x  # the name the result is read from (some read `grad` for both)
    exec(line, namespace)
    np.testing.assert_array_equal(namespace["result"], [[-1.0, -2.0]])
