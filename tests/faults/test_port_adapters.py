"""Ports in a few lines: a function of torch's kl_div signature on NumPy arrays is judged with no adapter code
(`--framework module:function`), the helpers of conformance.adapters.port build what every adapter needs, and
docs/guide/ports.md's examples run as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.adapters.port import case_inputs, numpy_tensor, upstream_gradient
from conformance.cases.generate import generate_cases
from conformance.cli import main
from conformance.core.results import iter_results
from conformance.core.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
PORTS_PAGE = ROOT / "docs" / "guide" / "ports.md"
HERE = "tests.faults.test_port_adapters:"
# ordinary values (no zero, infinite or NaN targets: the port below is not written for them), two dtypes and shapes
ONLY = ["--only", "fwd/*/4x6/float32/*", "--only", "fwd/*/2x3x2x4/float64/*", "--family", "softmax", "--family",
        "unnormalized", "--family", "identical"]


def kl_div(input, target, reduction="mean", log_target=False):
    """A port of torch.nn.functional.kl_div to NumPy for positive targets, written from torch's documentation:
    the loss is target * (log(target) - input), or exp(target) * (target - input) for log targets."""
    if reduction not in ("none", "sum", "mean", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    loss = np.exp(target) * (target - input) if log_target else target * (np.log(target) - input)
    divisor = {"none": None, "sum": 1, "mean": loss.size, "batchmean": input.shape[0] if input.ndim else 1}[reduction]
    return loss if divisor is None else loss.sum() / divisor


def kl_div_sum_off_by_one(input, target, reduction="mean", log_target=False):
    """The port with a planted bug: reduction='sum' adds 1 to the loss."""
    loss = kl_div(input, target, reduction, log_target)
    return loss + 1 if reduction == "sum" else loss


def _rows(run_dir):
    return list(iter_results(run_dir))


def _run(tmp_path, target, out, *extra):
    return main(["run", "--framework", HERE + target, *ONLY, "--out", str(tmp_path / out), "--no-progress",
                 "--no-cache", *extra])


def test_a_function_of_torchs_signature_is_judged_with_no_adapter(tmp_path):
    """The forward of every case the function can be handed is judged; each gradient part is unsupported with
    the reason a plain function has none; the rows name the function's package and its dotted path."""
    assert _run(tmp_path, "kl_div", "honest", "--no-repro") == 0
    rows = _rows(tmp_path / "honest")
    forward = [r for r in rows if r.part == "forward"]
    judged = [r for r in forward if r.verdict.value != "unsupported"]
    assert len(judged) >= 20 and {r.api for r in rows} == {"tests.faults.test_port_adapters.kl_div"}
    assert {r.framework for r in rows} == {"tests"}
    wrong = [(r.case_id, r.verdict.value, r.message) for r in judged if r.verdict.value != "pass"]
    assert not wrong, wrong[:3]
    gradients = [r for r in rows if r.part != "forward"]
    assert gradients and {r.verdict.value for r in gradients} == {"unsupported"}
    assert all("checked as a plain function" in r.message and "no autograd" in r.message for r in gradients)


def test_a_planted_difference_in_the_function_is_caught_and_reproduced(tmp_path):
    """The planted sum is a `value` divergence on every sum case and nowhere else; its reproducer imports the
    function's module and exits 1 (the finding reproduces)."""
    assert _run(tmp_path, "kl_div_sum_off_by_one", "planted", "--strict") == 1
    forward = [r for r in _rows(tmp_path / "planted") if r.part == "forward" and r.verdict.value != "unsupported"]
    diverged = {r.case_id for r in forward if r.verdict.value != "pass"}
    assert diverged and diverged == {r.case_id for r in forward if r.reduction == "sum"}
    scripts = sorted((tmp_path / "planted" / "repro").glob("*.py"))
    assert scripts
    text = scripts[0].read_text()
    assert "import tests.faults.test_port_adapters" in text
    done = subprocess.run([sys.executable, str(scripts[0])], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_case_inputs_are_the_cases_values_in_its_dtype_and_layout(layout):
    """case_inputs gives arrays of the case's values and dtype, laid out in memory as the layout says: a
    transposed array is the swapped view of a C-contiguous buffer, a strided one every other element."""
    spec = load_spec()
    cases = [c for c in generate_cases(spec) if c.layout == layout and c.input.ndim >= 2 and not c.dtype.is_mixed
             and c.dtype.input in ("float16", "float32", "float64")]
    assert cases
    case = cases[0]
    x, t = case_inputs(case)
    for array, values in ((x, case.input), (t, case.target)):
        assert array.dtype == np.dtype(case.dtype.input) and array.shape == values.shape
        assert np.array_equal(array.astype(np.float64), values, equal_nan=True)
        itemsize = array.dtype.itemsize
        if layout == "contiguous":
            assert array.flags.c_contiguous
        elif layout == "transposed":
            assert not array.flags.c_contiguous and np.swapaxes(array, -1, -2).flags.c_contiguous
        else:
            assert array.strides[-1] == 2 * itemsize


def test_the_helpers_state_the_spec_upstream_gradient_and_refuse_bfloat16():
    """upstream_gradient is the spec's (gradients.upstream: 1.25 for a scalar, 0.75 + 0.125 * (i mod 5));
    numpy_tensor says NumPy has no bfloat16 rather than make another dtype; every name PORT_HELPERS lists exists."""
    from conformance.adapters import port

    assert all(hasattr(port, name) for name in port.PORT_HELPERS)
    assert upstream_gradient(()) == 1.25
    assert upstream_gradient((2, 3)).tolist() == [[0.75, 0.875, 1.0], [1.125, 1.25, 0.75]]
    with pytest.raises(ValueError, match="NumPy has no bfloat16"):
        numpy_tensor(np.zeros(2), "bfloat16")


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _commands(text: str) -> list[str]:
    """The page's `kl-conformance run` lines that name a module in the current directory (PYTHONPATH=.)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.startswith("PYTHONPATH=. kl-conformance")]


def _run_as_written(line: str, cwd: Path, **replaced: str) -> subprocess.CompletedProcess:
    """`line` run in `cwd` by the shell's rules (env assignments, then the command), its --out in `cwd`."""
    words = shlex.split(line)
    env = dict(os.environ, KL_CACHE_DIR=str(cwd / "cache"))
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "kl-conformance"
    script = Path(sys.executable).with_name("kl-conformance")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "conformance"]
    return subprocess.run([*command, *words[1:], "--no-progress"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_ports_guide_examples_run_as_written(tmp_path):
    """Every Python block of docs/guide/ports.md runs (its imports included); the port and its adapter, saved
    under the names their first lines give, are judged by the page's own command lines: the function's forward
    and the adapter's hand-written gradients pass, and a planted difference in the port is caught."""
    text = PORTS_PAGE.read_text(encoding="utf-8")
    blocks = _python_blocks(text)
    named = {}
    for block in blocks:
        exec(compile(block, "ports.md", "exec"), {"__name__": "ports_md_example"})
        first = block.splitlines()[0]
        if re.fullmatch(r"# \w+\.py(:.*)?", first):
            named[first[2:].split(":")[0]] = block
    assert set(named) == {"mykl.py", "mykl_adapter.py"}
    adapter_lines = [line for line in named["mykl_adapter.py"].splitlines() if line.strip()]
    assert len(adapter_lines) <= 30, "the port's adapter is meant to fit in 30 lines"
    for name, block in named.items():
        (tmp_path / name).write_text(block)
    commands = _commands(text)
    assert [c.split("--framework ")[1].split()[0] for c in commands] == ["mykl:kl_div", "mykl_adapter:MyKlAdapter"]
    for command in commands:
        done = _run_as_written(command, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        rows = _rows(tmp_path / shlex.split(command)[shlex.split(command).index("--out") + 1])
        verdicts = {(r.part, r.verdict.value) for r in rows}
        if "MyKlAdapter" in command:
            assert verdicts == {("forward", "pass"), ("grad_input", "pass"), ("grad_target", "pass"),
                                ("grad2_input", "unsupported")}
        else:
            assert {v for p, v in verdicts if p == "forward"} == {"pass"}
            assert {v for p, v in verdicts if p != "forward"} == {"unsupported"}
    # a planted difference: batchmean divides by the number of elements, as mean does
    port = named["mykl.py"]
    assert port.count('"batchmean": lambda x: x.shape[0]') == 1
    (tmp_path / "mykl.py").write_text(port.replace('"batchmean": lambda x: x.shape[0]', '"batchmean": lambda x: x.size'))
    done = _run_as_written(commands[1] + " --force --strict", tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    rows = [r for r in _rows(tmp_path / "reports" / "mykl-adapter") if r.verdict.value != "unsupported"]
    assert {r.reduction for r in rows if r.verdict.value != "pass"} == {"batchmean"}
    assert {r.part for r in rows if r.verdict.value != "pass"} == {"forward", "grad_input", "grad_target"}
    assert all(r.verdict.value == "pass" for r in rows if r.reduction != "batchmean")


def test_the_selftest_of_a_function_finds_its_gradient_faults_not_applicable(tmp_path, capsys):
    """A function is judged for the forward only: the self-test's gradient variants have no call to plant into
    and say so, instead of failing as "planted nothing"; a forward variant still plants and is flagged."""
    variants = [w for v in ("zero_gradient", "missing_gradient", "upstream_dropped", "sign_error") for w in ("--variant", v)]
    code = main(["selftest", "--framework", HERE + "kl_div", *variants, *ONLY, "--out", str(tmp_path / "st"),
                 "--no-cache"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert out.count("no API of tests has gradients") == 3
