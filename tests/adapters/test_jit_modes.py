"""The compiled modes of the JAX, MLX and Keras adapters, on the real framework named by --framework: optax `jit`
(jax.jit), mlx `compile` (mx.compile), keras `jit` (tf.function(jit_compile=True), jax.jit or torch.compile by
the backend).

A run in the mode gives rows that carry it and are judged like eager's; a call whose framework was switched to
run compiled functions eagerly is caught as a fallback, not passed as the mode's answer; a reproducer written in
the mode makes the compiled call, and gives the run's value bit for bit.
"""

from __future__ import annotations

import contextlib
import json
import re
import runpy
import subprocess
import sys

import numpy as np
import pytest

from conformance.adapters.compiled import Traced
from conformance.cli import main
from conformance.core.model import EAGER, upstream_gradient
from conformance.judge.casejudge import expected_for
from conformance.judge.compare import passes
from tests.helpers import as_api_takes, load_adapter, make_case

MODE = {"optax": "jit", "mlx": "compile", "keras": "jit"}
PARTS = ("forward", "grad_input", "grad_target", "grad2_input")


@pytest.fixture
def compiled(framework, loaded_adapters):
    """The adapter of a framework with a compiled mode here, and the mode's name."""
    if framework not in MODE:
        pytest.skip(f"{framework} has no mode these tests cover")
    adapter = load_adapter(loaded_adapters, framework)
    yield adapter, MODE[framework]


def _wrapper(adapter) -> str:
    """What a reproducer of the mode must call: the framework's own compiler, as the adapter's docs name it."""
    if adapter.name == "keras":
        return {"tensorflow": "jit_compile=True", "jax": "jax.jit(", "torch": "torch.compile("}[adapter.backend]
    return {"optax": "jax.jit(", "mlx": "mx.compile("}[adapter.name]


@contextlib.contextmanager
def _compiling_switched_off(adapter):
    """The framework's own switch that runs compiled functions eagerly, silently, for the duration."""
    backend = adapter.backend if adapter.name == "keras" else adapter.name
    if backend in ("optax", "jax"):
        import jax

        with jax.disable_jit():
            yield
    elif backend == "mlx":
        import mlx.core as mx

        mx.disable_compile()
        try:
            yield
        finally:
            mx.enable_compile()
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.run_functions_eagerly(True)
        try:
            yield
        finally:
            tf.config.run_functions_eagerly(False)
    else:  # Dynamo disabled raises under fullgraph=True; this stance runs the compiled function eagerly
        import torch

        with torch.compiler.set_stance("force_eager"):
            yield


def _device(adapter) -> str:
    return adapter.devices()[0]


def _case(adapter, api, spec, shape=(3, 5), seed=5, reduction="sum"):
    rng = np.random.default_rng(seed)
    x = np.log(rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]))
    t = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    reduction = reduction if api.reductions is None or reduction in api.reductions else api.reductions[0]
    return as_api_takes(make_case(x, t, reduction=reduction, dtype="float32"), api, spec)


def test_mode_run_rows_carry_the_mode_and_are_judged(compiled, tmp_path):
    """`run --mode eager --mode M` on a float32 slice: every call has a row in each mode, the mode's rows are
    judged (none a fallback or an adapter error), and each has eager's verdict (the modes here change no
    float32 NaN/inf pattern: optax's and Keras' jitted sums differ from eager's only within the bound), but
    for Keras on torch, whose compiled backward gives no second gradient, which its profile states."""
    adapter, mode = compiled
    out = tmp_path / "run"
    code = main(["run", "--framework", adapter.name, "--mode", EAGER, "--mode", mode,
                 "--only", "fwd/*/4x6/float32/*", "--out", str(out), "--no-progress", "--no-repro"])
    assert code in (0, 1), code
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert json.loads((out / "run.json").read_text())["modes"] == [EAGER, mode]
    by_mode = {m: {(r["case_id"], r["api"], r["device"], r["part"]): r for r in rows if r["mode"] == m}
               for m in (EAGER, mode)}
    assert by_mode[mode] and by_mode[mode].keys() == by_mode[EAGER].keys()
    judged = [r for r in by_mode[mode].values() if r["verdict"] != "unsupported"]
    # Keras on torch: its profile keeps grad2_input from torch.compile (pytorch#91469), and says why, where the
    # adapter asked still gets no second gradient (test_a_call_run_eagerly_is_a_fallback)
    refused = {r["part"] for r in by_mode[mode].values() if r["verdict"] == "unsupported"
               and "(documented, maintainers: https://github.com/pytorch/pytorch/pull/92348)" in r["message"]}
    assert refused == ({"grad2_input"} if _no_double_backward(adapter, "grad2_input") else set())
    assert {r["part"] for r in judged} == set(PARTS) - refused, "each part is made in the mode"
    assert not [r for r in judged if r["verdict"] == "fallback" or "AdapterError" in r["message"]]
    differ = {k: (by_mode[EAGER][k]["verdict"], r["verdict"]) for k, r in by_mode[mode].items()
              if r["verdict"] != by_mode[EAGER][k]["verdict"] and k[3] not in refused}
    assert not differ, differ


def test_torch_compile_under_keras_keeps_its_cache_under_the_cache_dir(compiled, tmp_path):
    """Keras on torch compiles with Inductor, whose artifacts go under --cache-dir (as the torch adapter's do),
    not the system's temporary folder, so that a second run finds them."""
    adapter, mode = compiled
    if getattr(adapter, "backend", None) != "torch":
        pytest.skip("Inductor compiles only on Keras' torch backend")
    code = main(["run", "--framework", adapter.name, "--mode", mode, "--part", "forward",
                 "--only", "fwd/*/4x6/float32/softmax/s0", "--api", "keras.losses.kl_divergence",
                 "--out", str(tmp_path / "run"), "--no-progress", "--no-repro", "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    assert any((tmp_path / "cache" / "torchinductor").rglob("*.so")), "Inductor built nothing under --cache-dir"


@pytest.mark.parametrize("part", PARTS)
def test_a_call_run_eagerly_is_a_fallback(compiled, spec, part):
    """With the framework's switch that runs compiled functions eagerly (jax.disable_jit, mx.disable_compile,
    tf.config.run_functions_eagerly, torch's force_eager stance), the mode's call is a fallback, never the eager answer;
    the same call compiled is not."""
    adapter, mode = compiled
    api = adapter.apis[0]
    device = _device(adapter)
    compiled_first = adapter.run(_case(adapter, api, spec, seed=1), api, device, part, mode)
    assert compiled_first.fallback is None and (not compiled_first.raised or _no_double_backward(adapter, part)), \
        compiled_first
    with _compiling_switched_off(adapter):
        for case in (_case(adapter, api, spec, seed=1), _case(adapter, api, spec, shape=(2, 7), seed=2)):
            observed = adapter.run(case, api, device, part, mode)  # a signature compiled before, and a new one
            assert observed.fallback and "eagerly" in observed.fallback, observed
    again = adapter.run(_case(adapter, api, spec, seed=1), api, device, part, mode)
    assert again.fallback is None and again.exception_type == compiled_first.exception_type
    assert compiled_first.raised or np.array_equal(again.value, compiled_first.value, equal_nan=True)


def _no_double_backward(adapter, part: str) -> bool:
    """Keras on torch: autograd cannot differentiate the backward Inductor compiled, so the second gradient is
    None (MissingGradient), as torch.compile's maintainers state (Keras' profile: unsupported)."""
    return adapter.name == "keras" and adapter.backend == "torch" and part == "grad2_input"


@pytest.mark.parametrize("part", PARTS)
def test_reproducer_makes_the_compiled_call(compiled, spec, tmp_path, part):
    """A reproducer written in the mode calls the framework's compiler and, run, gives the mode's value bit for
    bit, for every API."""
    adapter, mode = compiled
    device = _device(adapter)
    for api in adapter.apis:
        case = _case(adapter, api, spec, shape=(2, 3, 4), seed=9, reduction="mean")
        observed = adapter.run(case, api, device, part, mode)
        if observed.unsupported:
            continue
        source = adapter.repro_source(case, api, device, part, mode)
        assert _wrapper(adapter) in source, source
        assert _wrapper(adapter) not in adapter.repro_source(case, api, device, part)
        script = tmp_path / f"repro_{api.name.replace('.', '_')}_{part}.py"
        script.write_text(source, encoding="utf-8")
        assert observed.fallback is None and (not observed.raised or _no_double_backward(adapter, part)), observed
        try:
            namespace = runpy.run_path(str(script), init_globals={
                "np": np, "x_values": case.input, "t_values": case.target, "upstream": upstream_gradient})
        except Exception as exc:  # the reproducer raises what the run recorded
            assert type(exc).__name__ == observed.exception_type, (exc, observed)
            continue
        assert not observed.raised, observed
        np.testing.assert_array_equal(np.asarray(namespace["result"]), observed.value, err_msg=f"{api.name}/{part}")


def test_whole_reproducer_script_runs_compiled(compiled, spec, tmp_path):
    """The standalone script of a mode's row, run by itself, makes the compiled call, prints the mode's value
    bit for bit and exits as the run's verdict says (0 where the call conforms)."""
    adapter, mode = compiled
    device, api = _device(adapter), adapter.apis[0]
    case = _case(adapter, api, spec, shape=(4, 6), seed=3)
    observed = adapter.run(case, api, device, "forward", mode)
    expected = expected_for(case, spec, "forward", api.dialect)
    script, suffix = adapter.repro_script(case, api, device, "forward", ("a case", "a message", "its params."),
                                          expected, "a value", mode)
    assert _wrapper(adapter) in script
    path = tmp_path / f"repro{suffix}"
    path.write_text(script, encoding="utf-8")
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == (0 if passes(expected, observed) else 1), run.stdout[-1000:] + run.stderr[-2000:]
    shown = run.stdout.split(f"{adapter.name}:", 1)[1].split("\nexpected:")[0]  # the repr may take lines
    hexes = re.search(r"hex \[(.*?)\]", shown, re.S).group(1)
    values = [float.fromhex(h.strip().strip("'")) for h in hexes.split(",") if h.strip()]
    np.testing.assert_array_equal(np.array(values), observed.value.reshape(-1))


@pytest.mark.parametrize("part", ("forward", "grad_input"))
def test_a_signature_compiles_once(compiled, spec, part):
    """The adapter keeps one compiled function per call and part: calls of a signature already compiled, other
    values or the same, trace nothing more (MLX may trace a signature's second call once more, then never)."""
    adapter, mode = compiled
    if adapter.name == "keras" and adapter.backend == "torch":
        pytest.skip("torch.compile's calls are counted by graph runs, not traces (test_a_call_run_eagerly...)")
    api, device = adapter.apis[0], _device(adapter)

    def traces():
        return sum(f.traces for f in adapter._compiled.values() if isinstance(f, Traced))
    for seed in (21, 21):
        assert not adapter.run(_case(adapter, api, spec, shape=(5, 3), seed=seed), api, device, part, mode).raised
    before, functions = traces(), dict(adapter._compiled)
    for seed in (21, 22, 23):
        assert not adapter.run(_case(adapter, api, spec, shape=(5, 3), seed=seed), api, device, part, mode).raised
    assert before >= 1 and traces() == before
    assert all(adapter._compiled[key] is f for key, f in functions.items()), "the same compiled functions serve"


def test_modes_listed(compiled):
    """The adapter names its mode beside eager, usable here."""
    adapter, mode = compiled
    assert adapter.mode_names() == (EAGER, mode)
    assert adapter.mode_unavailable(mode) is None
