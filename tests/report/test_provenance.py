"""`report` refuses result sets that would mix, with one line and nothing written: a run given twice,
a row key twice, one case id with two contents (seeds, edited case files), a damaged details file."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from conformance.cli import main
from conformance.core.manifest import write_manifest
from conformance.core.results import ResultsWriter
from tests.helpers import make_result

API = "torch.nn.functional.kl_div"


def _run_dir(path, rows, **manifest):
    path.mkdir(parents=True)
    with ResultsWriter(path) as writer:
        for row in rows:
            writer.write(row)
    # what a finished run records of its rows: their count by verdict and how many cases they cover
    counts = dict(Counter(row.verdict.value for row in rows))
    write_manifest(path, {"framework": "torch", "status": "complete", "seed": 1, "counts": counts,
                          "cases": len({row.case_id for row in rows}), **manifest})
    return path


def _refused(tmp_path, capsys, runs, words, *extra):
    out = tmp_path / "merged"
    assert main(["report", *map(str, runs), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "Fix:" in err, err
    assert not out.exists()  # validated before the output directory is created
    return err


def test_the_same_run_twice_is_refused(tmp_path, capsys):
    """`report A A` used to double every count."""
    a = _run_dir(tmp_path / "a", [make_result()])
    _refused(tmp_path, capsys, [a, a], "given twice")
    copy = tmp_path / "copy-of-a"
    shutil.copytree(a, copy)
    err = _refused(tmp_path, capsys, [a, copy], "the same result appears twice")
    assert f"{copy}/results.jsonl" in err and "torch / torch.nn.functional.kl_div / cpu / forward" in err


def test_a_merged_directory_with_one_of_its_runs_is_refused(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", [make_result()])
    b = _run_dir(tmp_path / "b", [make_result(api="torch.nn.KLDivLoss")])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "ab")]) == 0
    capsys.readouterr()
    _refused(tmp_path, capsys, [tmp_path / "ab", b], "the same result appears twice")


def test_one_id_with_two_contents_is_refused_across_runs(tmp_path, capsys):
    """Two seeds (or two versions of a case file) under one id: different cases, counted as one."""
    a = _run_dir(tmp_path / "a", [make_result(case_digest="a" * 24, seed=1)])
    b = _run_dir(tmp_path / "b", [make_result(case_digest="b" * 24, seed=2, framework="oneflow",
                                              api="oneflow.nn.functional.kl_div")], seed=2)
    err = _refused(tmp_path, capsys, [a, b], "this case holds other values than in")
    assert "another --seed" in err


def test_one_id_with_two_contents_is_refused_within_a_run(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", [make_result(case_digest="a" * 24), make_result(case_digest="b" * 24,
                                                                                 api="torch.nn.KLDivLoss")])
    _refused(tmp_path, capsys, [a], "this case holds other values")


def test_a_baseline_of_other_values_is_refused(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", [make_result(case_digest="a" * 24)])
    base = _run_dir(tmp_path / "base", [make_result(case_digest="c" * 24, seed=9)], seed=9)
    _refused(tmp_path, capsys, [a], "the baseline holds other values", "--baseline", str(base))


def test_results_of_another_spec_are_refused_with_how_to_rebaseline(tmp_path, capsys):
    """Runs made before a spec change (another spec version) cannot be merged with this harness's, nor on
    their own: their verdicts answer another spec. The one line says how to make them again."""
    a = _run_dir(tmp_path / "a", [make_result()])
    old = _run_dir(tmp_path / "old", [make_result(spec_hash="fedcba9876543210", api="torch.nn.KLDivLoss")])
    for runs in ([a, old], [old]):
        err = _refused(tmp_path, capsys, runs, "another spec (hash fedcba9876543210)")
        assert "kl-conformance run" in err and "CHANGELOG.md" in err
    err = _refused(tmp_path, capsys, [a], "another spec (hash fedcba9876543210)", "--baseline", str(old))
    assert "re-baseline" in err


@pytest.mark.parametrize("damage", [b"{cut short", b"\xff\n"])
def test_a_damaged_details_file_is_refused_before_anything_is_written(tmp_path, capsys, damage):
    """It used to end in a traceback while report.html was being written, after other files."""
    a = _run_dir(tmp_path / "a", [make_result(verdict="value", cause="pointwise.formula")])
    (a / "details.jsonl").write_bytes(damage)
    _refused(tmp_path, capsys, [a], "details.jsonl: line 1")


def test_sound_runs_merge(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", [make_result(case_digest="a" * 24)])
    b = _run_dir(tmp_path / "b", [make_result(case_digest="a" * 24, api="torch.nn.KLDivLoss")])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "merged")]) == 0
    assert "merged 2 runs, 2 results" in capsys.readouterr().out
