"""The spec is normative only, and what it no longer holds lives in docs/frameworks/, where citations find it.

Observations of particular framework releases belong on docs/frameworks/<framework>.md; a new top-level
section in the spec has to be added to NORMATIVE below, which makes the choice a deliberate one.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conformance.core.specload import default_spec_path, load_schema

ROOT = Path(__file__).resolve().parents[2]
# The spec's top-level sections: each states the canonical semantics or describes the document itself.
NORMATIVE = {"spec_version", "name", "title", "summary", "references", "signature", "pointwise", "reductions",
             "shapes", "dtypes", "errors", "warnings", "tolerance", "gradients", "dialects"}
PAGE = re.compile(r"docs/frameworks/[a-z_]+\.md")


def test_spec_top_level_is_normative_only():
    data = yaml.safe_load(default_spec_path().read_text(encoding="utf-8"))
    assert "known_differences" not in data, "observations of framework releases go to docs/frameworks/"
    assert set(data) == NORMATIVE
    # the schema cannot let one back in either: it allows exactly these keys
    schema = load_schema("kl_div.schema.json")
    assert set(schema["properties"]) == NORMATIVE and schema["additionalProperties"] is False


def test_cited_framework_pages_exist():
    files = [p for d in ("tests", "spec", "conformance") for p in sorted((ROOT / d).rglob("*"))
             if p.is_file() and p.suffix in (".py", ".yaml", ".json", ".md")] + [ROOT / "README.md"]
    cited = {(m, path.relative_to(ROOT)) for path in files for m in PAGE.findall(path.read_text(encoding="utf-8"))}
    assert cited, "nothing cites a framework page: the pattern or the scan is wrong"
    missing = sorted(f"{path} cites {page}" for page, path in cited if not (ROOT / page).is_file())
    assert not missing, missing
    assert (ROOT / "docs" / "frameworks" / "index.md").is_file()
