"""No dead code in the package: vulture, at the confidence stated here, over everything the package ships and what
loads it (the docs hooks, tox's plugin, the scripts, the bench). A name that only a framework calls (a pytest or
mkdocs hook, a class the registry loads by name, a method picked by getattr) is listed with who calls it; the list
is checked too, so that it cannot keep a name alive after its definition is gone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

vulture = pytest.importorskip("vulture")

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("conformance", "reference", "cases", "adapters", "bench", "scripts", "docs/hooks.py", "toxfile.py")
# 60 is vulture's lowest: an unused function, class, method, property, variable or attribute, not only the unused
# imports and unreachable code it is sure of
MIN_CONFIDENCE = 60

# name -> who uses it, where vulture cannot see the call
CALLED_FROM_OUTSIDE = {
    # pytest's hooks and the plugin's collector and item (conformance/pytest_plugin.py, conformance/pytest_items.py)
    "pytest_addoption": "pytest", "pytest_configure": "pytest", "pytest_configure_node": "pytest-xdist",
    "pytest_collection_modifyitems": "pytest", "pytest_deselected": "pytest", "pytest_collection_finish": "pytest",
    "pytest_xdist_make_scheduler": "pytest-xdist", "pytest_sessionfinish": "pytest", "pytest_unconfigure": "pytest",
    "pytest_runtest_protocol": "pytest", "pytest_runtest_logreport": "pytest",
    "pytest_xdist_node_collection_finished": "pytest-xdist",
    "_split_scope": "pytest-xdist's LoadScopeScheduling", "collect": "pytest", "runtest": "pytest",
    "reportinfo": "pytest", "style": "pytest's repr_failure signature",
    # mkdocs's hooks (docs/hooks.py) and tox's (toxfile.py)
    "on_files": "mkdocs", "on_page_markdown": "mkdocs", "tox_add_option": "tox", "tox_add_core_config": "tox",
    "tox_after_run_commands": "tox",
    # the registry imports each framework's adapter by its class name (adapters/registry.py)
    "TorchAdapter": "registry", "OneFlowAdapter": "registry", "MindSporeAdapter": "registry",
    "PaddleAdapter": "registry", "MlxAdapter": "registry", "OptaxAdapter": "registry", "RTorchAdapter": "registry",
    "KerasAdapter": "registry",
    # Keras's adapter picks its gradient by the backend's name (getattr(self, f"_jit_gradient_{backend}"))
    "_jit_gradient_tensorflow": "getattr", "_jit_gradient_jax": "getattr", "_jit_gradient_torch": "getattr",
    "_gradient_tensorflow": "getattr", "_gradient_jax": "getattr",
    # attributes a framework or library reads: paddle's tensor, mpmath's context, PyYAML's constructor, argparse
    "stop_gradient": "paddle", "prec": "mpmath", "construct_mapping": "PyYAML", "option_string": "argparse",
    "namespace": "argparse", "signum": "signal", "frame": "signal",
    # a module's __getattr__ (PEP 562); torch's nn.Module calls forward
    "__getattr__": "Python", "forward": "torch",
    # public lists for adapter authors (docs/guide/api.md, ports.md)
    "REPRODUCER_HELPERS": "adapter authors", "PORT_HELPERS": "adapter authors",
    # the generated table's stated error bounds, written beside R3 (reference/tablegen.py)
    "R1": "reference/tablegen.py", "R2": "reference/tablegen.py",
}
# name -> the test that reads it: state a test needs and no code path of the package does (each is checked to be
# read there, so that the list cannot outlive the test)
READ_BY_TESTS = {
    "traces": "tests/adapters/test_jit_modes.py", "encode_text": "tests/engine/test_rsession.py",
    "from_json": "tests/engine/test_results.py", "SAFE_LOADER": "tests/engine/test_spec.py",
    "dropped": "tests/engine/test_refcache.py", "OUTCOMES": "tests/engine/test_verdicts.py",
    "R3": "tests/reference/test_logexp.py",
}


def _unused():
    scanner = vulture.Vulture(ignore_names=[*CALLED_FROM_OUTSIDE, *READ_BY_TESTS])
    scanner.scavenge([str(ROOT / p) for p in SCANNED])
    return scanner.get_unused_code(min_confidence=MIN_CONFIDENCE)


def test_no_dead_code():
    found = [f"{Path(item.filename).relative_to(ROOT)}:{item.first_lineno}: {item.message}" for item in _unused()]
    assert not found, "dead code (remove it, or list who calls it in CALLED_FROM_OUTSIDE):\n" + "\n".join(found)


def _defined_names() -> set[str]:
    """Every name the scanned files define: functions, classes, their parameters, and names and attributes bound."""
    defined = set()
    for path in (p for s in SCANNED for p in ((ROOT / s).rglob("*.py") if (ROOT / s).is_dir() else [ROOT / s])):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            if isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
    return defined


def test_every_name_said_to_be_called_from_outside_is_defined():
    assert sorted(set(CALLED_FROM_OUTSIDE) - _defined_names()) == []


def test_every_name_said_to_be_read_by_a_test_is():
    for name, test in READ_BY_TESTS.items():
        assert name in (ROOT / test).read_text(encoding="utf-8"), f"{test} no longer reads {name}"
