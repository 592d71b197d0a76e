"""Imports follow the data flow: model <- reference/cases <- adapters/compare <- runner <- cli.

A short AST check (instead of import-linter) that each layer imports only what it may,
and that no module imports a framework at module level.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = {"torch", "oneflow", "mindspore"}

# directory -> project modules it may import (prefixes of conformance.*)
ALLOWED = {
    "conformance/model.py": set(),
    "conformance/errors.py": set(),
    "conformance/specload.py": {"conformance.errors", "conformance.model", "conformance.formula"},
    "conformance/formula.py": {"conformance.errors"},
    "conformance/yamlload.py": {"conformance.errors"},
    "conformance/tolerance.py": {"conformance.model", "conformance.formula"},
    "reference": {"conformance.model", "conformance.specload", "conformance.tolerance", "conformance.formula",
                  "conformance.errors", "conformance.reference"},
    "cases": {"conformance.model", "conformance.specload", "conformance.yamlload", "conformance.errors",
              "conformance.cases",
              "conformance.reference.rounding"},
    "adapters": {"conformance.model", "conformance.errors", "conformance.adapters"},
    "conformance/compare.py": {"conformance.model", "conformance.errors"},
    "conformance/refcache.py": {"conformance.model"},
    "conformance/results.py": {"conformance.model", "conformance.errors"},
    "conformance/report": {"conformance.model", "conformance.results", "conformance.errors", "conformance.report"},
}


def _imports(path: Path, top_level_only: bool = False):
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _files(rel: str):
    path = ROOT / rel
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


@pytest.mark.parametrize("rel", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(rel):
    for path in _files(rel):
        for name in _imports(path):
            if name == "conformance" or name.startswith("conformance."):
                assert any(name == a or name.startswith(a + ".") or name.startswith(a) for a in ALLOWED[rel]) \
                    or (name == "conformance" and rel == "conformance/report"), \
                    f"{path.relative_to(ROOT)} imports {name}; allowed: {sorted(ALLOWED[rel])}"


def test_no_framework_is_imported_at_module_level():
    for path in sorted((ROOT / "conformance").rglob("*.py")) + sorted((ROOT / "adapters").rglob("*.py")) \
            + sorted((ROOT / "cases").rglob("*.py")) + sorted((ROOT / "reference").rglob("*.py")):
        top = {n.split(".")[0] for n in _imports(path, top_level_only=True)}
        assert not top & FRAMEWORKS, f"{path.relative_to(ROOT)} imports {top & FRAMEWORKS} at module level"
