"""report.html in a real browser: headless Chromium loads the page, runs its script, shows the matrix; a probe page
works its filters and reads its highlighting, and no markup from a run (case ids, framework messages) runs."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.adapters import HOSTILE_MESSAGE

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("KL_REQUIRE_BROWSER") == "1":
            pytest.fail("KL_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH; .ci/run installs it (apt-get install chromium)")
    return path


def _run(chromium, tmp_path, *args):
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_html_is_self_contained(default_run):
    _, out = default_run
    page = (out / "report.html").read_text()
    assert "<table id='matrix'" in page and page.count('<svg class="plot" xmlns="http://www.w3.org/2000/svg"') == 1
    assert "data:image/png" not in page  # the plot is inline SVG, not a picture
    assert "http://" not in page.split("<div id='divergences'>")[0].replace("http://www.w3.org", "")
    assert "<script src" not in page and "<link " not in page  # nothing fetched


def test_chromium_renders_the_matrix_and_runs_the_filters(default_run, chromium, tmp_path):
    _, out = default_run
    url = (out / "report.html").resolve().as_uri()
    dom = _run(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-500:]
    html = dom.stdout
    assert '<table id="matrix" class="matrix">' in html
    assert html.count('class="divergence"') > 0
    assert 'id="shown">' in html  # the filter script ran and counted the visible divergences
    shot = tmp_path / "report.png"
    result = _run(chromium, tmp_path, "--window-size=1400,1800", f"--screenshot={shot}", url)
    assert result.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# A run with several causes and verdicts (a shape divergence's cause is never a value's), a NaN where a number is
# expected, and a hostile case id: the page's filters, highlighting and escaping are checked on what a real run
# writes, whatever causes the judge assigns.
HOSTILE_ID = "fault-</script><img src=x onerror=\"window.pwned=1\"><!--'q"
FAULT_CASES = f"""
- {{id: ok-case, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: none, dtype: float64}}
- {{id: fault-sum, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}
- {{id: fault-shape, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}
- {{id: fault-raise, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: sum, dtype: float64}}
- {{id: fault-zero-target, input: [[-1.0, -2.0, -0.5]], target: [[0.25, 0.75, 0.0]], reduction: none, dtype: float64}}
- {{id: fault-nan, input: [[-1.0, -2.0], [-0.5, -3.0]], target: [[0.25, 0.75], [0.5, 0.5]], reduction: none,
   dtype: float64}}
- {{id: {json.dumps(HOSTILE_ID)}, input: [[-1.0, -2.0]], target: [[0.25, 0.75]], reduction: mean, dtype: float64}}
"""

# Loads report.html in a frame (same origin under --allow-file-access-from-files), works its <select> as a
# reader would, and writes what it saw as JSON text: --dump-dom prints it.
PROBE = """<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="report.html" width="1200" height="800"></iframe><script>
document.getElementById('f').addEventListener('load', () => {
  const out = {};
  try {
    const w = document.getElementById('f').contentWindow, d = w.document;
    const visible = el => !el.closest('[hidden]');
    const row = id => [...d.querySelectorAll('.divergence')]
      .find(r => r.querySelector('summary code').textContent === id);
    const cells = (r, name) => {
      const p = [...r.querySelectorAll('p')].find(p => p.textContent.startsWith(name + ' ('));
      return [...p.parentElement.querySelectorAll('td')].map(c =>
        [c.textContent, c.classList.contains('d'), w.getComputedStyle(c).backgroundColor]);
    };
    out.pwned = w.pwned === undefined ? null : w.pwned;
    out.images = d.querySelectorAll('img').length;
    out.scripts = d.querySelectorAll('script').length;
    out.ids = [...d.querySelectorAll('.divergence summary code')].map(c => c.textContent);
    out.raisedText = row('fault-raise').textContent;
    out.causes = [...d.querySelector("select[data-key='cause']").options].map(o => o.value).filter(Boolean);
    out.rowCauses = out.ids.map(id => row(id).dataset.cause);
    const chosen = row('fault-sum').dataset.cause;
    const select = d.querySelector("select[data-key='cause']");
    select.value = chosen;
    select.dispatchEvent(new Event('change'));
    out.chosen = chosen;
    out.groupsShown = [...d.querySelectorAll('section.cause-group')].filter(visible).map(g => g.dataset.cause);
    out.rowsShown = [...d.querySelectorAll('.divergence')].filter(visible).map(r => r.dataset.cause);
    out.shown = d.getElementById('shown').textContent;
    select.value = '';
    select.dispatchEvent(new Event('change'));
    out.groupsAfterReset = [...d.querySelectorAll('section.cause-group')].filter(visible).length;
    out.nanGot = cells(row('fault-nan'), 'got');
    out.nanExpected = cells(row('fault-nan'), 'expected');
    out.sumGot = cells(row('fault-sum'), 'got');
  } catch (e) { out.error = String(e); }
  document.getElementById('result').textContent = JSON.stringify(out);
});
</script></body></html>"""


@pytest.fixture(scope="module")
def fault_report(tmp_path_factory):
    from conformance.cli import main

    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # the worker processes import tests.faults.adapters (as tests/faults/conftest.py does)
        sys.path.append(root)
    tmp = tmp_path_factory.mktemp("faults")
    cases = tmp / "cases.yaml"
    cases.write_text(FAULT_CASES)
    out = tmp / "run"
    assert main(["run", "--framework", "tests.faults.adapters:MixedFaultAdapter", "--cases", str(cases),
                 "--suite", "none", "--out", str(out), "--no-progress", "--no-repro"]) == 0
    return out


@pytest.fixture(scope="module")
def probed(fault_report, chromium, tmp_path_factory):
    """What the probe saw in report.html of the fault run."""
    (fault_report / "probe.html").write_text(PROBE)
    profile = tmp_path_factory.mktemp("chromium")
    dom = _run(chromium, profile, "--allow-file-access-from-files", "--virtual-time-budget=5000", "--dump-dom",
               (fault_report / "probe.html").resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-500:]
    found = re.search(r'<pre id="result">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-1000:]
    seen = json.loads(html.unescape(found.group(1)))
    assert "error" not in seen, seen
    return seen


def test_chromium_selecting_a_cause_leaves_only_its_group(probed):
    assert len(probed["causes"]) >= 2 and sorted(set(probed["rowCauses"])) == sorted(probed["causes"])
    assert probed["groupsShown"] == [probed["chosen"]]
    assert set(probed["rowsShown"]) == {probed["chosen"]}
    assert int(probed["shown"]) == probed["rowCauses"].count(probed["chosen"]) == len(probed["rowsShown"])
    assert probed["groupsAfterReset"] == len(probed["causes"])  # "all" shows every group again


def test_chromium_highlights_the_elements_that_differ(probed):
    # fault-nan is honest but for a NaN at its first element: that element alone is highlighted, on both sides
    got, expected = probed["nanGot"], probed["nanExpected"]
    assert len(got) == len(expected) == 4
    assert [c[1] for c in got] == [c[1] for c in expected] == [True, False, False, False]
    assert got[0][0] == "NaN" and expected[0][0] not in ("NaN", "nan") and all(c[0] != "nan" for c in got)
    assert got[0][2] != got[1][2]  # the highlight is drawn, not only a class
    assert [c[1] for c in probed["sumGot"]] == [True]  # off by one on a 0-d result


def test_chromium_runs_no_markup_from_a_hostile_case_id(probed):
    assert probed["pwned"] is None and probed["images"] == 0
    assert probed["scripts"] == 1  # the page's own
    assert HOSTILE_ID in probed["ids"]  # shown as the text it is
    assert HOSTILE_MESSAGE in probed["raisedText"]  # a framework's message too
