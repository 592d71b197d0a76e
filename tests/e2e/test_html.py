"""report.html in a real browser: headless Chromium loads the page, runs its script, shows the matrix."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

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
