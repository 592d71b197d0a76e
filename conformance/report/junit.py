"""Writes junit.xml: one testcase per case x framework x api x device x part, so CI shows results natively.

An undocumented divergence is a failure (crash and timeout are errors); a documented
divergence and an unsupported case are skipped, with the reason. Reads rows only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Iterable

from conformance.model import Result, Verdict


_NOT_XML = re.compile(r"[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd]")


def _text(s: str) -> str:
    """Only characters XML 1.0 allows (a framework's message may carry terminal escapes)."""
    return _NOT_XML.sub("", s)


def render_junit(rows: Iterable[Result]) -> str:
    suites: dict[str, list[Result]] = defaultdict(list)
    for r in rows:
        suites[f"{r.framework}.{r.api}.{r.device}.{r.part}"].append(r)
    root = ET.Element("testsuites", name="kl-conformance")
    totals = defaultdict(int)
    for name in sorted(suites):
        members = suites[name]
        counts = defaultdict(int)
        suite = ET.SubElement(root, "testsuite", name=name)
        for r in members:
            case = ET.SubElement(suite, "testcase", classname=name, name=r.case_id, time=f"{r.elapsed_s:.6f}")
            if r.verdict in (Verdict.CRASH, Verdict.TIMEOUT):
                ET.SubElement(case, "error", type=r.verdict.value, message=_text(r.message[:500])).text = _text(r.message)
                counts["errors"] += 1
            elif r.verdict.is_divergence and not r.documented:
                ET.SubElement(case, "failure", type=r.verdict.value, message=_text(r.message[:500])).text = \
                    _text(f"{r.message}\ncause: {r.cause}")
                counts["failures"] += 1
            elif r.verdict.is_divergence:
                ET.SubElement(case, "skipped", message=f"documented deviation: {', '.join(r.documented_by)}")
                counts["skipped"] += 1
            elif r.verdict is Verdict.UNSUPPORTED:
                ET.SubElement(case, "skipped", message=_text(r.message[:500]))
                counts["skipped"] += 1
        suite.set("tests", str(len(members)))
        for key in ("failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
        totals["tests"] += len(members)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
