"""A run directory is data: a doctored or damaged one never crashes `report` or `repro`, never puts markup into
report.html, never points `repro --from` at a file outside it or makes it import a module; and hostile case ids
never give reproducer file names that collide, crash or leave repro/."""

from __future__ import annotations

import json
import shutil

import pytest

from conformance.cli import main

ADAPTERS = "tests.faults.adapters:"
CASES = """
- {id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}
- {id: the-fault, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}
"""


@pytest.fixture
def run_dir(tmp_path):
    """A finished run of the off-by-one adapter: pass rows and value divergences, with their details."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    out = tmp_path / "run"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress", "--no-repro"]) == 0
    return out


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


def test_repro_all_writes_one_file_per_hostile_id_inside_its_directory(tmp_path):
    """Ids over 255 bytes crashed the reproducer stage (ENAMETOOLONG); `col/x` and `col_x` were one file."""
    ids = ["fault-col/x", "fault-col_x", "fault-" + "l" * 300, "../../fault-escaped"]  # the adapter errs on "fault"
    cases = tmp_path / "cases.yaml"
    cases.write_text("".join(f"- {{id: '{i}', input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, "
                             f"dtype: float64}}\n" for i in ids))
    out = tmp_path / "out"
    assert main(["run", "--framework", ADAPTERS + "OffByOneAdapter", "--cases", str(cases), "--suite", "none",
                 "--out", str(out), "--no-progress"]) == 0
    # the run writes its one defect's reproducer (and snippet); `repro --all` one for every row
    assert len(list((out / "repro").iterdir())) == 2
    assert main(["repro", "--all", str(tmp_path / "all"), "--from", str(out), "--framework",
                 ADAPTERS + "OffByOneAdapter"]) == 0
    written = sorted((tmp_path / "all").glob("*.py"))
    assert len(written) == len(ids) and all(p.parent == tmp_path / "all" and p.is_file() for p in written)
    scripts = "\n".join(p.read_text() for p in written)
    assert all(f"case {i} on" in scripts for i in ids)  # each id has its own reproducer
    assert {p.parent for p in tmp_path.rglob("*escaped*")} <= {out / "repro", tmp_path / "all"}


@pytest.mark.parametrize("outside", ["../outside.yaml", "ABSOLUTE"])
def test_repro_from_reads_only_files_inside_the_run_directory(run_dir, tmp_path, capsys, outside):
    """run.json's case_files_kept was read as given: `../../../../etc/passwd` or any absolute path."""
    secret = tmp_path / "outside.yaml"
    secret.write_text("- {id: secret-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum}\n")
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["case_files_kept"] = [str(secret) if outside == "ABSOLUTE" else outside]
    (run_dir / "run.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["repro", "secret-case", "--framework", ADAPTERS + "OffByOneAdapter", "--from", str(run_dir)]) == 2
    assert "case_files_kept" in _one_line_error(capsys)
    assert "secret-case" not in capsys.readouterr().out


def test_repro_all_imports_only_a_registered_adapter_or_the_one_named(run_dir, tmp_path, capsys):
    """`repro --all --from DIR` imported whatever module run.json named as the framework."""
    capsys.readouterr()
    assert main(["repro", "--all", str(tmp_path / "scripts"), "--from", str(run_dir)]) == 2
    assert "not registered" in _one_line_error(capsys) and not (tmp_path / "scripts").exists()
    assert main(["repro", "--all", str(tmp_path / "scripts"), "--from", str(run_dir), "--framework",
                 ADAPTERS + "OffByOneAdapter"]) == 0
    assert len(list((tmp_path / "scripts").glob("*.py"))) == 1  # and the record of what it wrote


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]", b"\xff\xfe",
                                    {"seed": "abc"}, {"seed": -3}, {"case_files_kept": 5},
                                    {"case_files_kept": [5]}, {"case_files_kept": [""]},
                                    {"case_files_kept": ["a\u0000b"]}, {"case_files_kept": ["."]}])
def test_a_damaged_run_json_is_one_line(run_dir, capsys, damage):
    """`repro --from` with a damaged run.json crashed with a traceback."""
    if isinstance(damage, bytes):
        (run_dir / "run.json").write_bytes(damage)
    else:
        manifest = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**manifest, **damage}))
    capsys.readouterr()
    assert main(["repro", "the-fault", "--framework", ADAPTERS + "OffByOneAdapter", "--from", str(run_dir)]) == 2
    assert "run.json" in _one_line_error(capsys)


def test_repro_of_a_huge_generated_id_applies_the_memory_budget(capsys):
    """The values of a generated id were drawn whatever its shape (10^10 elements here)."""
    assert main(["repro", "fwd/sum/log_target=0/100000x100000/float32/softmax/s0", "--framework", "torch"]) == 2
    assert "memory budget" in _one_line_error(capsys)


EDITS = [("case_id", 5), ("case_id", None), ("case_digest", "not-hex"), ("seed", "x"), ("seed", -1), ("seed", 1.5),
         ("family", []), ("reduction", {}), ("log_target", "yes"), ("log_target", 0), ("framework", None),
         ("framework_version", 2), ("api", ["a"]), ("device", None), ("dtype", 7), ("part", "sideways"),
         ("part", None), ("verdict", "PASS"), ("verdict", None), ("verdict", 1), ("documented", "no"),
         ("documented", None), ("documented_by", None), ("documented_by", "profile"), ("documented_by", [1]),
         ("known_by", {}), ("known_by", [None]), ("max_abs_err", "big"), ("max_abs_err", [1]), ("max_abs_err", -1),
         ("bound", "small"), ("bound", {}), ("bound", -1e-6), ("cause", None), ("cause", 3), ("message", None),
         ("message", []), ("warnings", "w"), ("warnings", [1]), ("warnings", None), ("missing_warnings", {}),
         ("elapsed_s", "fast"), ("elapsed_s", -1), ("elapsed_s", None), ("source", None), ("spec_hash", 1),
         ("harness_version", None), ("python_version", []), ("numpy_version", 1), ("device_name", None)]


def test_report_refuses_every_one_field_edit_of_a_row_in_one_line(run_dir, tmp_path, capsys):
    """69 one-field edits of results.jsonl made `report` crash: each wrong type is now one line, exit 2,
    naming the file and the line."""
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    divergent = next(i for i, line in enumerate(lines, start=1) if json.loads(line)["verdict"] == "value")
    failures = []
    number = divergent  # a divergence: every report reads its fields
    for i, (field, value) in enumerate(EDITS):
        edited = tmp_path / f"edited-{i}"
        shutil.copytree(run_dir, edited)
        row = json.loads(lines[number - 1])
        row[field] = value
        (edited / "results.jsonl").write_text("\n".join([*lines[:number - 1], json.dumps(row), *lines[number:]]) + "\n")
        capsys.readouterr()
        try:
            code = main(["report", str(edited), "--out", str(tmp_path / f"report-{i}")])
        except Exception as exc:  # noqa: BLE001 - a crash is what this test looks for
            failures.append((field, value, f"crash {type(exc).__name__}: {exc}"))
            continue
        err = capsys.readouterr().err.strip()
        if code != 2 or "\n" in err or f"results.jsonl: line {number}:" not in err:
            failures.append((field, value, code, err[-300:]))
    assert not failures, failures[:5]


def test_a_value_divergence_edited_to_pass_is_refused(run_dir, tmp_path, capsys):
    """`report` accepted a row edited from value to pass although its own error exceeds its bound."""
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    flipped = [i for i, r in enumerate(rows) if r["verdict"] == "value"]
    assert flipped
    for i in flipped:
        rows[i]["verdict"] = "pass"
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "merged")]) == 2
    err = _one_line_error(capsys)
    assert f"results.jsonl: line {flipped[0] + 1}: a pass whose error" in err


def test_a_doctored_detail_never_reaches_report_html(run_dir, tmp_path, capsys):
    """report.html printed an array's shape from details.jsonl as it stood: a `<script>` in it ran."""
    details = [json.loads(line) for line in (run_dir / "details.jsonl").read_text().splitlines()]
    assert details
    for d in details:
        d["input"]["shape"] = ["<script>alert(1)</script>"]
    (run_dir / "details.jsonl").write_text("".join(json.dumps(d) + "\n" for d in details))
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "merged")]) == 2
    assert "details.jsonl: line 1:" in _one_line_error(capsys)
    assert not (tmp_path / "merged" / "report.html").exists()


def test_report_html_escapes_a_shape_it_is_given(run_dir):
    """Escaped where it is printed too, whatever reads the details."""
    from conformance.core.details import iter_details
    from conformance.core.results import iter_results
    from conformance.report.html import render_html
    from conformance.report.tally import Tally

    rows = list(iter_results(run_dir))
    details = list(iter_details(run_dir))
    for d in details:
        d["input"]["shape"] = ["<script>alert(1)</script>"]
    page = render_html(Tally(rows), [{"framework": rows[0].framework}], details)
    assert page.count("<script>") == 1 and "alert(1)</script>" not in page  # the page's own script only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


MANIFEST_EDITS = [("status", 5), ("framework", ["torch"]), ("framework", None), ("seed", "x"), ("reason", 3),
                  ("cases", "many"), ("shard", 2), ("spec_hash", None), ("counts", {"pass": "1"})]


@pytest.mark.parametrize("field, value", MANIFEST_EDITS)
def test_report_refuses_a_doctored_manifest_in_one_line(run_dir, tmp_path, capsys, field, value):
    """run.json and a merge's runs.json are read back type-checked too (a status that is not text crashed)."""
    merged = tmp_path / "merged"
    assert main(["report", str(run_dir), "--out", str(merged)]) == 0
    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, field: value}))
    runs = json.loads((merged / "runs.json").read_text())
    runs["runs"] = [{**m, field: value} for m in runs["runs"]]
    (merged / "runs.json").write_text(json.dumps(runs))
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "again")]) == 2
    assert f"run.json: {field}: field {field!r} holds" in _one_line_error(capsys)
    assert main(["report", str(merged), "--out", str(tmp_path / "again2")]) == 2
    assert f"runs.json: run 1, {field}: field {field!r} holds" in _one_line_error(capsys)
