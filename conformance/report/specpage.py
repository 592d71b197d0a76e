"""The spec as a page of the documentation site, rendered from spec/kl_div.yaml when the site is built (by
docs/hooks.py), so the page cannot say anything the YAML does not.

Every section, key and value of the document is shown, in the document's order; the choice points are also
gathered in one table up front. Text from the YAML goes through `sitetext` and never becomes markup.
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.core.choices import choice_points, is_choice_node
from conformance.core.specload import load_spec
from conformance.report.sitetext import code, text

HEADER_KEYS = ("name", "title", "spec_version", "summary")  # shown in the page's title and first paragraph
# scalar values shown as code: expressions of the formula language, exception types, patterns and choice names
CODE_KEYS = {"formula", "gamma", "summation", "match", "exception", "choice", "default", "input_space", "part"}
CODE_PARENTS = {"terms", "formula", "sensitivity", "gradients", "log_target_false", "log_target_true"}
DEEPEST_HEADING = 4  # below this level, nested mappings are nested lists


def render_spec_page(data: Mapping[str, Any], source: str, spec_hash: str) -> str:
    """The page for one spec document: a title, how it was made, the choice points, then every section."""
    lines = [f"# The spec: {text(data.get('name', ''))}, version {text(data.get('spec_version', ''))}", "",
             f"**{text(data.get('title', ''))}.** {text(data.get('summary', ''))}", "",
             f"Rendered from {code(source)} (spec hash {code(spec_hash)}) when this site was built, by "
             f"`docs/hooks.py` through `conformance.report.specpage`: edit the YAML, not this page. How the harness "
             f"reads the spec is on [How the spec works](index.md).", ""]
    points = choice_points(data)
    lines += ["## Choice points", "",
              "Every place where the spec resolves a convention: the spec's choice, and the alternatives frameworks "
              "are known to take (each section below gives their meanings).", "",
              "| choice point | the spec's choice | alternatives |", "|---|---|---|"]
    for path in points:
        node = _get(data, path)
        others = [name for name in node["choices"] if name != node["choice"]]
        lines.append(f"| {text(path)} | {text(node['choice'])} | {', '.join(text(o) for o in others)} |")
    lines.append("")
    for key, value in data.items():
        if key in HEADER_KEYS:
            continue
        lines += _section((str(key),), value, 2)
    return "\n".join(lines).rstrip() + "\n"


def render_default_spec_page() -> str:
    """The page for the spec the harness loads by default, checked as `run` checks it."""
    spec = load_spec()
    return render_spec_page(spec.data, "spec/kl_div.yaml", spec.hash)


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return node


def _section(path: tuple[str, ...], value: Any, level: int) -> list[str]:
    """A heading for `path`, then its value: scalars as a list, mappings as deeper sections."""
    out = ["#" * level + " " + text(".".join(path)), ""]
    if is_choice_node(value):
        out += _choice(path, value)
    elif isinstance(value, Mapping):
        out += _mapping(path, value, level)
    else:
        out += _leaf_block(path, value)
    return out


def _choice(path: tuple[str, ...], node: Mapping[str, Any]) -> list[str]:
    out = [f"A choice point. The spec's choice: **{text(node['choice'])}**.", "",
           "| choice | meaning |", "|---|---|"]
    for name, meaning in node["choices"].items():
        mark = " (the spec's choice)" if name == node["choice"] else ""
        out.append(f"| {text(name)}{mark} | {_cell(meaning)} |")
    out.append("")
    rest = {k: v for k, v in node.items() if k not in ("choice", "choices")}
    return out + (_mapping(path, rest, DEEPEST_HEADING + 1) if rest else [])


def _mapping(path: tuple[str, ...], node: Mapping[str, Any], level: int) -> list[str]:
    scalars = {k: v for k, v in node.items() if not _nested(v)}
    nested = {k: v for k, v in node.items() if _nested(v)}
    out = [line for k, v in scalars.items() for line in _item((*path, str(k)), v, 0)]
    if scalars:
        out.append("")
    for key, value in nested.items():
        if level < DEEPEST_HEADING:
            out += _section((*path, str(key)), value, level + 1)
        else:
            out += _item((*path, str(key)), value, 0) + [""]
    return out


def _nested(value: Any) -> bool:
    return isinstance(value, Mapping) or (isinstance(value, list) and any(isinstance(v, Mapping) for v in value))


def _item(path: tuple[str, ...], value: Any, indent: int) -> list[str]:
    """One list item for a key, with a nested list for a mapping or a list of mappings."""
    pad = "    " * indent
    head = f"{pad}- **{text(path[-1])}**"
    if isinstance(value, Mapping):
        if is_choice_node(value):
            head += f": a choice point, the spec's choice **{text(value['choice'])}**"
        return [head] + [line for k, v in value.items() for line in _item((*path, str(k)), v, indent + 1)]
    if isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
        return [head] + [line for i, v in enumerate(value) for line in _item((*path, str(i + 1)), v, indent + 1)]
    return [f"{head}: {_scalar(path, value)}"]


def _leaf_block(path: tuple[str, ...], value: Any) -> list[str]:
    """A section whose value is not a mapping: a list of mappings as a table, anything else as one paragraph."""
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        columns: list[str] = []
        for item in value:
            columns += [str(k) for k in item if str(k) not in columns]
        out = ["| " + " | ".join(text(c) for c in columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(_cell(item.get(c, "")) for c in columns) + " |" for item in value]
        return out + [""]
    return [_scalar(path, value), ""]


def _scalar(path: tuple[str, ...], value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_scalar(path, v) for v in value) if value else "(none)"
    shown = _plain(value)
    as_code = path[-1] in CODE_KEYS or any(p in CODE_PARENTS for p in path[1:-1]) or (
        path[0] == "gradients" and len(path) == 3 and path[1].startswith("log_target_"))
    return code(shown) if as_code and not isinstance(value, Mapping) else text(shown)


def _cell(value: Any) -> str:
    """A value in a table cell: nested mappings and lists as `key: value` text, all of it escaped."""
    if isinstance(value, Mapping):
        return "; ".join(f"{text(k)}: {_cell(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return text(_plain(value))


def _plain(value: Any) -> str:
    """A YAML scalar as YAML writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

