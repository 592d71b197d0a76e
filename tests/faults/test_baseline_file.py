"""The compact baseline file (`--write-baseline FILE`, read by `--baseline FILE`): the gates decide with it
exactly as with the run's directory, its bytes depend only on the rows, and a file that is not one is refused
in one line."""

from __future__ import annotations

import gzip
import json

import pytest

from conformance import api
from conformance.cli import main
from conformance.core.errors import ConformanceError

ADAPTERS = "tests.faults.adapters:"
# Judged first by PlantedBugsAdapter (the baseline), then by MixedFaultAdapter (the first four) and NoKernelAdapter
# (the last): "ok-same" passes both times; "off-fixed" is off by one, then honest (fixed); "fault-nan-new" is
# honest, then NaN (new); "fault-ieee-changed" is NaN where its target is 0, then off by one (changed);
# "after-lost" is honest, then has no kernel (lost).
FIRST = """
- {id: ok-same, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: off-fixed, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: fault-nan-new, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
- {id: fault-ieee-changed, input: [[-0.5, -1.5]], target: [[0.0, 1.0]], reduction: sum, dtype: float64}
"""
LAST = """
- {id: after-lost, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: mean, dtype: float64}
"""


def _run(tmp_path, adapter, case_text, out, *extra):
    cases = tmp_path / f"{out}.yaml"
    cases.write_text(case_text)
    return main(["run", "--framework", ADAPTERS + adapter, "--cases", str(cases), "--suite", "none",
                 "--out", str(tmp_path / out), "--no-progress", "--no-repro", *extra])


@pytest.fixture
def runs(tmp_path):
    """The baseline run (with its compact file) and the two runs gated against it."""
    assert _run(tmp_path, "PlantedBugsAdapter", FIRST + LAST, "accepted", "--write-baseline",
                str(tmp_path / "baseline" / "numpy.jsonl.gz")) == 0
    assert _run(tmp_path, "MixedFaultAdapter", FIRST, "now") == 0
    assert _run(tmp_path, "NoKernelAdapter", LAST, "now-lost") == 0
    return tmp_path


def _gated_report(tmp_path, baseline, out):
    code = main(["report", str(tmp_path / "now"), str(tmp_path / "now-lost"), "--out", str(tmp_path / out),
                 "--baseline", str(baseline), "--fail-on-new"])
    diff = json.loads((tmp_path / out / "baseline.json").read_text())
    decision = json.loads((tmp_path / out / "summary.json").read_text())["decision"]
    junit = (tmp_path / out / "junit.xml").read_text()
    return code, {k: v for k, v in diff.items() if k != "baseline"}, \
        json.dumps(decision).replace(str(baseline), "BASELINE"), junit.replace(str(baseline), "BASELINE")


def test_the_gates_decide_with_the_compact_file_as_with_the_run_directory(runs, capsys):
    """New, changed, fixed and lost rows: the same exit code, baseline.json, decision and junit.xml."""
    file = runs / "baseline" / "numpy.jsonl.gz"
    with_dir = _gated_report(runs, runs / "accepted", "with-dir")
    with_file = _gated_report(runs, file, "with-file")
    code, diff, _, _ = with_dir
    assert code == 1
    assert {kind: [item["case_id"] for item in diff[kind]] for kind in ("new", "changed", "fixed", "lost")} == \
        {"new": ["fault-nan-new"], "changed": ["fault-ieee-changed"], "fixed": ["off-fixed"], "lost": ["after-lost"]}
    assert with_file == with_dir
    # and `run --baseline FILE`, and the API
    assert _run(runs, "MixedFaultAdapter", FIRST, "run-dir", "--baseline", str(runs / "accepted"),
                "--fail-on-new") == 1
    assert _run(runs, "MixedFaultAdapter", FIRST, "run-file", "--baseline", str(file), "--fail-on-new") == 1
    for out in ("run-dir", "run-file"):
        diff = json.loads((runs / out / "baseline.json").read_text())
        assert [item["case_id"] for item in diff["failing"]] == ["fault-nan-new", "fault-ieee-changed"]
    by_dir = api.gate([runs / "now", runs / "now-lost"], fail_on_new=True, baseline=runs / "accepted")
    by_file = api.gate([runs / "now", runs / "now-lost"], fail_on_new=True, baseline=file)
    assert (by_file.code, by_file.counts) == (by_dir.code, by_dir.counts) == (1, by_dir.counts)
    assert [line.replace(str(file), "B") for line in by_file.lines] == \
        [line.replace(str(runs / "accepted"), "B") for line in by_dir.lines]
    # what the pytest plugin compares each item with
    from conformance.report.baseline import baseline_rows

    assert baseline_rows(file, api.load_spec().hash, 0) == baseline_rows(runs / "accepted", api.load_spec().hash, 0)


def test_the_same_rows_give_the_same_bytes(runs):
    """A refresh that changed nothing commits no diff: no time in the gzip header, rows in a fixed order."""
    again = runs / "again.jsonl.gz"
    assert main(["report", str(runs / "accepted"), "--out", str(runs / "merged"), "--write-baseline",
                 str(again)]) == 0
    first = (runs / "baseline" / "numpy.jsonl.gz").read_bytes()
    assert again.read_bytes() == first
    assert first[4:8] == b"\0\0\0\0"  # gzip's MTIME
    header = json.loads(gzip.decompress(first).splitlines()[0])
    assert header["format"] == "kl-conformance baseline" and header["releases"].keys() == {"numpy-test"}


@pytest.mark.parametrize("content, problem", [
    (b"not gzip at all", "not a baseline file"),
    (gzip.compress(b'{"format": "kl-conformance baseline", "format_version": 99, "spec_hash": null, '
                   b'"seeds": [], "releases": {}}\n', mtime=0), "format version 99"),
    (gzip.compress(b'{"rows": []}\n', mtime=0), "names no format"),
    (gzip.compress(b"", mtime=0), "an empty file"),
], ids=["not-gzip", "other-version", "no-header", "empty"])
def test_a_file_that_is_not_a_baseline_is_refused_in_one_line(runs, capsys, content, problem):
    bad = runs / "bad.jsonl.gz"
    bad.write_bytes(content)
    assert _run(runs, "MixedFaultAdapter", FIRST, "refused", "--baseline", str(bad), "--fail-on-new") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and problem in err[0] and "--write-baseline FILE" in err[0], err
    assert not (runs / "refused").exists()
    with pytest.raises(ConformanceError, match=problem):
        api.gate(runs / "now", fail_on_new=True, baseline=bad)
    # a cut file (its gzip trailer lost)
    whole = (runs / "baseline" / "numpy.jsonl.gz").read_bytes()
    bad.write_bytes(whole[:-6])
    assert main(["report", str(runs / "now"), "--out", str(runs / "refused"), "--baseline", str(bad)]) == 2
    assert "not a baseline file" in capsys.readouterr().err and not (runs / "refused").exists()


def test_a_baseline_file_whose_header_lost_its_spec_is_refused(runs, capsys):
    """Results without the spec's hash would be compared with another spec's (the spec check had nothing to check):
    refused, as a file of another spec is."""
    lines = gzip.decompress((runs / "baseline" / "numpy.jsonl.gz").read_bytes()).splitlines(keepends=True)
    header = json.loads(lines[0])
    for tampered in ({k: v for k, v in header.items() if k != "spec_hash"}, {**header, "spec_hash": None}):
        bad = runs / "no-spec.jsonl.gz"
        bad.write_bytes(gzip.compress(json.dumps(tampered).encode() + b"\n" + b"".join(lines[1:]), mtime=0))
        assert _run(runs, "MixedFaultAdapter", FIRST, "refused", "--baseline", str(bad), "--fail-on-new") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "line 1" in err[0] and "spec_hash" in err[0], err
        assert not (runs / "refused").exists()


def test_a_baseline_directory_whose_run_json_is_damaged_or_foreign_is_refused(runs, capsys):
    """`run --baseline DIR --fail-on-new` read only DIR's rows: a run.json that is a list, cut short or of format 99
    passed the gate (exit 0), where `report DIR` refuses the same directory. A status no run writes passed both."""
    manifest = json.loads((runs / "accepted" / "run.json").read_text())
    for content, problem in (("[1, 2]", "a manifest must be a JSON object"), ('{"a":', "run.json"),
                             (json.dumps({**manifest, "format_version": 99}), "format version 99"),
                             (json.dumps({**manifest, "status": "bogus"}), "field 'status' holds \"bogus\"")):
        (runs / "accepted" / "run.json").write_text(content)
        assert _run(runs, "MixedFaultAdapter", FIRST, "refused", "--baseline", str(runs / "accepted"),
                    "--fail-on-new") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--baseline" in err[0] and problem in err[0], err
        assert not (runs / "refused").exists()
        with pytest.raises(ConformanceError, match="--baseline|baseline"):
            api.gate([str(runs / "now")], baseline=str(runs / "accepted"), fail_on_new=True)
        assert main(["report", str(runs / "accepted"), "--out", str(runs / "refused-report")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and problem in err[0], err
        assert not (runs / "refused-report").exists()
    # and a run resumed over it (its last content: the status no run writes)
    results = (runs / "accepted" / "results.jsonl").read_bytes()
    assert _run(runs, "PlantedBugsAdapter", FIRST + LAST, "accepted", "--resume") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'status' holds \"bogus\"" in err[0], err
    assert (runs / "accepted" / "results.jsonl").read_bytes() == results


def test_write_baseline_inside_the_output_directory_is_refused(runs, capsys):
    assert _run(runs, "MixedFaultAdapter", FIRST, "inside", "--write-baseline", str(runs / "inside" / "b.gz")) == 2
    err = capsys.readouterr().err
    assert "--write-baseline" in err and "inside the output directory" in err and not (runs / "inside").exists()


def test_write_baseline_in_a_folder_that_cannot_be_made_is_refused_before_the_run(runs, capsys):
    (runs / "a-file").write_text("")
    assert _run(runs, "MixedFaultAdapter", FIRST, "blocked", "--write-baseline", str(runs / "a-file" / "b.gz")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--write-baseline" in err[0] and "cannot be written" in err[0], err
    assert not (runs / "blocked").exists()


def test_write_baseline_never_replaces_what_the_command_reads_nor_a_file_that_is_not_one(runs, capsys):
    """Its target is renamed into place: one of the command's inputs (a run it merges, its known findings, its case
    file), a link, a device or a FIFO would be replaced by a baseline. Each is refused in one line, nothing written."""
    import os

    results = runs / "now" / "results.jsonl"
    before = results.read_bytes()
    known = runs / "known.yaml"
    known.write_text("- {id: k, case_id: ok-same, verdict: value, reason: r}\n")
    fifo = runs / "fifo"
    os.mkfifo(fifo)
    (runs / "link").symlink_to(runs / "elsewhere.gz")
    for target, extra in ((results, ()), (known, ("--known", str(known))), (fifo, ()), (runs / "link", ())):
        code = main(["report", str(runs / "now"), "--out", str(runs / "merged"), "--write-baseline", str(target),
                     *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--write-baseline" in err[0], (target, err)
        assert not (runs / "merged").exists()
    assert results.read_bytes() == before and known.read_text().startswith("- {id: k")
    # an input through a link that loops is still refused in the one line that reads it, never a traceback
    (runs / "loop").symlink_to(runs / "loop")
    for extra in (["report", str(runs / "loop")], ["report", str(runs / "now"), "--known", str(runs / "loop")]):
        code = main([*extra, "--out", str(runs / "merged"), "--write-baseline", str(runs / "b.gz")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "loop" in err[0] and "Traceback" not in err[0], (extra, err)
    assert _run(runs, "MixedFaultAdapter", FIRST, "own-cases", "--write-baseline", str(runs / "own-cases.yaml")) == 2
    assert "what this command reads (--cases" in capsys.readouterr().err and not (runs / "own-cases").exists()


def test_a_failed_gate_or_an_unfinished_run_writes_no_baseline(runs, capsys):
    """A baseline records an accepted build: written over the baseline a gate just failed on, the same build
    would pass next time. And a run that did not finish would drop rows a later gate then calls added."""
    baseline = runs / "baseline" / "numpy.jsonl.gz"
    before = baseline.read_bytes()
    assert _run(runs, "MixedFaultAdapter", FIRST, "gated", "--baseline", str(baseline), "--fail-on-new",
                "--write-baseline", str(baseline)) == 1
    assert "not written: a gate failed (exit 1)" in capsys.readouterr().err
    assert baseline.read_bytes() == before
    assert main(["report", str(runs / "now"), "--out", str(runs / "merged"), "--baseline", str(baseline),
                 "--fail-on-new", "--write-baseline", str(runs / "refreshed.gz")]) == 1
    assert "not written: a gate failed" in capsys.readouterr().err and not (runs / "refreshed.gz").exists()
    # an interrupted run, merged: its rows are not every selected case's
    manifest = json.loads((runs / "now" / "run.json").read_text())
    (runs / "now" / "run.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    main(["report", str(runs / "now"), "--out", str(runs / "merged-cut"), "--write-baseline", str(runs / "cut.gz")])
    assert "MixedFaultAdapter run did not judge every selected case" in capsys.readouterr().err
    assert not (runs / "cut.gz").exists()
    # a run whose framework did not load judged nothing: its baseline would call every row added next time
    _run(runs, "UnloadableAdapter", FIRST, "not-run", "--write-baseline", str(runs / "not-run.gz"))
    assert "not written: the tests.faults.adapters:UnloadableAdapter run did not judge every selected case" \
        in capsys.readouterr().err
    assert not (runs / "not-run.gz").exists()
    # a gate that passes writes it, over the baseline it read
    assert _run(runs, "PlantedBugsAdapter", FIRST + LAST, "again", "--baseline", str(baseline), "--fail-on-new",
                "--write-baseline", str(baseline)) == 0
    assert "Baseline: " in capsys.readouterr().out


def test_run_and_report_never_write_inside_the_baseline_run_they_read(runs, capsys):
    """`run --out BASE/sub --baseline BASE` wrote its run inside the baseline's directory, where a later report of
    BASE would read it back (report refused it only for the runs it merges)."""
    for command in (["run", "--framework", ADAPTERS + "MixedFaultAdapter", "--cases", str(runs / "now.yaml"),
                     "--suite", "none", "--no-progress", "--no-repro"], ["report", str(runs / "now")]):
        assert main([*command, "--out", str(runs / "accepted" / "sub"), "--baseline", str(runs / "accepted"),
                     "--fail-on-new"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--out" in err[0] and "the baseline run" in err[0], err
        assert not (runs / "accepted" / "sub").exists()


def test_write_baseline_refuses_a_name_too_long_and_a_file_that_is_not_a_baseline_before_the_run(runs, capsys):
    """`--write-baseline bl/<300 characters>.gz` ran the whole suite, wrote its directory and the folder bl/, then
    exited 2; `--write-baseline other-run/run.json` replaced another run's run.json with a baseline, exit 0."""
    other = runs / "accepted" / "run.json"
    before = other.read_bytes()
    for target, problem in ((runs / "bl" / ("a" * 300 + ".gz"), "a name longer than"),
                            (other, "a file that is not a baseline")):
        assert _run(runs, "MixedFaultAdapter", FIRST, "refused", "--write-baseline", str(target)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--write-baseline" in err[0] and problem in err[0], err
        assert not (runs / "refused").exists() and not (runs / "bl").exists()
    assert other.read_bytes() == before
    # a baseline file is replaced, as a refresh does
    assert _run(runs, "PlantedBugsAdapter", FIRST + LAST, "again", "--write-baseline",
                str(runs / "baseline" / "numpy.jsonl.gz")) == 0


def test_a_baseline_that_is_a_fifo_is_named_as_the_baseline(runs, capsys):
    """It said "fifo: not a regular file. Fix: regenerate the run": neither the option nor a fix that fits."""
    import os

    os.mkfifo(runs / "fifo")
    assert _run(runs, "MixedFaultAdapter", FIRST, "refused", "--baseline", str(runs / "fifo"), "--fail-on-new") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": --baseline: not a regular file. Fix: pass the --out directory" in err[0], err
