"""Imports follow the data flow, wing by wing: core <- reference, cases, adapters <- judge <- run <- commands,
and reports read the core alone; and no import circle, inside a wing or across, deferred imports included.

An AST check (instead of import-linter) over every module of the package, by exact module name: each
module belongs to one wing, and each wing imports only the wings below it. No module imports a framework
at module level; the frameworks are what the registry's adapters import when they load.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from conformance.adapters.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
# Where each folder's modules are installed (pyproject.toml's package-dir): the users asked for top-level
# reference/, cases/ and adapters/ folders, installed inside the package as conformance.<folder>.
FOLDERS = {"conformance": "conformance", "reference": "conformance.reference", "cases": "conformance.cases",
           "adapters": "conformance.adapters", "spec": "conformance.spec"}
COMMANDS = {"conformance.cli", "conformance.arguments", "conformance.options", "conformance.runcommand",
            "conformance.entry", "conformance.parser", "conformance.__main__", "conformance.api", "conformance.apiargs",
            "conformance.pytest_plugin", "conformance.pytest_items", "conformance.pytest_process",
            "conformance.pytest_runs", "conformance.version",
            # the reproducers and the self-test: a package each, on the commands' floor
            "conformance.repro", "conformance.repro.source", "conformance.repro.minimise", "conformance.repro.scripts",
            "conformance.selftest", "conformance.selftest.fault", "conformance.selftest.variants",
            "conformance.selftest.planter", "conformance.selftest.replay", "conformance.selftest.gates",
            "conformance.selftest.count", "conformance.selftest.command"}
# wing -> the wings its modules may import (its own included)
MAY_IMPORT = {
    "core": {"core"},
    "reference": {"core", "reference"},
    "cases": {"core", "cases"},
    "adapters": {"core", "adapters"},
    "judge": {"core", "reference", "judge"},
    "run": {"core", "reference", "cases", "adapters", "judge", "run"},
    "report": {"core", "report"},
    "commands": {"core", "reference", "cases", "adapters", "judge", "run", "report", "commands"},
}


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by its exact dotted name, with its source file."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found[name] = path
    return found


MODULES = _modules()


def wing(module: str) -> str | None:
    """The wing `module` belongs to, or None for a module no wing holds (which fails a test)."""
    if module in COMMANDS:
        return "commands"
    if module in ("conformance", "conformance.spec"):  # the version; the spec's files
        return "core"
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "conformance" and parts[1] in MAY_IMPORT and parts[1] != "commands":
        return parts[1]
    return None


def _imports(source: str, top_level_only: bool = False):
    """(imported name, line) for every absolute import; `from P import m` yields P.m where that is a module."""
    tree = ast.parse(source)
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
            yield from ((name, node.lineno) for name in submodules or [node.module])


def violations(module: str, source: str) -> list[str]:
    """What `module`'s imports break: an unknown project module, or an import against the flow."""
    own = wing(module)
    found = []
    for name, line in _imports(source):
        if name != "conformance" and not name.startswith("conformance."):
            continue
        if name not in MODULES:
            found.append(f"{module}:{line} imports {name}, which is no module of the package")
        elif wing(name) not in MAY_IMPORT[own]:
            found.append(f"{module}:{line} ({own}) imports {name} ({wing(name)}); {own} may import "
                         f"{sorted(MAY_IMPORT[own])}")
    return found


def test_every_module_belongs_to_a_wing():
    assert len(MODULES) > 60  # the walk found the package
    unplaced = sorted(m for m in MODULES if wing(m) is None)
    assert not unplaced, f"modules in no wing: {unplaced}; put each in core/, judge/, run/ or report/, " \
                         f"or name it in COMMANDS"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_only_the_wings_below(module):
    __tracebackhide__ = True
    found = violations(module, MODULES[module].read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module, planted", [
    ("conformance.core.model", "from conformance.judge.compare import classify"),
    ("conformance.reference.forward", "from conformance.judge import compare"),
    ("conformance.cases.generate", "import conformance.reference.forward"),
    ("conformance.adapters.torch", "from conformance.run.task import Task"),
    ("conformance.judge.explain", "from conformance.run.runner import RunOptions"),
    ("conformance.run.runner", "from conformance.report.writer import write_report"),
    ("conformance.report.html", "from conformance.judge.casejudge import CaseJudge"),
    ("conformance.report.gate", "from conformance.cases.ids import parse_id"),
    ("conformance.core.model", "import conformance.referencefoo"),  # a name that only shares a prefix
])
def test_a_planted_back_edge_is_found(module, planted):
    source = MODULES[module].read_text(encoding="utf-8")
    assert not violations(module, source)
    assert violations(module, source + "\n\ndef _planted():\n    " + planted + "\n")


def circles(sources: dict[str, str]) -> list[list[str]]:
    """Every import circle among `sources` (module -> its text): the strongly connected components of the
    import graph with more than one module, or one module importing itself. Deferred imports count: a
    circle broken only by importing late is still a circle."""
    edges = {module: sorted({name for name, _ in _imports(text) if name in sources})
             for module, text in sources.items()}
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative: a deep chain needs no deep recursion
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            module, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter[0]
                    counter[0] += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(edges[successor])))
                    advanced = True
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in edges[module]:
                    found.append(sorted(component))

    for module in sorted(sources):
        if module not in index:
            visit(module)
    return found


def _sources() -> dict[str, str]:
    return {module: path.read_text(encoding="utf-8") for module, path in MODULES.items()}


def test_no_module_is_part_of_an_import_circle():
    found = circles(_sources())
    assert not found, "import circles (break each by moving what both sides need into a module of its own): " + \
        "; ".join(" <-> ".join(circle) for circle in found)


@pytest.mark.parametrize("module, planted", [
    ("conformance.core.model", "from conformance.core.specload import load_spec"),  # specload imports model
    ("conformance.reference.klterm", "from conformance.reference.forward import expected_forward"),  # via pointwise
    ("conformance.core.model", "import conformance.core.model"),  # a module importing itself
    # what adapters/base.py's protocol is made of sits below it: a helper that reached back up would close a circle
    ("conformance.adapters.offer", "from conformance.adapters.base import Adapter"),
    ("conformance.adapters.reproducer", "from conformance.adapters.base import Adapter"),
])
def test_a_planted_circle_is_found(module, planted):
    sources = _sources()
    assert not circles(sources)
    sources[module] += "\n\ndef _planted():\n    " + planted + "\n"
    found = circles(sources)
    assert found and any(module in circle for circle in found)


MAX_LINES = 400  # the style guide's "past about 400 lines, split by responsibility"


def _sources_past(limit: int) -> list[str]:
    """The Python files of the house (the package's modules, the bench, the scripts, toxfile.py) longer than
    `limit` lines, but for generated ones (their docstring opens "Generated by"), which are data."""
    files = [*MODULES.values(), *sorted((ROOT / "bench").glob("*.py")), *sorted((ROOT / "scripts").glob("*.py")),
             ROOT / "toxfile.py"]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > limit and not (ast.get_docstring(ast.parse(text)) or "").startswith("Generated by"):
            found.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    return found


def test_no_file_is_past_the_length_the_style_guide_asks():
    found = _sources_past(MAX_LINES)
    assert not found, f"past {MAX_LINES} lines (split each by responsibility, where the split names a thing): " + \
        ", ".join(found)


def test_a_long_file_is_found():
    past = " ".join(_sources_past(1))
    assert "conformance/cli.py" in past and "bench/bench.py" in past and "toxfile.py" in past
    assert "reference/logexp_tables.py" not in past  # generated: data, not code


def frameworks() -> set[str]:
    """The top-level packages the registry's adapters import inside their functions, that is when they
    load: the frameworks and their backends (keras' tensorflow and jax, say)."""
    found = set()
    for name in {path.split(":")[0] for path in BUILTIN.values()}:
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            body = ast.Module(body=function.body, type_ignores=[])
            found |= {n.split(".")[0] for n, _ in _imports(ast.unparse(body))}
    return found - set(sys.stdlib_module_names) - {"conformance", "numpy"}


def test_the_frameworks_come_from_the_registry():
    found = frameworks()
    assert {"torch", "oneflow", "mindspore", "paddle", "mlx", "optax", "jax", "keras"} <= found


def test_no_framework_is_imported_at_module_level():
    names = frameworks()
    for module, path in MODULES.items():
        top = {n.split(".")[0] for n, _ in _imports(path.read_text(encoding="utf-8"), top_level_only=True)}
        assert not top & names, f"{module} imports {sorted(top & names)} at module level"
