"""MkDocs hook: adds the spec's page, rendered from spec/kl_div.yaml at build time (conformance.report.specpage),
so the site's spec cannot drift from the YAML. Registered in mkdocs.yml under `hooks:`."""

from __future__ import annotations

from mkdocs.structure.files import File

from conformance.report.specpage import render_default_spec_page

SPEC_PAGE = "spec/kl_div.md"


def on_files(files, config):
    files.append(File.generated(config, SPEC_PAGE, content=render_default_spec_page()))
    return files
