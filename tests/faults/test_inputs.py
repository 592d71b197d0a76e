"""Hostile inputs: every YAML, number, formula, profile and cache entry the harness reads is bounded, and
a bad one is one line naming the file and the place, exit 2, never a hang, a traceback or a pass."""

from __future__ import annotations

import os
import re

import pytest

from conformance.cases.userfile import load_case_file
from conformance.cli import main
from conformance.core.errors import CaseFileError, SpecError
from conformance.core.specload import default_spec_path, load_spec
from conformance.judge.profiles import load_profile


def _laughs(levels: int = 9) -> str:
    """The "billion laughs" case file: each level holds nine aliases of the one before."""
    lines = ["- id: laughs", '  target: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]']
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    lines.append(f"  input: *l{levels - 1}")
    return "\n".join(lines) + "\n"


def _one_line_exit_2(capsys, args, *words) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "Fix:" in err, err
    for word in words:
        assert word in err, err
    return err


def test_billion_laughs_case_file_is_refused_at_load(tmp_path, capsys):
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs())
    assert len(path.read_bytes()) < 600
    _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "aliases", "line ")


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("- &a {id: loop, input: [1.0], target: [0.5], note: *a}\n")
    with pytest.raises(CaseFileError, match="recursive alias"):
        load_case_file(path)


@pytest.mark.parametrize("literal", ["1" * 4301, "-" + "9" * 5000, "0x" + "f" * 4000, "0o" + "7" * 6000])
def test_integers_beyond_pythons_limit_are_refused(tmp_path, capsys, literal):
    path = tmp_path / "big.yaml"
    path.write_text(f"- id: big\n  input: [{literal}]\n  target: [0.5]\n")
    _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "decimal digits",
                     "line 2")


def test_a_lone_surrogate_in_a_case_id_is_refused_at_load(tmp_path, capsys):
    path = tmp_path / "surrogate.yaml"
    path.write_text('- id: "a\\ud800b"\n  input: [-1.0]\n  target: [0.5]\n')
    for args in (["cases", "--cases", str(path), "--suite", "none"],
                 ["cases", "--cases", str(path), "--suite", "none", "--shard", "1/2"]):
        _one_line_exit_2(capsys, args, str(path), "surrogate", "line 1")


def _spec_with(tmp_path, old: str, new: str):
    """The shipped spec with its first `old` replaced by `new`."""
    text = default_spec_path().read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("old, new, words", [
    ("    factor: 8\n", "    factor: .nan\n", "not finite"),
    ("    factor: 8\n", "    factor: .inf\n", "not finite"),
    ("    factor: 8\n", "    factor: 8\n    factor: 9\n", "given twice"),
    ("    factor: 8\n", "    factor: " + "9" * 5000 + "\n", "decimal digits"),
    # libyaml refuses the escape itself; PyYAML's own parser reads it, and the loader refuses the string
    ("    factor: 8\n", '    factor: 8\n    extra: "\\udc00"\n', "surrogate|invalid Unicode"),
])
def test_hostile_specs_are_refused(tmp_path, capsys, old, new, words):
    path = _spec_with(tmp_path, old, new)
    with pytest.raises(SpecError, match=words):
        load_spec(path)
    err = _one_line_exit_2(capsys, ["--spec", str(path), "cases", "--count"], str(path))
    assert re.search(words, err), err


def test_the_global_options_are_taken_after_the_command_too(tmp_path, capsys):
    """running.md lists --spec among run's options, and `run --spec FILE` was refused ("unrecognized arguments"):
    --spec and --debug are read before the command or after it, and the one given after wins."""
    spec = _spec_with(tmp_path, "    factor: 8\n", "    factor: 8\n    extra: 1\n")
    for argv in (["cases", "--spec", str(spec), "--count"], ["--spec", str(default_spec_path()), "cases", "--spec",
                                                               str(spec), "--count"]):
        _one_line_exit_2(capsys, argv, str(spec))
    assert main(["cases", "--spec", str(default_spec_path()), "--count"]) == 0
    assert main(["--spec", str(spec), "cases", "--spec", str(default_spec_path()), "--count"]) == 0
    assert capsys.readouterr().out.split() == ["907", "907"]
    with pytest.raises(SpecError):  # --debug after the command shows the traceback, as before it
        main(["cases", "--debug", "--spec", str(spec), "--count"])


def test_a_spec_and_a_profile_that_are_not_utf8_are_named(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(default_spec_path().read_bytes().replace(b"Cover & Thomas", b"Cover \xe9 Thomas"))
    _one_line_exit_2(capsys, ["--spec", str(spec), "cases", "--count"], str(spec), "not UTF-8", "line 25")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "torch.yaml").write_bytes((default_spec_path().parent / "profiles" / "torch.yaml").read_bytes()
                                          + b"# caf\xe9\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_profile("torch", load_spec(), profiles)


@pytest.mark.parametrize("dtype, value", [("int8", "128"), ("int8", "-129"), ("uint8", "-1"), ("uint8", "256.0"),
                                          ("int16", "40000"), ("int32", "2147483648"),
                                          ("int64", "9223372036854775808"), ("int64", "-1e19")])
def test_integers_outside_the_dtypes_range_are_refused(tmp_path, capsys, dtype, value):
    path = tmp_path / "range.yaml"
    path.write_text(f"- id: wraps\n  dtype: {{input: float32, target: {dtype}}}\n  input: [-1.0, -2.0]\n"
                    f"  target: [1, {value}]\n")
    err = _one_line_exit_2(capsys, ["cases", "--cases", str(path), "--suite", "none"], str(path), "case 'wraps'",
                           "field 'target'", "range")
    assert "choose a wider dtype" in err


def test_integers_at_the_ends_of_the_range_load(tmp_path):
    path = tmp_path / "ends.yaml"
    path.write_text("- {id: ends, dtype: {input: float32, target: int8}, input: [-1.0, -2.0], target: [-128, 127]}\n")
    assert load_case_file(path)[0].target.tolist() == [-128.0, 127.0]


POINTWISE = 'formula: "factor * (u * magnitude + tiny * (1 + s))"'


@pytest.mark.parametrize("old, new, where, words", [
    # every bound the largest float (1e999 is inf): every answer passed
    (POINTWISE, 'formula: "factor * (u * magnitude + tiny * (1 + s)) * 1e999"', "tolerance.pointwise.formula",
     "not finite"),
    (POINTWISE, 'formula: "factor * (u * magnitude + tiny * (1 + s)) * 1e10"', "tolerance.pointwise.formula",
     "larger than the value it bounds"),
    (POINTWISE, 'formula: "0 - factor * (u * magnitude + tiny * (1 + s))"', "tolerance.pointwise.formula",
     "negative"),
    # an exponent tower: Python's integers computed it without end
    (POINTWISE, 'formula: "factor * (u * magnitude + tiny * (1 + s)) * 9**9**9"', "tolerance.pointwise.formula",
     "not finite"),
    ('log_target_true: "abs(target - input)"', 'log_target_true: "target - input"',
     "tolerance.pointwise.sensitivity.log_target_true", "negative"),
    ('formula: "(sum_bounds + gamma * sum_abs) / divisor + 2 * u * abs(result)"',
     'formula: "(sum_bounds + gamma * sum_abs) / divisor + 2 * u * abs(result) + 1e10"',
     "tolerance.reduction.formula", "larger than the value it bounds"),
    ('summation: "gamma * sum_abs"', 'summation: "gamma * sum_abs * 2**1024"', "tolerance.gradient.summation",
     "not finite"),
    ('formula: "factor * (u * magnitude * abs(scale) + tiny * (1 + s))"',
     'formula: "factor * (u * magnitude * abs(scale) + tiny * (1 + s)) - 1e-3"', "tolerance.gradient.formula",
     "negative"),
])
def test_a_tolerance_that_lets_answers_pass_is_a_spec_error(tmp_path, capsys, old, new, where, words):
    path = _spec_with(tmp_path, old, new)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f": {where}: " in str(info.value) and words in str(info.value), info.value
    _one_line_exit_2(capsys, ["--spec", str(path), "cases", "--count"], str(path), where, words)


def test_formulas_are_evaluated_without_unbounded_integers():
    from conformance.core.formula import evaluate

    assert evaluate("9**9**9", ()) == float("inf")
    assert evaluate("-(9**9**9) * 0", ()) != evaluate("-(9**9**9) * 0", ())  # inf * 0 is NaN, as in float64
    assert evaluate("(ceil(log2(max(n, 1))) + 1) * u", ("n", "u"), n=1000, u=0.5) == 5.5


def test_a_missing_profiles_directory_is_an_error(tmp_path, capsys):
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: one, input: [-1.0], target: [0.5], dtype: float64}\n")
    absent = tmp_path / "profles"
    _one_line_exit_2(capsys, ["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(cases),
                              "--suite", "none", "--profiles", str(absent), "--out", str(tmp_path / "out"),
                              "--no-progress", "--no-repro", "--no-cache"], str(absent), "no such directory")
    assert not (tmp_path / "out").exists()


def test_a_profile_that_is_not_a_regular_file_is_an_error(tmp_path, capsys):
    """`--profiles DIR` whose torch.yaml is a directory or a FIFO was read as "no profile": every deviation it
    documents counted as undocumented, exit 0."""
    cases = tmp_path / "cases.yaml"
    cases.write_text("- {id: one, input: [-1.0], target: [0.5], dtype: float64}\n")
    for kind in ("directory", "fifo"):
        profiles = tmp_path / kind
        profiles.mkdir()
        made = profiles / "numpy-test.yaml"
        made.mkdir() if kind == "directory" else os.mkfifo(made)
        _one_line_exit_2(capsys, ["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(cases),
                                  "--suite", "none", "--profiles", str(profiles), "--out", str(tmp_path / "out"),
                                  "--no-progress", "--no-repro", "--no-cache"], str(made), "not a regular file")
        assert not (tmp_path / "out").exists()


FAULT_CASES = """
- {id: ok-before, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
"""


def _cached_run(tmp_path, out: str, adapter: str = "OffByOneAdapter") -> dict[str, str]:
    """Verdicts by case id of a run that reads and writes the reference cache in tmp_path/cache."""
    from conformance.core.results import iter_results

    cases = tmp_path / "cases.yaml"
    cases.write_text(FAULT_CASES)
    assert main(["run", "--framework", f"tests.faults.adapters:{adapter}", "--cases", str(cases),
                 "--suite", "none", "--out", str(tmp_path / out), "--no-progress", "--no-repro",
                 "--cache-dir", str(tmp_path / "cache")]) in (0, 1)
    return {row.case_id: row.verdict.value for row in iter_results(tmp_path / out)}


def _poison(tmp_path, reseal: bool) -> int:
    """Every cached expectation re-packed with a bound of 1e300 (the issue's attack); with `reseal`, sealed
    again under the run's key, as someone who has it would. Returns how many entries were changed."""
    import dataclasses
    import sqlite3

    import numpy as np

    from conformance.judge.cacheentry import decode, encode, pack, unpack
    from conformance.judge.cachekey import reference_build
    from conformance.judge.cacheseal import load_secret, seal

    changed = 0
    with sqlite3.connect(tmp_path / "cache" / f"reference-{reference_build()}.sqlite") as db:
        for key, stored in db.execute("SELECT key, value FROM expected").fetchall():
            expected = decode(unpack(stored[32:]))
            if expected.bound is None:
                continue
            body = pack(encode(dataclasses.replace(expected, bound=np.full_like(expected.bound, 1e300))))
            value = seal(load_secret(tmp_path / "cache"), "expected", key, body) if reseal else stored[:32] + body
            db.execute("UPDATE expected SET value = ? WHERE key = ?", (value, key))
            changed += 1
    return changed


@pytest.mark.parametrize("reseal", [False, True], ids=["edited", "edited-and-resealed"])
def test_a_poisoned_cache_never_turns_a_divergence_into_a_pass(tmp_path, capsys, reseal):
    assert _cached_run(tmp_path, "first")["the-fault"] == "value"
    # the two cases have one content: an entry for the spec's expectation, and one for each alternative spec the
    # explanation of the fault asked (dtypes.computation's, for a float64 case)
    assert _poison(tmp_path, reseal) >= 1
    capsys.readouterr()
    assert _cached_run(tmp_path, "second")["the-fault"] == "value"
    warnings = [line for line in capsys.readouterr().err.splitlines() if "reference cache" in line]
    # edited without the key, the entry is computed again and sealed anew (tests/faults/test_cache_trust.py);
    # sealed again under the key, the sample catches it and the whole cache goes
    assert len(warnings) == 1 and ("dropped" if reseal else "computed again") in warnings[0], warnings
    # the next run computes afresh or reads the honest entry, and still flags the fault
    assert _cached_run(tmp_path, "third")["the-fault"] == "value"
    assert "reference cache" not in capsys.readouterr().err


def test_a_held_cache_lock_is_waited_for_a_bounded_time(tmp_path, capsys, monkeypatch):
    import subprocess
    import sys

    from conformance.judge.cachekey import reference_build

    (tmp_path / "cache").mkdir()
    lock = tmp_path / "cache" / f"reference-{reference_build()}.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               f"f = open({str(lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('locked', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("KL_CACHE_LOCK_TIMEOUT_S", "0")
        assert _cached_run(tmp_path, "out")["the-fault"] == "value"
    finally:
        holder.kill()
        holder.wait()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "reference cache" in line]
    assert len(warnings) == 1 and "holds its lock file" in warnings[0] and "without the cache" in warnings[0]
    import json
    assert "holds its lock file" in json.loads((tmp_path / "out" / "run.json").read_text())["reference_cache"]["problem"]


@pytest.mark.parametrize("shapes, reduction, log_target, dialect", [
    (((256, 1), (1, 256)), "none", False, "canonical"),  # an outer broadcast: the result outgrows the inputs
    (((256, 1), (1, 256)), "sum", True, "canonical"),
    (((1 << 15,), (1 << 15,)), "none", True, "canonical"),
    (((1 << 15,), (1,)), "batchmean", False, "canonical"),
    (((4, 1 << 13), (4, 1 << 13)), "none", False, "keras"),
])
def test_the_memory_estimate_covers_judging_a_case(shapes, reduction, log_target, dialect):
    """What judging one case allocates in the harness's process (the reference's temporaries, every part's
    expectation and observation, and the alternative expectations an explanation reads for a divergence)
    stays inside the share of needs_mb that the estimate gives the harness."""
    import tracemalloc

    import numpy as np

    from conformance.core.case import Case, DtypePair, Params
    from conformance.core.model import Observation
    from conformance.judge.casejudge import CaseJudge
    from conformance.run.selection import FRAMEWORK_BYTES_PER_ELEMENT, element_count, needs_mb

    spec = load_spec()
    rng = np.random.default_rng(7)
    keras = dialect == "keras"
    x = rng.random(shapes[0]) if keras else -3 * rng.random(shapes[0])
    t = -3 * rng.random(shapes[1]) if log_target else rng.random(shapes[1])
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, 0.0]  # conventions apply, and explanations have work
    case = Case(id="memory", params=Params(reduction, log_target, prob_input=keras), input=x, target=t,
                dtype=DtypePair("float32", "float32"), family="user", parts=("forward", "grad_input", "grad_target"))
    verdicts = []
    tracemalloc.start()
    try:
        judge = CaseJudge(case, spec)
        for part in ("forward", "grad_input", "grad_target", "grad2_input"):
            expected = judge.expected(spec, part, dialect)
            if expected.value is None:
                continue
            off = np.asarray(expected.value, dtype=np.float64) + 1.0  # a divergence: explained and checked
            verdicts.append(judge.judgement(part, dialect, Observation(value=off, dtype=expected.result_dtype,
                                                                       shape=off.shape)).verdict)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert any(verdict.is_divergence for verdict in verdicts)
    share = needs_mb(case) * 2**20 - element_count(case) * FRAMEWORK_BYTES_PER_ELEMENT
    assert peak <= share, f"judging took {peak / element_count(case):.0f} bytes per element"


def test_running_out_of_memory_computing_expectations_is_a_row(tmp_path, capsys, monkeypatch):
    """Where the machine has less memory free than the budget says, the reference's MemoryError (here
    raised on one case by the reference itself, as NumPy raises it) refuses that case with a row; the run
    completes, and every other case is judged."""
    import json

    import conformance.judge.casejudge as casejudge

    real = casejudge.expected_for

    def short_of_memory(case, spec, part, dialect="canonical"):
        if "fault" in case.id:
            raise MemoryError("Unable to allocate 7.5 GiB for an array")  # as NumPy words it
        return real(case, spec, part, dialect)

    monkeypatch.setattr(casejudge, "expected_for", short_of_memory)
    cases = tmp_path / "cases.yaml"
    cases.write_text(FAULT_CASES)
    assert main(["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(cases), "--suite",
                 "none", "--out", str(tmp_path / "out"), "--no-progress", "--no-repro", "--no-cache"]) == 0
    from conformance.core.results import iter_results

    rows = {row.case_id: row for row in iter_results(tmp_path / "out")}
    assert rows["ok-before"].verdict.value == "pass"
    assert rows["the-fault"].verdict.value == "unsupported" and "ran out of memory" in rows["the-fault"].message
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "complete"
    assert "Traceback" not in capsys.readouterr().err
