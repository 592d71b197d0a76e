"""Reproducers find their cases in linear time: each case file of a run is read once, however many ids."""

from __future__ import annotations

import json

import conformance.repro.source as case_source
from conformance.core.model import FORMAT_VERSION


def test_each_case_file_is_read_once_for_every_id(tmp_path, monkeypatch):
    # reproducers used to parse every case file again for every case id: a 100-case file with
    # 600 divergences took about 10 minutes (issue 12)
    (tmp_path / "cases").mkdir()
    cases = (tmp_path / "cases" / "0-cases.yaml").resolve()
    cases.write_text("".join(f"- id: user-{i}\n  input: [-1.0, -2.0]\n  target: [0.5, 0.5]\n" for i in range(40)))
    later = (tmp_path / "cases" / "1-later.yaml").resolve()
    later.write_text("- id: user-0\n  input: [-9.0]\n  target: [0.25]\n")
    (tmp_path / "run.json").write_text(json.dumps({"seed": 7, "format_version": FORMAT_VERSION,
                                                   "case_files_kept": ["cases/0-cases.yaml", "cases/1-later.yaml"]}))
    reads = []
    load = case_source.load_case_file
    monkeypatch.setattr(case_source, "load_case_file", lambda path: reads.append(path) or load(path))
    source = case_source.CaseSource(str(tmp_path), None, None)
    found = [source.get(f"user-{i}") for i in range(40) for _ in range(3)]
    assert reads == [str(cases)]  # the later file is never needed, and the first is read once
    assert [c.id for c in found[::3]] == [f"user-{i}" for i in range(40)]
    assert found[0].input.tolist() == [-1.0, -2.0]  # the first file that has an id wins
    generated = source.get("fwd/sum/log_target=0/4x6/float32/softmax/s0")  # not in a file: generated, run's seed
    assert reads == [str(cases), str(later)] and generated.input.shape == (4, 6)
