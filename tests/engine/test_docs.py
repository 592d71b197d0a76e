"""The spec is normative only, and what it no longer holds lives in docs/frameworks/, where citations find it.

Observations of particular framework releases belong on docs/frameworks/<framework>.md; a new top-level
section in the spec has to be added to NORMATIVE below, which makes the choice a deliberate one.
The hand-written pages state behaviour, not the figures of a run, which age there: the counts are the generated
findings pages' (docs/findings/).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conformance.adapters.registry import BUILTIN
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


# Figures from a run age on a hand-written page: the generated findings pages (docs/findings/, written by
# `python -m conformance.report.findings`) are the record of the latest matrix run, each defect with its id and
# rows, and docs/performance.md is the bench's, each figure with its date, commit and machine. The other pages
# state behaviour and link those; a suite's size is what `kl-conformance cases --suite NAME --count` prints.
NUMBER = r"(?<![\w.^/-])(?:\d{1,3}(?:,\d{3})+|\d+)(?![\w]|[.,]\d)"
# spelled out too ("eighteen undocumented defects"), from three: "one" and "two" name designs and pairs
# ("one defect per API", "two `pinned` cases")
SPELLED = (r"\b(?:three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
           r"|seventeen|eighteen|nineteen|twenty)")
# a count of what a run holds: "576 rows", "13 undocumented defects", "93 `crash` rows", "5,076 results"; the
# words between the number and the noun are no function words, so "exits 1 while the finding reproduces" and
# "0 once the call conforms" are not counts
STOP = r"(?:a|an|the|and|or|of|on|in|at|to|for|per|from|by|as|is|are|was|with|when|where|while|once|than|then|if)"
COUNTED = re.compile(rf"(?:{NUMBER}|{SPELLED})(?:\s+(?!{STOP}\b)[\w`'-]+){{0,2}}?\s+"
                     r"(?:rows?|calls?|divergences?|cases?|defects?|results?|findings?|signatures?|parts?)\b"
                     # "10 of 300": but a verdict's message counts the elements of one call ("1 of 1 elements")
                     rf"|{NUMBER}\s+of\s+{NUMBER}(?!\s+elements?\b)", re.IGNORECASE)
# a limit the code sets is no figure from a run: "at most 10,000 cases", "its first 500 rows"
LIMIT = re.compile(r"(?:\bfirst|\bat most|\bup to|\bfewer than)\s*$", re.IGNORECASE)
# a table with a column of counts ("| defect | rows | ...")
COUNT_COLUMN = re.compile(r"\b(?:rows|calls|results|divergences)\b", re.IGNORECASE)
# (page, text): why it stays. Keep this short: each entry is a figure a reader is shown on purpose.
ALLOWED = {
    ("docs/guide/releases.md", "1101 calls"):
        "the 'Changed between releases' section of a report, quoted whole as the example of its form, its run "
        "named and dated in the prose above it",
}


def _generated_pages() -> set[str]:
    """The pages docs/hooks.py writes or completes at build time (read from its text: importing it needs mkdocs)."""
    hooks = (ROOT / "docs" / "hooks.py").read_text(encoding="utf-8")
    pages = {"docs/" + m for m in re.findall(r'^[A-Z_]+_PAGE = "([^"]+)"', hooks, re.MULTILINE)}
    assert "docs/layout.md" in pages and "docs/spec/kl_div.md" in pages, pages
    return pages


def hand_written_pages() -> list[Path]:
    skipped = _generated_pages() | {"docs/performance.md"}
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md"))
             if p.relative_to(ROOT).parts[:2] != ("docs", "findings") and p.relative_to(ROOT).as_posix() not in skipped]
    return pages + [ROOT / "README.md"]


def run_figures(text: str, page: str = "") -> list[tuple[int, str]]:
    """(line number, text) of each figure from a run that a hand-written page states. The page is read whole, so
    a count its lines wrap ("90 of the 718 default\ncases") is found too."""
    found = []
    for match in COUNTED.finditer(text):
        figure = " ".join(match.group(0).split())
        if not LIMIT.search(text[max(0, match.start() - 16):match.start()]) and (page, figure) not in ALLOWED:
            found.append((text.count("\n", 0, match.start()) + 1, figure))
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        below = lines[number] if number < len(lines) else ""
        if line.startswith("|") and re.fullmatch(r"\|[-:| ]+\|", below.strip()):
            found += [(number, f"a column of counts: {cell.strip()}") for cell in line.strip("|").split("|")
                      if COUNT_COLUMN.search(cell)]
    return sorted(found, key=lambda figure: figure[0])


def test_the_run_figures_detector_fires_on_counts_and_not_on_the_text_kept():
    planted = ("`kl-conformance run --framework torch` ends with 10 undocumented defects (576 rows), 93 `crash` rows;\n"
               "the default suite then held 718 cases, 5,076 results; 10 of 300 identical calls flushed it;\n"
               "NumPy drew 90 of the 718 default\ncases differently;\n"
               "the mode run ends with eighteen undocumented defects.\n"
               "| defect | rows | what torch does |\n|---|---:|---|\n| `dtypes.argument_terms` | 296 | ... |\n")
    assert [text for _, text in run_figures(planted)] == [
        "10 undocumented defects", "576 rows", "93 `crash` rows", "718 cases", "5,076 results", "10 of 300",
        "718 default cases", "eighteen undocumented defects", "a column of counts: rows"]
    clean = ("values outside the spec's rounding bound (error within 10^4 bounds), torch 2.13.0 and paddle 3.3.1,\n"
             "on a 2-core machine (2 cores), the 4x6 and 0-d cases, float16 cases; it exits 1 while the finding\n"
             "reproduces, 0 once the call conforms; at most 10,000 cases; a cause lists its first 500 rows;\n"
             "nonfinite: 1 of 1 elements differ; `kl-conformance cases --suite modes --count` prints its size.\n"
             "| defect | what torch does |\n|---|---|\n| `dtypes.argument_terms` | promotes |\n")
    assert run_figures(clean) == []


def test_hand_written_pages_state_no_figures_from_a_run():
    pages = hand_written_pages()
    assert ROOT / "docs" / "guide" / "modes.md" in pages and ROOT / "README.md" in pages
    assert not any(p.relative_to(ROOT).parts[:2] == ("docs", "findings") for p in pages)
    found = [f"{page.relative_to(ROOT)}:{number}: {text}" for page in pages
             for number, text in run_figures(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())]
    assert not found, ("a figure from a run on a hand-written page: state the behaviour, and link the generated "
                       "findings page (docs/findings/<framework>.md) for the counts of the latest matrix run",
                       found)
    # every exception still excuses something; one that no longer does is removed
    used = {(page.relative_to(ROOT).as_posix(), " ".join(m.group(0).split())) for page in pages
            for m in COUNTED.finditer(page.read_text(encoding="utf-8"))}
    assert set(ALLOWED) <= used, set(ALLOWED) - used


# a built-in framework's defect id (conformance/core/defects.py: "<framework>-<digest>")
DEFECT_ID = re.compile(rf"\b(?:{'|'.join(map(re.escape, BUILTIN))})-[0-9a-f]{{10}}\b")


def test_the_defects_hand_written_pages_name_are_on_the_findings_pages():
    """A defect id on a hand-written page (an audit, an example) is one the latest matrix run recorded: the
    findings pages are generated from that run, so an id they lack is a defect no run of this spec has."""
    recorded = {m.group(0) for page in (ROOT / "docs" / "findings").glob("*.md")
                for m in DEFECT_ID.finditer(page.read_text(encoding="utf-8"))}
    assert len(recorded) > 50  # the findings pages are there, and read
    stale = [f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for page in hand_written_pages() for text in [page.read_text(encoding="utf-8")]
             for m in DEFECT_ID.finditer(text) if m.group(0) not in recorded]
    assert not stale, ("a defect id no findings page records: name one of the latest run's (docs/findings/), or "
                       "regenerate the findings pages", stale)
