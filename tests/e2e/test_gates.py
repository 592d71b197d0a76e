"""The known-findings example of docs/guide/gates.md on the real torch: a subset of the suite leaves its entries
"not exercised here", never stale (issue 26: `--only 'fwd/batchmean/*/float32/*'` exited 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main

GATES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "gates.md"


def test_the_readme_known_file_on_a_subset_is_not_stale(framework, tmp_path, capsys):
    if framework != "torch":
        pytest.skip("the example of docs/guide/gates.md names torch")
    text = GATES_PAGE.read_text()
    block = text[text.index("For example, `ci/known.yaml`:"):]
    block = block[block.index("```yaml\n") + len("```yaml\n"):]
    known = tmp_path / "known.yaml"
    known.write_text(block[:block.index("```")])
    code = main(["run", "--framework", "torch", "--only", "fwd/batchmean/*/float32/*", "--known", str(known),
                 "--out", str(tmp_path / "out"), "--no-progress", "--no-repro"])
    err = capsys.readouterr().err
    assert code == 0 and "stale:" not in err and "not exercised here" in err, err
