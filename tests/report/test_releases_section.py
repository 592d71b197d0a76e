"""report.md's "Changed between releases" on a large matrix of releases: it counts every kind exactly, shows what
fits, and keeps report.md inside an issue body; text from the rows (case ids, messages, causes, releases) stays in
its cell. The rows are made here, so each count follows from how they were made."""

from __future__ import annotations

import json
import re

from conformance.report.markdown import render_divergences, render_markdown
from conformance.report.mdbudget import REPORT_LIMIT
from conformance.report.summary import render_summary
from conformance.report.tally import Tally
from tests.helpers import make_result
from tests.report.test_markdown import assert_row_text_stays_in_cells

HOSTILE = "a|b`c``d\n| injected | row |\r<script>alert(1)</script> [x](javascript:alert(1)) *em* &amp;"
FRAMEWORKS = ("torch", "paddle", "optax", "mlx")
CALLS = 1000  # calls per framework in both releases; ANOTHER more in the newer release only
ANOTHER = 30
# by call number modulo 5, what the older and the newer release find (None: no row): pass -> pass, pass -> value
# (new), value -> pass (fixed), value -> error (changed), pass -> no row (lost)
PLAN = {0: ("pass", "pass"), 1: ("pass", "value"), 2: ("value", "pass"), 3: ("value", "error"), 4: ("pass", None)}


def _rows(older: str = "1.13.1", newer: str = "2.13.0"):
    rows = []
    for framework in FRAMEWORKS:
        for release, side in ((older, 0), (newer, 1)):
            for c in range(CALLS + (ANOTHER if side else 0)):
                verdict = PLAN[c % 5][side] if c < CALLS else "value"
                if verdict is None:
                    continue
                case_id = f"fwd/{c}/{HOSTILE if c % 50 == 1 else ''}" + "i" * (300 if c == 3 else 0)
                rows.append(make_result(case_id=case_id, framework=framework, framework_version=release,
                                        api=f"{framework}.kl_div", verdict=verdict,
                                        cause="" if verdict == "pass" else f"{HOSTILE} cause {verdict}",
                                        message="" if verdict == "pass" else HOSTILE * 20,
                                        max_abs_err=1.0 if verdict == "value" else 0.0))
    return rows


def test_the_section_counts_every_kind_and_report_md_stays_in_an_issue_body():
    tally = Tally(_rows(), released=frozenset(FRAMEWORKS))
    text = render_markdown(tally, [])
    assert len(text) < REPORT_LIMIT
    section = text.split("## Changed between releases")[1].split("\n## ")[0]
    per_kind = CALLS // 5  # each kind is one residue of the call number modulo 5
    for framework in FRAMEWORKS:
        assert f"### {framework}: 1.13.1 to 2.13.0" in section
    counts = re.findall(r"^(\d+) calls judged in both releases: (\d+) new, (\d+) fixed, (\d+) changed, (\d+) lost; "
                        r"(\d+) judged in 2\.13\.0 only\.$", section, re.M)
    # judged in both: the pass->pass, new, fixed and changed calls (four residues of five)
    assert counts == [(str(4 * per_kind), *[str(per_kind)] * 4, str(ANOTHER))] * len(FRAMEWORKS)
    assert_row_text_stays_in_cells(section)
    summary = json.loads(render_summary(tally, []))
    assert [(p["framework"], p["new"], p["fixed"], p["changed"], p["lost"], p["gained"]) for p in
            summary["releases"]] == [(f, per_kind, per_kind, per_kind, per_kind, ANOTHER) for f in sorted(FRAMEWORKS)]
    # divergences.md lists every call of each kind (up to 500 a kind)
    listed = render_divergences(tally, []).split("## Changed between releases")[1]
    assert len(re.findall(r"^\| `fwd/\d+/", listed, re.M)) + len(re.findall(r"^\| ``", listed, re.M)) \
        == 4 * len(FRAMEWORKS) * per_kind


def test_a_report_of_one_release_per_framework_has_no_such_section():
    rows = [r for r in _rows() if r.framework_version == "2.13.0"]
    assert "Changed between releases" not in render_markdown(Tally(rows), [])
    assert "releases" not in json.loads(render_summary(Tally(rows), []))


def test_releases_are_ordered_as_versions_with_or_without_packaging(monkeypatch):
    """1.9 before 1.10, a local or Debian suffix after its release, optax's version with its JAX in it by optax's
    release; the same order where packaging is not installed (then by the numbers in the text)."""
    from conformance.core.rundirs import release_order

    given = ["2.13.0+cpu", "1.10", "0.2.8 (jax 0.12.0.1, x64)", "1.9", "0.2.2 (jax 0.4.30, x64)", "1.13.1"]
    want = ["0.2.2 (jax 0.4.30, x64)", "0.2.8 (jax 0.12.0.1, x64)", "1.9", "1.10", "1.13.1", "2.13.0+cpu"]
    assert sorted(given, key=release_order) == want
    monkeypatch.setitem(__import__("sys").modules, "packaging.version", None)  # import fails: packaging absent
    assert sorted(given, key=release_order) == want


def test_versions_on_devices_of_their_own_are_not_releases_of_one_another():
    """Keras names its backend in its version and its device: the TensorFlow and JAX runs of one Keras are two
    backends, not two releases, and share no call, so their report names no release and compares nothing."""
    from conformance.core.rundirs import released

    def run(version, device):
        return {"framework": "keras", "framework_version": version, "status": "complete",
                "targets": [f"keras/keras.losses.KLDivergence/{device}", f"keras/keras.losses.kl_divergence/{device}"]}

    backends = [run("3.15.1 (tensorflow 2.21.0)", "tensorflow:cpu"), run("3.15.1 (jax 0.12.0.1)", "jax:cpu")]
    assert released(backends) == frozenset()
    assert released([*backends, run("3.14.0 (jax 0.12.0.1)", "jax:cpu")]) == {"keras"}  # two releases on jax
    assert released([run("1.13.1", "cpu") | {"framework": "torch"}, run("2.13.0", "cpu") | {"framework": "torch"}]) \
        == {"torch"}
