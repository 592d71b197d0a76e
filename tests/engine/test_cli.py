"""CLI exit codes and messages that need no framework: bad usage, bad case files, case listing."""

from __future__ import annotations

import subprocess
import sys

from conformance.cli import main


def test_unknown_framework_lists_the_known_ones(tmp_path, capsys):
    assert main(["run", "--framework", "tensorflo", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    from conformance.adapters.registry import known_adapters

    assert "unknown framework 'tensorflo'" in err and f"use one of {sorted(known_adapters())}" in err and "Fix:" in err
    assert {"torch", "oneflow", "mindspore", "paddle", "mlx", "rtorch", "optax"} <= set(known_adapters())
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_bad_case_file_exits_2_naming_file_case_and_field(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("- id: mine\n  input: [1.0]\n  target: [1.0]\n  dtype: float12\n")
    assert main(["run", "--framework", "torch", "--cases", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: case 'mine', field 'dtype': unknown dtype 'float12'" in err
    assert not (tmp_path / "out").exists()


def test_a_case_whose_values_do_not_fill_its_shape_exits_2_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("- id: mine\n  input: [-1.0, -2.0]\n  target: 0.5\n  shape: [0, 4]\n")
    out = tmp_path / "out"
    assert main(["run", "--framework", "tests.faults.adapters:NumpyAdapter", "--cases", str(path), "--suite", "none",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: case 'mine', field 'input': 2 numbers for shape [0, 4]" in err
    assert "Fix:" in err and not out.exists()


def test_cases_lists_ids_and_counts(capsys):
    assert main(["cases", "--count"]) == 0
    count = int(capsys.readouterr().out)
    assert count > 300
    assert main(["cases", "--only", "fwd/batchmean/*/onehot/*"]) == 0
    ids = capsys.readouterr().out.split()
    assert ids and all(i.startswith("fwd/batchmean/") and "/onehot/" in i for i in ids)


def test_user_cases_alone(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("- id: only-me\n  input: [-1.0]\n  target: [0.5]\n")
    assert main(["cases", "--cases", str(path), "--suite", "none"]) == 0
    assert capsys.readouterr().out.split() == ["only-me"]


def test_bad_only_id_is_a_usage_error(capsys):
    assert main(["cases", "--only", "not-an-id"]) == 2
    assert "not a generated case id" in capsys.readouterr().err


def test_bad_arguments_exit_2(capsys):
    assert main(["run"]) == 2
    assert "--framework" in capsys.readouterr().err


def test_module_and_console_script_are_the_same_command():
    out = subprocess.run([sys.executable, "-m", "conformance", "--help"], capture_output=True, text=True, check=True)
    assert "kl-conformance" in out.stdout and "run" in out.stdout


def test_cases_piped_into_head_ends_quietly(tmp_path):
    """`kl-conformance cases | head` printed a BrokenPipeError traceback once head had its lines."""
    process = subprocess.Popen([sys.executable, "-m", "conformance", "cases"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path)
    first = process.stdout.readline()
    process.stdout.close()  # what head does after its lines
    err = process.stderr.read()
    assert process.wait(timeout=60) == 0
    assert first.startswith(b"fwd/") and b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_every_part_the_readme_offers_is_accepted(capsys):
    """`run --part grad2_input` was refused by argparse although the README offers it."""
    from conformance.cli import build_parser
    from conformance.core.model import PARTS

    for part in PARTS:
        args = build_parser().parse_args(["run", "--framework", "torch", "--part", part])
        assert args.part == [part]


def test_huge_integer_in_a_case_file_exits_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "huge.yaml"
    path.write_text("- id: big\n  input: [1" + "0" * 400 + "]\n  target: [0.5]\n")
    assert main(["run", "--framework", "torch", "--cases", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "too large for a float64" in err and "Fix:" in err
    assert not (tmp_path / "out").exists()


import pytest  # noqa: E402


@pytest.mark.parametrize("case_id, words", [
    ("fwd/sum/log_target=0/4x6/float32/bogus/s0", "unknown family 'bogus'"),  # was KeyError
    ("fwd/sum/log_target=0/4x6/float12/softmax/s0", "unknown dtype 'float12'"),  # was ValueError
    ("fwd/sum(size_average)/log_target=0/4x6/float32/softmax/s0", "legacy argument"),
    ("fwd/sum(foo=1)/log_target=0/4x6/float32/softmax/s0", "legacy argument"),  # was rebuilt as another id
    ("fwd/sum/log_target=0/7.T/float32/softmax/s0", "transposed"),
    ("fwd/sum/log_target=1/4x6/float32/negative_target/s0", "log_target=1"),
    ("fwd/sum/log_target=0/100000x100000/float32/softmax/s0", "MB"),  # would allocate 80 GB
])
def test_only_with_an_impossible_id_is_one_line(tmp_path, capsys, case_id, words):
    out = tmp_path / "out"
    for command in (["cases"], ["run", "--framework", "torch", "--out", str(out)]):
        assert main([*command, "--only", case_id]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--only" in err and words in err and "Fix:" in err, err
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (["--seed", "-1"], "--seed"),  # was a ValueError traceback from NumPy
    (["--samples", "0"], "--samples"),
])
def test_bad_numbers_are_usage_errors(capsys, args, words):
    assert main(["cases", "--count", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Fix:" in err[0]


@pytest.mark.parametrize("value", ["nan", "0", "-3"])
def test_a_timeout_must_be_a_positive_number(tmp_path, capsys, value):
    """--timeout-s nan passed the `<= 0` check and left the worker without a time limit."""
    out = tmp_path / "out"
    assert main(["run", "--framework", "torch", "--timeout-s", value, "--out", str(out)]) == 2
    assert "--timeout-s" in capsys.readouterr().err
    assert not out.exists()


def test_one_user_case_id_in_two_files_is_refused(tmp_path, capsys):
    """The same file twice, or two files sharing an id, used to run the case twice under one id."""
    one = tmp_path / "one.yaml"
    one.write_text("- id: a\n  input: [-1.0]\n  target: [0.5]\n")
    assert main(["cases", "--suite", "none", "--cases", str(one), "--cases", str(one)]) == 2
    assert "duplicate id 'a'" in capsys.readouterr().err
    generated = "fwd/sum/log_target=0/4x6/float32/softmax/s0"
    clash = tmp_path / "clash.yaml"
    clash.write_text(f"- id: {generated}\n  input: [-1.0]\n  target: [0.5]\n")
    assert main(["cases", "--cases", str(clash), "--only", "fwd/sum/*/softmax/*"]) == 2
    err = capsys.readouterr().err
    assert f"case {generated!r}" in err and "generated case" in err and "Fix:" in err
    assert main(["cases", "--cases", str(clash), "--suite", "none"]) == 0  # alone it is fine


def test_repro_of_a_case_the_api_cannot_express_is_one_line(capsys):
    # it ended in a ValueError traceback from the reference (found with the Keras adapter); no framework is
    # imported to tell (optax is not installed here)
    assert main(["repro", "fwd/sum/log_target=0/4x6/float32/softmax/s0", "--framework", "optax"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot express" in err and "no reduction 'sum'" in err
