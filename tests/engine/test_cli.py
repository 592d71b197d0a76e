"""CLI exit codes and messages that need no framework: bad usage, bad case files, case listing."""

from __future__ import annotations

import subprocess
import sys

from conformance.cli import main


def test_unknown_framework_lists_the_known_ones(tmp_path, capsys):
    assert main(["run", "--framework", "tensorflo", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown framework 'tensorflo'" in err and "['mindspore', 'oneflow', 'torch']" in err and "Fix:" in err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_bad_case_file_exits_2_naming_file_case_and_field(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("- id: mine\n  input: [1.0]\n  target: [1.0]\n  dtype: float12\n")
    assert main(["run", "--framework", "torch", "--cases", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: case 'mine', field 'dtype': unknown dtype 'float12'" in err
    assert not (tmp_path / "out").exists()


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
