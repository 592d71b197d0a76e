"""No file lost, no run mixed: --force removes only what a run recorded writing, one command per --out, a
failed run says so in run.json, the worker dies with its parent, and --resume refuses what would mix rows.
Runs use the stand-in adapters of tests/faults/adapters.py; processes are real."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core.details import iter_details
from conformance.core.results import iter_results

CASES = """
- {id: one, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
- {id: two, input: [[-0.5, -1.5]], target: [[0.5, 0.5]], reduction: none, dtype: float64}
"""
FAULT = "- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}\n"
ADAPTERS = "tests.faults.adapters:"
NUMPY = ADAPTERS + "NumpyAdapter"


def child_env() -> dict[str, str]:
    """The environment of a child run, read when the test runs: the session's cache folder and cache key
    (tests/conftest.py) are set by then, so no child writes into the user's own cache or key file."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
BOUND_S = 120  # what a poll waits at most for a state it expects: a bound on a hang, never a timing


def _cases(tmp_path, text=CASES, name="cases.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(out, cases, *extra, framework=NUMPY):
    return main(["run", "--framework", framework, "--suite", "none", "--cases", str(cases), "--out", str(out),
                 "--no-progress", *extra])


def _tree(path):
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def _one_line(err):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _poll(condition, what):
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def _cli(*args, **popen):
    return subprocess.Popen([sys.executable, "-m", "conformance", *args], **popen)


def _gone(pid):
    """The process has ended (a zombie nobody reaps has ended too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --force removes only what a run recorded


def test_force_refuses_a_directory_the_harness_did_not_write(tmp_path, capsys, monkeypatch):
    """`run --out . --force` inside the repository used to delete its `cases/` package and any report.md."""
    repo = tmp_path / "repo"
    (repo / "cases").mkdir(parents=True)
    (repo / "cases" / "generate.py").write_text("# the package's own code\n")
    (repo / "report.md").write_text("my notes\n")
    before = _tree(repo)
    cases = _cases(tmp_path)
    monkeypatch.chdir(repo)
    assert _run(".", cases, "--force") == 2
    line = _one_line(capsys.readouterr().err)
    assert "--force" in line and "no record" in line and "Fix:" in line
    assert _tree(repo) == before


def test_force_keeps_its_own_input_inside_the_output_directory(tmp_path):
    """`--cases OUT/cases/x.yaml --out OUT --force` used to delete its own input, then crash."""
    out = tmp_path / "out"
    assert _run(out, _cases(tmp_path)) == 0
    mine = _cases(out / "cases", CASES.replace("one", "three"), name="x.yaml")
    assert _run(out, mine, "--force") == 0
    assert mine.read_text() == CASES.replace("one", "three")
    assert sorted(r.case_id for r in iter_results(out)) == ["three", "two"]
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["0-x.yaml", "x.yaml"]


@pytest.mark.parametrize("option", ["--cases", "--profiles"])
def test_force_refuses_to_remove_an_input_of_the_same_command(tmp_path, capsys, option):
    out = tmp_path / "out"
    assert _run(out, _cases(tmp_path)) == 0
    before = _tree(out)
    if option == "--cases":  # the copy the earlier run kept: a file that run recorded writing
        code = _run(out, out / "cases" / "0-cases.yaml", "--force")
    else:  # a directory that holds files the earlier run wrote
        code = _run(out, _cases(tmp_path), "--force", "--profiles", str(out))
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert "--force would remove" in line and option in line
    assert _tree(out) == before


def test_run_json_records_what_the_run_wrote(tmp_path):
    out = tmp_path / "out"
    assert _run(out, _cases(tmp_path, CASES + FAULT), framework=ADAPTERS + "OffByOneAdapter") == 0
    written = json.loads((out / "run.json").read_text())["written"]
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files <= set(written), files - set(written)  # every file there is recorded...
    assert {"cases/", "repro/"} <= set(written) and any(w.startswith("repro/") and w != "repro/" for w in written)


def test_report_force_removes_only_what_a_merge_recorded(tmp_path, capsys):
    run = tmp_path / "run"
    assert _run(run, _cases(tmp_path)) == 0
    merged = tmp_path / "merged"
    assert main(["report", str(run), "--out", str(merged)]) == 0
    assert "results.jsonl" in json.loads((merged / "runs.json").read_text())["written"]
    (merged / "notes.txt").write_text("mine")
    assert main(["report", str(run), "--out", str(merged), "--force"]) == 0
    assert (merged / "notes.txt").read_text() == "mine" and (merged / "report.md").is_file()
    capsys.readouterr()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "report.md").write_text("mine")
    assert main(["report", str(run), "--out", str(plain), "--force"]) == 2
    assert "no record" in _one_line(capsys.readouterr().err)
    assert [p.name for p in plain.iterdir()] == ["report.md"]


# one command per --out


def test_a_second_run_into_a_directory_in_use_is_refused(tmp_path):
    """Two runs started half a second apart used to mix two seeds, duplicate rows and a line of NUL bytes."""
    out = tmp_path / "out"
    cases = _cases(tmp_path, CASES + FAULT)
    first = _cli("run", "--framework", ADAPTERS + "HangAdapter", "--suite", "none", "--cases", str(cases),
                 "--out", str(out), "--no-progress", "--timeout-s", "3600", env=child_env(), start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _poll(lambda: (out / "results.jsonl").is_file() and (out / "results.jsonl").read_bytes().count(b"\n") >= 2,
              "the first run's rows")  # it holds the lock now, and hangs on the fault case
        rows = (out / "results.jsonl").read_bytes()
        for flags in (["--force"], ["--resume"], ["--force", "--seed", "7"]):
            second = subprocess.run([sys.executable, "-m", "conformance", "run", "--framework", NUMPY, "--suite",
                                     "none", "--cases", str(cases), "--out", str(out), "--no-progress", *flags],
                                    env=child_env(), capture_output=True, text=True, timeout=BOUND_S)
            assert second.returncode == 2, second.stderr
            assert "another kl-conformance command is writing into this directory" in _one_line(second.stderr)
        assert (out / "results.jsonl").read_bytes() == rows and first.poll() is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


# a failed run says so


def test_a_full_disk_is_one_line_and_resume_repairs_the_half_written_lines(tmp_path):
    """A full disk used to be a traceback; --resume then kept a half-written last line of details.jsonl and
    exited 2 with no report. Runs in a small tmpfs where one may be mounted, else is skipped."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        lines = [f"- {{id: fault-{i:03d}, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.5, 0.25]], "
                 f"reduction: none, dtype: float64}}" for i in range(400)]
        cases = _cases(tmp_path, "\n".join(lines) + "\n")
        out = disk / "out"
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (8 * 1024 * 1024 - 96 * 1024))  # leaves room for some rows, not all
        args = ["run", "--framework", ADAPTERS + "OffByOneAdapter", "--suite", "none", "--cases", str(cases),
                "--out", str(out), "--no-progress", "--no-repro", "--no-cache"]
        done = subprocess.run([sys.executable, "-m", "conformance", *args], env=child_env(), capture_output=True, text=True,
                              timeout=BOUND_S)
        assert done.returncode == 3, done.stderr
        assert "no space left on the device" in _one_line(done.stderr) and "--resume" in done.stderr
        kept = list(iter_results(out, complete_lines_only=True))
        assert 0 < len(kept) < 400
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["status"] == "failed" and "no space left" in manifest["reason"]

        filler.unlink()
        done = subprocess.run([sys.executable, "-m", "conformance", *args, "--resume"], env=child_env(), capture_output=True,
                              text=True, timeout=BOUND_S)
        assert done.returncode == 0, done.stderr
        rows = list(iter_results(out))
        assert sorted(r.case_id for r in rows) == sorted(f"fault-{i:03d}" for i in range(400))
        details = list(iter_details(out))
        assert sorted(d["case_id"] for d in details) == sorted(r.case_id for r in rows)
        assert json.loads((out / "run.json").read_text())["status"] == "complete" and (out / "report.md").is_file()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_writer_that_finds_the_disk_full_is_one_line_and_resume_repairs(tmp_path, capsys, monkeypatch):
    """The same without a tmpfs (where none may be mounted): a write fails with ENOSPC after a case's rows
    and half a line of each file are out."""
    from conformance.core import results

    real = results.ResultsWriter.flush
    flushed = []

    def full_disk_on_the_second_case(self):
        flushed.append(self)
        if len(flushed) == 2:
            self._file.write('{"case_id": "cut sh')
            self._details.write('{"case_id": "cu')
            real(self)
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real(self)
    monkeypatch.setattr(results.ResultsWriter, "flush", full_disk_on_the_second_case)
    out = tmp_path / "out"
    cases = _cases(tmp_path, FAULT + CASES)
    adapter = ADAPTERS + "OffByOneAdapter"
    assert _run(out, cases, "--no-repro", framework=adapter) == 3
    assert "no space left on the device" in _one_line(capsys.readouterr().err)
    assert [r.case_id for r in iter_results(out, complete_lines_only=True)] == ["the-fault", "one"]
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "failed" and "no space left" in manifest["reason"]
    monkeypatch.setattr(results.ResultsWriter, "flush", real)
    assert _run(out, cases, "--no-repro", "--resume", framework=adapter) == 0
    assert [r.case_id for r in iter_results(out)] == ["the-fault", "one", "two"]
    assert [d["case_id"] for d in iter_details(out)] == ["the-fault"]


def test_resume_repairs_a_half_written_last_line_of_details(tmp_path):
    """Every file a resumed run appends to is cut back to its last whole line (details.jsonl was not)."""
    out = tmp_path / "out"
    cases = _cases(tmp_path, CASES + FAULT)
    assert _run(out, cases, "--no-repro", framework=ADAPTERS + "OffByOneAdapter") == 0
    results = (out / "results.jsonl").read_bytes().splitlines(True)
    fault_at = next(i for i, line in enumerate(results) if b"the-fault" in line)
    (out / "results.jsonl").write_bytes(b"".join(results[:fault_at]))  # the fault's row never written...
    details = (out / "details.jsonl").read_bytes()
    (out / "details.jsonl").write_bytes(details[:len(details) // 2])  # ...its detail cut halfway by a full disk
    assert _run(out, cases, "--no-repro", "--resume", framework=ADAPTERS + "OffByOneAdapter") == 0
    assert [d["case_id"] for d in iter_details(out)] == ["the-fault"]
    assert sorted(r.case_id for r in iter_results(out)) == ["one", "the-fault", "two"]


def test_running_out_of_memory_is_one_line_and_run_json_never_stays_running(tmp_path):
    """Running out of memory while computing expectations (a case inside the default budget) used to be a
    traceback with run.json at `running`. The run's address space is limited, so that the reference cannot
    allocate its arrays for the large case."""
    resource = pytest.importorskip("resource")
    large = "fwd/sum(reduce=0)/log_target=0/3000x4000/float64/identical/s0"
    out = tmp_path / "out"

    def limit():  # the harness's own needs fit; the large case's reference (gigabytes) does not
        resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))
    # the budget is raised past the case's estimate, so that the reference, not the budget, meets the limit
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--framework", NUMPY, "--only", large,
                           "--out", str(out), "--no-progress", "--no-cache", "--memory-budget-mb", "1000000"],
                          env={**child_env(), "OPENBLAS_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=BOUND_S, preexec_fn=limit)
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 3:  # the harness itself ran out: one line, and run.json (if written) says so
        assert "out of memory" in _one_line(done.stderr)
        if (out / "run.json").exists():
            manifest = json.loads((out / "run.json").read_text())
            assert manifest["status"] == "failed" and "out of memory" in manifest["reason"]
    else:  # the reference ran out computing the expectation: the case is refused with a row, the run completes
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "run.json").read_text())["status"] == "complete"
        (row,) = [r for r in iter_results(out) if r.part == "forward"]
        assert row.verdict.value == "unsupported" and "out of memory" in row.message


# the worker dies with its parent


def _hanging_run(tmp_path, *extra):
    """A run whose worker (with a helper process, an R stand-in) hangs on its fault case, once its first rows
    are written; returns the process, the out directory, the worker's and the helper's pids."""
    out = tmp_path / "out"
    pids = tmp_path / "pids"
    (tmp_path / "tmp").mkdir()
    cases = _cases(tmp_path, CASES + FAULT)
    proc = _cli("run", "--framework", ADAPTERS + "HangWithHelperAdapter", "--suite", "none", "--cases", str(cases),
                "--out", str(out), "--no-progress", "--timeout-s", "3600", *extra,
                env={**child_env(), "KL_TEST_PIDS": str(pids), "TMPDIR": str(tmp_path / "tmp")}, start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _poll(lambda: pids.is_file() and pids.read_text().endswith("\n") and (out / "results.jsonl").is_file()
          and (out / "results.jsonl").read_bytes().count(b"\n") >= 2, "the run's first rows")
    worker, helper = map(int, pids.read_text().split())
    return proc, out, worker, helper


def test_sigkill_of_the_parent_ends_its_worker_and_the_workers_helpers(tmp_path):
    """SIGKILL to the parent while a worker hangs used to leave the worker running forever."""
    proc, out, worker, helper = _hanging_run(tmp_path)
    try:
        proc.kill()  # the parent alone, not its process group
        proc.wait()
        _poll(lambda: _gone(worker) and _gone(helper), "the worker and its helper to end")
    finally:
        _kill_all([worker, helper])
        proc.stderr.close()


def test_a_scratch_folder_a_sigkill_left_is_removed_by_the_next_run(tmp_path):
    """Nothing runs in a process killed by SIGKILL, so its worker's scratch folder (the worker's log, R's
    TMPDIR) stays behind; the next run of the harness removes it, and leaves a live run's folder alone."""
    proc, out, worker, helper = _hanging_run(tmp_path)
    try:
        proc.kill()
        proc.wait()
        _poll(lambda: _gone(worker) and _gone(helper), "the worker and its helper to end")
    finally:
        _kill_all([worker, helper])
        proc.stderr.close()
    left = [p.name for p in (tmp_path / "tmp").iterdir()]
    assert any(name.startswith("kl-scratch-") for name in left), left  # what the SIGKILL left
    live = tmp_path / "tmp" / "kl-scratch-live"
    live.mkdir()
    (live / ".kl-owner").write_text(f"{os.getpid()} {(Path('/proc') / str(os.getpid()) / 'stat').read_text().rsplit(')', 1)[1].split()[19]}\n")
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--framework", NUMPY, "--suite", "none",
                           "--cases", str(_cases(tmp_path)), "--out", str(tmp_path / "again"), "--no-progress"],
                          env={**child_env(), "TMPDIR": str(tmp_path / "tmp")}, capture_output=True, text=True,
                          timeout=BOUND_S)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == ["kl-scratch-live"]


def test_sigterm_records_the_run_as_interrupted_and_leaves_nothing_behind(tmp_path):
    proc, out, worker, helper = _hanging_run(tmp_path)
    try:
        proc.terminate()
        _, err = proc.communicate(timeout=BOUND_S)
        assert proc.returncode == 143 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1].startswith("kl-conformance: terminated")
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["reason"]
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # junit's parts, the lock
        assert list((tmp_path / "tmp").iterdir()) == []  # the worker's log and scratch directory
        _poll(lambda: _gone(worker) and _gone(helper), "the worker and its helper to end")
    finally:
        _kill_all([worker, helper])


# --resume refuses what would mix rows


def test_resume_refuses_another_profile_set(tmp_path, capsys):
    """--resume with another --profiles directory used to mix rows with other documented flags."""
    from conformance.judge.profiles import default_profiles_dir

    out = tmp_path / "out"
    cases = _cases(tmp_path)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for path in default_profiles_dir().glob("*.yaml"):
        (profiles / path.name).write_bytes(path.read_bytes())
    assert _run(out, cases, "--profiles", str(profiles)) == 0
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text().splitlines(True)[0])  # interrupted
    before = _tree(out)
    capsys.readouterr()
    changed = profiles / "torch.yaml"
    changed.write_text(changed.read_text() + "\n# edited\n")
    assert _run(out, cases, "--resume", "--profiles", str(profiles)) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--profiles" in line and "another set of deviation profiles" in line
    assert _tree(out) == before


def test_resume_refuses_another_framework_version(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    cases = _cases(tmp_path)
    monkeypatch.setenv("KL_TEST_VERSION", "1.0")
    assert _run(out, cases, framework=ADAPTERS + "VersionedAdapter") == 0
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text().splitlines(True)[0])  # interrupted
    before = _tree(out)
    capsys.readouterr()
    monkeypatch.setenv("KL_TEST_VERSION", "2.0")
    assert _run(out, cases, "--resume", framework=ADAPTERS + "VersionedAdapter") == 2
    line = _one_line(capsys.readouterr().err)
    assert "1.0" in line and "2.0" in line and "--resume" in line
    assert _tree(out) == before
    monkeypatch.setenv("KL_TEST_VERSION", "1.0")
    assert _run(out, cases, "--resume", framework=ADAPTERS + "VersionedAdapter") == 0
    assert len(list(iter_results(out))) == 2


# --only ID twice


def test_an_id_given_twice_to_only_runs_once_and_reports(tmp_path):
    """`--only ID --only ID` used to run the case twice, and `report` then refused the run's own directory."""
    out = tmp_path / "out"
    case_id = 'fwd/sum(size_average=1)/log_target=0/7/float64/softmax/s0'  # a generated case, rebuilt from its id
    assert main(["run", "--framework", NUMPY, "--only", case_id, "--only", case_id, "--out", str(out),
                 "--no-progress"]) == 0
    keys = [(r.case_id, r.api, r.device, r.part) for r in iter_results(out)]
    assert {k[0] for k in keys} == {case_id} and len(keys) == len(set(keys))
    assert main(["report", str(out), "--out", str(tmp_path / "merged")]) == 0
