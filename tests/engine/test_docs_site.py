"""The documentation site: the README stays a front door, and the spec's page is rendered from the YAML, all of
it, with text from the YAML never becoming markup (docs/hooks.py renders it when the site is built)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from conformance.core.choices import choice_points
from conformance.core.specload import default_spec_path, load_spec
from conformance.report.sitetext import code, text
from conformance.report.specpage import HEADER_KEYS, render_spec_page

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert(1)</script> *em* _u_ [link](javascript:alert(1)) ![img](x.png) | cell & `tick` <b>bold</b>"


def _spec_data() -> dict:
    return yaml.safe_load(default_spec_path().read_text(encoding="utf-8"))


def _leaves(node, path=()):
    """Every scalar of a YAML document, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, str(i)))
    else:
        yield path, node


def _shown(value) -> set[str]:
    """The forms a scalar may take on the page: as escaped text or as a code span."""
    plain = "null" if value is None else ("true" if value is True else "false" if value is False else str(value))
    return {text(plain), code(plain)}


def test_the_readme_is_a_front_door_that_keeps_its_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    # the two commands CI and the tox labels rely on, exactly as they were
    assert "python3 -m pip install 'tox>=4.11' && tox -m conformance\n" in readme
    assert "python3 -m pip install 'tox>=4.11' && tox -m tests -p auto\n" in readme
    assert "tox -m tests -p auto" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_spec_page_shows_every_section_choice_point_and_value_of_the_yaml():
    spec = load_spec()
    data = _spec_data()
    page = render_spec_page(data, "spec/kl_div.yaml", spec.hash)
    headings = {line for line in page.splitlines() if line.startswith("## ")}
    for key in data:
        if key not in HEADER_KEYS:
            assert f"## {text(key)}" in headings, key
    table = page[page.index("## Choice points"):page.index("\n## ", page.index("## Choice points") + 3)]
    for point in choice_points(data):
        assert f"| {text(point)} |" in table, point
    missing = [(".".join(path), value) for path, value in _leaves(data)
               if not any(form in page for form in _shown(value))]
    assert not missing, missing[:5]
    # every alternative's name and meaning, and the key naming each (a meaning is a leaf; its name is not)
    node_names = [name for point in choice_points(data) for name in _get(data, point)["choices"]]
    assert all(text(name) in page for name in node_names)


def _get(data, path):
    for key in path.split("."):
        data = data[key]
    return data


def test_text_from_the_spec_never_becomes_markup_on_its_page():
    # MkDocs' Markdown: installed with mkdocs, which the docs environment holds (tox -e docs runs this file)
    markdown = pytest.importorskip("markdown")
    data = copy.deepcopy(_spec_data())
    data["summary"] = HOSTILE
    data["references"][HOSTILE] = HOSTILE
    data["pointwise"]["conventions"]["target_zero"]["rationale"] = HOSTILE
    data["pointwise"]["conventions"]["target_zero"]["choices"]["ieee"] = HOSTILE
    data["errors"][0]["when"] = HOSTILE
    data["dtypes"]["promotion"][0]["result"] = HOSTILE
    page = render_spec_page(data, "spec/kl_div.yaml", "0" * 16)
    html = markdown.markdown(page, extensions=["toc", "tables"])
    for tag in ("<script", "<em>", "<b>", "<img", 'href="javascript'):
        assert tag not in html, tag
    # shown as written in every place it went: the summary, a reference (key and value), a rationale, a
    # choice's meaning and two tables
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt; *em* _u_ [link](javascript:alert(1))") == 7
    # a bar in the text stays inside its cell: the errors table keeps its four columns
    row = next(line for line in html.split("<tr>") if "<td>unknown_reduction</td>" in line)
    assert row.count("<td>") == 4


def test_the_layout_page_lists_every_module_the_layering_test_finds():
    """The page's index comes from walking the installed package; the layering test walks the folders. A module
    the first walk misses (a new folder installed under another name) fails here."""
    from conformance.report.layoutpage import render_module_index
    from tests.engine.test_layering import MODULES

    page = render_module_index()
    missing = sorted(module for module in MODULES if code(module) not in page)
    assert not missing, f"modules the layout page does not list: {missing}"


def test_a_module_without_a_docstring_fails_the_layout_page_and_one_with_one_is_listed(tmp_path):
    from conformance.report.layoutpage import MissingDocstring, _modules, render_module_index

    silent = tmp_path / "silent.py"
    silent.write_text("VALUE = 1\n")
    with pytest.raises(MissingDocstring, match="conformance.core.silent has no docstring"):
        render_module_index({**_modules(), "conformance.core.silent": str(silent)})
    silent.write_text(f'"""{HOSTILE}\n\nMore that the page leaves out."""\nVALUE = 1\n')
    page = render_module_index({**_modules(), "conformance.core.silent": str(silent)})
    line = next(line for line in page.splitlines() if code("conformance.core.silent") in line)
    assert text(HOSTILE) in line and "<script>" not in line and "More that" not in line
