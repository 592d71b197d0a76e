"""MkDocs hook: adds the spec's page, rendered from spec/kl_div.yaml at build time (conformance.report.specpage),
and the layout page's module index, read from the modules' docstrings (conformance.report.layoutpage), so
neither can drift from what it describes. Registered in mkdocs.yml under `hooks:`."""

from __future__ import annotations

from mkdocs.structure.files import File

from conformance.report.layoutpage import render_module_index
from conformance.report.specpage import render_default_spec_page

SPEC_PAGE = "spec/kl_div.md"
LAYOUT_PAGE = "layout.md"


def on_files(files, config):
    files.append(File.generated(config, SPEC_PAGE, content=render_default_spec_page()))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == LAYOUT_PAGE:
        return markdown.rstrip() + "\n\n" + render_module_index() + "\n"
    return markdown
