"""The error-over-bound plot: an inline SVG whose step heights are the histogram of its input.

Expected counts come from numpy.histogram over the report's bins (half-decades from
-13 to 4, exact results floored at -12.9), or are written by hand; the SVG is parsed, not matched.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np

from conformance.core.manifest import write_manifest
from conformance.core.results import ResultsWriter
from conformance.report.html import render_html
from conformance.report.plot import ratio_histogram_svg
from conformance.report.tally import Tally
from conformance.report.writer import write_report
from tests.helpers import make_result

SVG = "{http://www.w3.org/2000/svg}"
EDGES = np.linspace(-13.0, 4.0, 35)  # half-decade bins of log10(|error| / bound)


def _ratios(seed=7):
    rng = np.random.default_rng(seed)
    return {("torch", "float32"): list(10 ** rng.normal(-1.0, 1.5, 400)),
            ("torch", "float64"): [1e-12] * 30 + list(10 ** rng.normal(-3.0, 1.0, 200)),
            ("oneflow", "float32"): list(10 ** rng.normal(0.5, 1.0, 900))}


def _expected_counts(values):
    counts, _ = np.histogram(np.maximum(np.log10(values), -12.9), bins=EDGES)
    return counts.tolist()


def _steps(svg: str) -> dict[tuple[str, str], ET.Element]:
    root = ET.fromstring(svg)
    return {(p.get("data-framework"), p.get("data-dtype")): p for p in root.iter(f"{SVG}path")
            if p.get("class") == "step"}


def _geometry(path: ET.Element):
    """The path's baseline, its bar tops (one per bin) and its right bin edges, in SVG units."""
    commands = re.findall(r"([MVH])([-\d.]+)(?:,([-\d.]+))?", path.get("d"))
    assert commands[0][0] == "M" and commands[-1][0] == "V", path.get("d")
    base = float(commands[0][2])
    assert float(commands[-1][1]) == base  # the outline closes on the baseline
    middle = commands[1:-1]
    tops = [float(v) for c, v, _ in middle if c == "V"]
    rights = [float(v) for c, v, _ in middle if c == "H"]
    return float(commands[0][1]), base, np.array(tops), np.array(rights)


def test_each_step_path_is_the_histogram_of_its_ratios():
    ratios = _ratios()
    steps = _steps(ratio_histogram_svg(ratios))
    assert set(steps) == set(ratios)
    for key, values in ratios.items():
        expected = _expected_counts(values)
        assert [int(c) for c in steps[key].get("data-counts").split()] == expected, key
        left, base, tops, rights = _geometry(steps[key])
        heights = base - tops
        assert len(heights) == len(expected) == len(rights)
        scale = heights.max() / max(expected)
        assert np.allclose(heights, np.array(expected) * scale, atol=0.11), key  # coordinates keep 0.1 px
        # the bin edges are an affine image of EDGES
        xs = np.concatenate([[left], rights])
        fit = np.polyfit(EDGES, xs, 1)
        assert fit[0] > 0 and np.allclose(np.polyval(fit, EDGES), xs, atol=0.11), key


def test_exact_and_tiny_ratios_land_in_the_left_bars_and_large_ones_right_of_zero():
    # by hand: log10(1e-12) = -12 -> bin [-12, -11.5), index 2; 1e-20 is floored to -12.9 -> index 0;
    # log10(10) = 1 -> bin [1, 1.5), index 28; log10(0.5) = -0.30 -> bin [-0.5, 0), index 25
    svg = ratio_histogram_svg({("torch", "float32"): [1e-12, 1e-12, 1e-20, 10.0, 0.5]})
    counts = [int(c) for c in _steps(svg)[("torch", "float32")].get("data-counts").split()]
    assert len(counts) == 34 and sum(counts) == 5
    assert {i: c for i, c in enumerate(counts) if c} == {0: 1, 2: 2, 25: 1, 28: 1}


def test_panels_share_one_y_scale_and_a_bound_line_at_zero():
    svg = ratio_histogram_svg(_ratios())
    root = ET.fromstring(svg)
    panels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
    assert [g.get("data-framework") for g in panels] == ["oneflow", "torch"]  # one per framework, sorted
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "title"]
    assert titles == ["oneflow", "torch"]
    scales = []
    for key, path in _steps(svg).items():
        _, base, tops, _ = _geometry(path)
        counts = np.array([int(c) for c in path.get("data-counts").split()])
        scales.append((base - tops).max() / counts.max())
    assert max(scales) - min(scales) < 0.01, scales  # the same count is the same height in every panel
    bounds = [line for line in root.iter(f"{SVG}line") if line.get("class") == "bound"]
    assert len(bounds) == 2 and all(b.get("stroke") == "#b42318" for b in bounds)
    for bound, panel in zip(bounds, panels):
        step = next(p for p in panel.iter(f"{SVG}path") if p.get("class") == "step")
        left, _, _, rights = _geometry(step)
        fit = np.polyfit(EDGES, np.concatenate([[left], rights]), 1)
        assert abs(float(bound.get("x1")) - np.polyval(fit, 0.0)) < 0.11  # x of log10(ratio) = 0
        assert bound.get("x1") == bound.get("x2")


def test_labels_legend_and_one_colour_per_dtype():
    svg = ratio_histogram_svg(_ratios())
    root = ET.fromstring(svg)
    texts = {t.get("class"): [] for t in root.iter(f"{SVG}text")}
    for t in root.iter(f"{SVG}text"):
        texts[t.get("class")].append(t.text)
    assert texts["xlabel"] == ["log10(|error| / bound)"] * 2
    assert texts["ylabel"] == ["results"]  # the y axis is shared: labelled once
    legends = [g for g in root.iter(f"{SVG}g") if g.get("class") == "legend"]
    assert [[t.text for t in g.iter(f"{SVG}text")] for g in legends] == [["float32"], ["float32", "float64"]]
    colour = {key: path.get("stroke") for key, path in _steps(svg).items()}
    assert colour[("oneflow", "float32")] == colour[("torch", "float32")]
    assert colour[("torch", "float32")] != colour[("torch", "float64")]
    assert "#b42318" not in colour.values()  # no dtype looks like the bound line


def test_nothing_to_draw_gives_none():
    assert ratio_histogram_svg({}) is None
    assert ratio_histogram_svg({("torch", "float32"): []}) is None
    assert ratio_histogram_svg({("torch", "float32"): [float("nan"), float("inf")]}) is None


def test_names_are_escaped():
    svg = ratio_histogram_svg({("a<b", "x&y"): [0.1, 1.0], ("torch", "float32"): [0.5]})
    assert "a<b" not in svg and "x&y" not in svg
    assert "a&lt;b" in svg and "x&amp;y" in svg
    root = ET.fromstring(svg)  # well-formed XML
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "title"] == ["a<b", "torch"]
    assert ("a<b", "x&y") in _steps(svg)


def test_same_input_same_bytes():
    ratios = _ratios()
    first = ratio_histogram_svg(ratios)
    assert ratio_histogram_svg(dict(reversed(list(ratios.items())))) == first
    assert ratio_histogram_svg(_ratios()) == first
    assert len(first.encode()) < 20_000  # small next to the page it sits in


def test_report_html_embeds_the_svg_the_rows_give(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    errors = [0.0, 1e-9, 3e-7, 2e-6, 5e-5]  # bound 1e-6 each
    with ResultsWriter(run) as writer:
        for i, err in enumerate(errors):
            writer.write(make_result(case_id=f"fwd/sum/log_target=0/4x6/float32/softmax/s{i}", max_abs_err=err,
                                     verdict="pass" if err <= 1e-6 else "value"))
        writer.write(make_result(case_id="fwd/sum/log_target=0/4x6/float32/softmax/s9", max_abs_err=None,
                                 bound=None))
    write_manifest(run, {"framework": "torch", "status": "complete", "seed": 1})
    (tmp_path / "out").mkdir()
    write_report(tmp_path / "out", [run])
    page = (tmp_path / "out" / "report.html").read_text()
    assert "data:image/png" not in page and page.count("<svg") == 1
    steps = _steps(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])
    # the tally clamps exact results to a ratio of 1e-12
    expected = _expected_counts([max(err / 1e-6, 1e-12) for err in errors])
    assert [int(c) for c in steps[("torch", "float32")].get("data-counts").split()] == expected


def test_report_html_says_when_there_is_nothing_to_plot():
    page = render_html(Tally([make_result(max_abs_err=None)]), [])
    assert "<svg" not in page and "(no judged values to plot)" in page


def test_report_html_reads_details_only_up_to_the_last_it_lists():
    """The page lists the first LISTED_IN_PAGE divergences, whose details come first in details.jsonl: the
    details of a large run past the last listed one are not read (the exhaustive suite writes 250k)."""
    from conformance.report.tally import LISTED_IN_PAGE

    rows = [make_result(case_id=f"fwd/sum/log_target=0/4x6/float32/softmax/s{i}", verdict="value", message=f"m{i}")
            for i in range(LISTED_IN_PAGE + 3)]
    read = []

    def details():
        for r in rows:
            read.append(r.case_id)
            yield {"case_id": r.case_id, "framework": r.framework, "api": r.api, "device": r.device, "mode": r.mode,
                   "part": r.part, "params": {}, "dtype": "float32", "layout": "contiguous",
                   "got": {"shape": [1], "values": [float(len(read))], "truncated": False}}

    page = render_html(Tally(rows), [], details())
    assert len(read) == LISTED_IN_PAGE
    assert f"{float(LISTED_IN_PAGE)}" in page and rows[-1].case_id not in page
    assert render_html(Tally([make_result()]), [], details()) and len(read) == LISTED_IN_PAGE  # nothing listed
