"""The layout page's module index, read from the package's own module docstrings when the site is built (by
docs/hooks.py), so the page names every module the package installs and cannot drift from the code.

Finds modules by walking the installed package and reads each one's docstring from its source (ast): nothing
it describes is imported beyond the packages' own `__init__`. Text from the docstrings goes through `sitetext`.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from pathlib import Path

from conformance.report.sitetext import code, text

# The wings in the order data flows through them; a package not named here is shown after them, never left out.
WING_ORDER = ("conformance.spec", "conformance.core", "conformance.reference", "conformance.cases",
              "conformance.adapters", "conformance.judge", "conformance.run", "conformance.report", "conformance")


class MissingDocstring(ValueError):
    """A module states nothing about itself: the layout page would have a hole."""


def _modules() -> dict[str, str | None]:
    """Module -> its source file, for the package and every package below it. The wings installed from folders
    of their own (pyproject.toml's package-dir) are walked from their own place, which an editable install
    does not put under the package's folder."""
    modules: dict[str, str | None] = {}
    for package in WING_ORDER:  # the package itself is the last of them
        spec = importlib.util.find_spec(package)
        modules[package] = spec.origin
        for info in pkgutil.walk_packages(spec.submodule_search_locations, prefix=f"{package}."):
            modules[info.name] = importlib.util.find_spec(info.name).origin
    return modules


def module_summaries(modules: dict[str, str | None] | None = None) -> dict[str, dict[str, str]]:
    """Package -> {module -> the first paragraph of its docstring}, for `modules` (module -> source file;
    default: every module of the installed package)."""
    found: dict[str, dict[str, str]] = {}
    for name, origin in sorted((_modules() if modules is None else modules).items()):
        if origin is None or not origin.endswith(".py"):
            continue  # a package of data files (conformance.spec.profiles): no code to describe
        source = Path(origin).read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(source))
        if not docstring:
            raise MissingDocstring(f"{origin}: module {name} has no docstring; start it with one line that says "
                                   f"what the module owns (the layout page lists it)")
        package = name if Path(origin).name == "__init__.py" else name.rpartition(".")[0]
        found.setdefault(package, {})[name] = " ".join(docstring.strip().split("\n\n")[0].split())
    return found


def render_module_index(modules: dict[str, str | None] | None = None) -> str:
    """The page's generated section: each package, then each of its modules with its docstring's first
    paragraph (for `modules`, as module_summaries takes them)."""
    summaries = module_summaries(modules)
    order = [p for p in WING_ORDER if p in summaries] + sorted(set(summaries) - set(WING_ORDER))
    lines = ["## Every module", "",
             "Generated from each module's docstring when this site was built (`docs/hooks.py`, through "
             "`conformance.report.layoutpage`): a module without a docstring fails the build.", ""]
    for package in order:
        lines += [f"### {code(package)}", ""]
        package_doc = summaries[package].get(package)
        if package_doc:
            lines += [text(package_doc), ""]
        for module in sorted(m for m in summaries[package] if m != package):
            lines.append(f"- {code(module)}: {text(summaries[package][module])}")
        lines.append("")
    return "\n".join(lines)
