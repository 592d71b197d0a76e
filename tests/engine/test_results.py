"""The run directory's files: atomic writes honour the umask, rows carry their format version."""

from __future__ import annotations

import os
import stat

import pytest

from conformance.core.atomicfile import write_atomic, write_lines_atomic


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_files_honour_the_umask(tmp_path, umask, mode):
    """Files written through mkstemp came out 0600 whatever the umask, unlike the rest."""
    saved = os.umask(umask)
    try:
        write_atomic(tmp_path / "report.md", "text\n")
        write_lines_atomic(tmp_path / "results.jsonl", iter(["a\n", "b\n"]))
        (tmp_path / "plain.txt").write_text("plain")
    finally:
        os.umask(saved)
    for name in ("report.md", "results.jsonl", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_file_cut_short_by_an_error_is_never_seen(tmp_path):
    """An error while the rows are written (a merge meeting a damaged run) leaves the old file as it was,
    and no temporary file beside it."""
    from conformance.core.atomicfile import AtomicLines

    (tmp_path / "results.jsonl").write_text("old\n")
    with pytest.raises(RuntimeError):
        with AtomicLines(tmp_path / "results.jsonl") as f:
            f.write("new first row\n")
            raise RuntimeError("a damaged run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]
    assert (tmp_path / "results.jsonl").read_text() == "old\n"
    with AtomicLines(tmp_path / "results.jsonl") as f:
        f.write("new\n")
    assert (tmp_path / "results.jsonl").read_text() == "new\n" and len(list(tmp_path.iterdir())) == 1


import json  # noqa: E402

from conformance.core.details import iter_details  # noqa: E402
from conformance.core.errors import ResultsError  # noqa: E402
from conformance.core.manifest import read_manifest, write_manifest  # noqa: E402
from conformance.core.model import FORMAT_VERSION  # noqa: E402
from conformance.core.results import ResultsWriter, iter_results  # noqa: E402
from tests.helpers import make_result  # noqa: E402


def test_rows_carry_format_version_seed_and_digest(tmp_path):
    row = make_result(seed=7, case_digest="ab" * 12, known_by=("torch-onehot",), verdict="value")
    with ResultsWriter(tmp_path) as writer:
        writer.write(row)
    (line,) = (tmp_path / "results.jsonl").read_text().splitlines()
    parsed = json.loads(line)
    assert (parsed["format_version"], parsed["seed"], parsed["case_digest"], parsed["known_by"]) == \
        (FORMAT_VERSION, 7, "ab" * 12, ["torch-onehot"])
    assert list(iter_results(tmp_path)) == [row]


@pytest.mark.parametrize("version", [None, 1, 2, 3, 4, 5, 6, 8])  # 6: the rows of 0.4.x
def test_rows_of_another_format_version_are_refused(tmp_path, version):
    row = json.loads(make_result().to_json())
    if version is None:
        del row["format_version"]
    else:
        row["format_version"] = version
    (tmp_path / "results.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ResultsError) as info:
        list(iter_results(tmp_path))
    message = str(info.value)
    assert f"results.jsonl: line 1: written in format version {version or 1}" in message
    assert "Fix: re-baseline: run the frameworks again" in message


def test_manifest_format_version(tmp_path):
    write_manifest(tmp_path, {"framework": "torch"})
    assert read_manifest(tmp_path)["format_version"] == FORMAT_VERSION
    (tmp_path / "run.json").write_text(json.dumps({"framework": "torch"}))
    with pytest.raises(ResultsError, match="run.json: written in format version 1"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("damage", ["{not json\n", "[1, 2]\n", '{"case_id": "x"}\n', b"\xff\xfe\n"])
def test_damaged_details_name_file_and_line(tmp_path, damage):
    good = json.dumps({"case_id": "a", "framework": "torch", "api": "f", "device": "cpu", "mode": "eager", "part": "forward",
                       "params": {}, "dtype": "float32", "layout": "contiguous"})
    path = tmp_path / "details.jsonl"
    path.write_bytes(good.encode() + b"\n" + (damage if isinstance(damage, bytes) else damage.encode()))
    with pytest.raises(ResultsError) as info:
        list(iter_details(tmp_path))
    assert f"{path}: line 2:" in str(info.value) and "Fix:" in str(info.value)


def test_a_results_file_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "results.jsonl").write_bytes(make_result().to_json().encode() + b"\n\xff\n")
    with pytest.raises(ResultsError, match="line 2: unreadable row"):
        list(iter_results(tmp_path))


def test_a_row_lists_every_field_in_the_formats_order():
    """to_json writes the dataclass's fields as they stand, so their order must be RESULT_FIELDS' (the
    public format's); non-finite numbers are written as text, tuples as lists."""
    from dataclasses import fields

    from conformance.core.model import RESULT_FIELDS, Result

    assert tuple(f.name for f in fields(Result)) == RESULT_FIELDS
    row = make_result(max_abs_err=float("inf"), bound=float("-inf"), warnings=("w",), documented_by=("d",))
    parsed = json.loads(row.to_json())
    assert list(parsed) == ["format_version", *RESULT_FIELDS]
    assert (parsed["max_abs_err"], parsed["bound"], parsed["warnings"], parsed["documented_by"], parsed["verdict"]) \
        == ("inf", "-inf", ["w"], ["d"], row.verdict.value)
    assert Result.from_json(row.to_json()) == row


def test_a_detail_line_is_the_json_of_its_key_and_fields(tmp_path):
    """A divergence's detail comes as groups of fields encoded once (a case's arrays, an expectation, an
    observed value); its line must be the JSON object of the row's key, its release and those fields, in order."""
    from conformance.core.details import DETAIL_KEYS, encoded_fields

    row = make_result(verdict="value")
    fields = ({"params": {"reduction": "sum"}, "dtype": "float32", "layout": "contiguous",
               "input": {"shape": [2], "values": ["nan", 1.5], "truncated": False}},
              {"expected": None, "expected_error": "ValueError"},
              {"got": {"shape": [], "values": [2.0], "truncated": False}, "raised": None})
    with ResultsWriter(tmp_path) as writer:
        writer.write(row, tuple(encoded_fields(**group) for group in fields))
    (line,) = (tmp_path / "details.jsonl").read_text().splitlines()
    merged = {k: getattr(row, k) for k in DETAIL_KEYS}
    merged["framework_version"] = row.framework_version
    for group in fields:
        merged.update(group)
    assert line == json.dumps(merged, allow_nan=False)
    assert list(iter_details(tmp_path)) == [merged]


def test_published_schemas_name_the_format_version_written():
    """The schemas that users validate rows and summaries with move with FORMAT_VERSION (checked here, where no
    framework is needed, and not only by the end-to-end runs)."""
    from conformance.core.specload import load_schema

    for name in ("results.schema.json", "summary.schema.json"):
        assert load_schema(name)["properties"]["format_version"]["const"] == FORMAT_VERSION, name
