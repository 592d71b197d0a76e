"""Writes report.html: one self-contained file (styles, script and plots inline, no network).

The cross-framework matrix is coloured by verdict; filters narrow the matrix and the
divergence list by framework, api, device, part, verdict and documentation; each
divergence expands to its inputs, expected and actual values and its reproduction.
Reads rows, manifests and details only; never a framework or the reference.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from typing import Any, Iterable, Sequence

from conformance.core.model import Result, Verdict
from conformance.report.markdown import repro_command
from conformance.report.plot import ratio_histogram_svg
from conformance.report.tally import LISTED_IN_PAGE, VERDICT_ORDER, Tally
from conformance.report.tally import split_label as _split
from conformance.report.tally import target_label

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccd;padding:3px 6px;text-align:left}
th{background:#f2f4f8;position:sticky;top:0}.num{text-align:right}
td.pass{background:#d9f2dc}td.div{background:#f8c9c4}td.doc{background:#fbe7b5}td.na{background:#eceef1;color:#777}
.matrix th.rot{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;height:210px;vertical-align:bottom;text-align:left}
.filters select{margin-right:10px}.legend span{padding:2px 8px;margin-right:6px;border:1px solid #ccd}
details{border:1px solid #dde;margin:4px 0;padding:4px 8px;border-radius:4px}
summary{cursor:pointer}code,pre{font:12px ui-monospace,monospace}pre{background:#f6f8fa;padding:6px;overflow:auto}
.v-pass{color:#1a7f37}.v-div{color:#b42318;font-weight:600}.doc-tag{color:#8a6100;font-weight:600}
svg.plot{max-width:100%;height:auto;border:1px solid #ddd}
"""

SCRIPT = """
function applyFilters(){
  const sel={};document.querySelectorAll('.filters select').forEach(s=>sel[s.dataset.key]=s.value);
  const ok=el=>Object.entries(sel).every(([k,v])=>!v||el.dataset[k]===undefined||el.dataset[k]===v);
  document.querySelectorAll('.divergence').forEach(d=>d.style.display=ok(d)?'':'none');
  document.querySelectorAll('.matrix [data-framework]').forEach(c=>c.style.display=ok(c)?'':'none');
  const shown=[...document.querySelectorAll('.divergence')].filter(d=>d.style.display!=='none').length;
  document.getElementById('shown').textContent=shown;
}
document.querySelectorAll('.filters select').forEach(s=>s.addEventListener('change',applyFilters));
applyFilters();
"""


def render_html(tally: Tally, manifests: Sequence[dict[str, Any]], details: Iterable[dict[str, Any]] = ()) -> str:
    """The whole report as one HTML page."""
    listed = tally.listed_in_page
    detail_by_key = {}
    wanted = {_key(r) for r in listed}
    for d in details if wanted else ():
        key = (d["case_id"], d["framework"], d["api"], d["device"], d["part"])
        if key in wanted:
            detail_by_key[key] = d
            if len(detail_by_key) == len(wanted):  # the page lists the first divergences: the rest is not read
                break
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             "<title>kl_div conformance report</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>kl_div conformance report</h1>"]
    parts += _provenance(manifests, tally)
    parts += _summary(tally)
    parts += _filters(tally)
    parts += _matrix(tally)
    parts += _plots(tally)
    parts += _divergences(listed, tally, manifests, detail_by_key)
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts)


def _key(r: Result) -> tuple:
    return (r.case_id, r.framework, r.api, r.device, r.part)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _provenance(manifests, tally: Tally) -> list[str]:
    out = ["<table id='provenance'><tr><th>framework</th><th>version</th><th>status</th><th>cases</th>"
           "<th>seed</th><th>shard</th><th>python</th><th>numpy</th><th>spec</th><th>harness</th></tr>"]
    for m in manifests:
        status = m.get("status", "?") + (f": {m['reason']}" if m.get("reason") else "")
        out.append("<tr>" + "".join(f"<td>{_e(m.get(k, '-'))}</td>" for k in ("framework", "framework_version"))
                   + f"<td>{_e(status)}</td>"
                   + "".join(f"<td>{_e(m.get(k) if m.get(k) is not None else '-')}</td>"
                             for k in ("cases", "seed", "shard", "python_version", "numpy_version", "spec_hash",
                                       "harness_version")) + "</tr>")
    out.append(f"</table><p>{tally.total} results.</p>")
    return out


def _summary(tally: Tally) -> list[str]:
    present = [v for v in VERDICT_ORDER if any(c[v] for c in tally.by_target.values())]
    out = ["<h2>Summary</h2><table id='summary'><tr><th>framework / api / device / part</th><th>results</th>"
           "<th>undocumented</th><th>documented</th><th>known</th>" + "".join(f"<th>{_e(v)}</th>" for v in present)
           + "</tr>"]
    for target in sorted(tally.by_target):
        c = tally.by_target[target]
        divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
        new = tally.undocumented[target]
        known = tally.known[target]
        cls = "div" if new else ("doc" if divergent else "pass")
        out.append(f"<tr><td class='{cls}'>{_e(target)}</td><td class='num'>{sum(c.values())}</td>"
                   f"<td class='num'>{new}</td><td class='num'>{divergent - new - known}</td>"
                   f"<td class='num'>{known}</td>"
                   + "".join(f"<td class='num'>{c[v]}</td>" for v in present) + "</tr>")
    return out + ["</table>"]


def _data(attrs: dict[str, str]) -> str:
    return " ".join(f"data-{k}='{_e(v)}'" for k, v in attrs.items())


def _short(target: str) -> str:
    """A column label that fits a rotated header: framework, the API's last name, device, part."""
    t = _split(target)
    return f"{t['framework']} {t['api'].rsplit('.', 1)[-1]} {t['device']} {t['part']}"


def _filters(tally: Tally) -> list[str]:
    values: dict[str, set] = defaultdict(set)
    for target in tally.by_target:
        for k, v in _split(target).items():
            values[k].add(v)
    values["verdict"] = {v for c in tally.by_target.values() for v, n in c.items() if n and Verdict(v).is_divergence}
    values["documented"] = {"documented", "known", "no"}
    out = ["<h2>Filters</h2><div class='filters'>"]
    for key in ("framework", "api", "device", "part", "verdict", "documented"):
        options = "".join(f"<option value='{_e(v)}'>{_e(v)}</option>" for v in sorted(values[key]))
        out.append(f"<label>{key} <select data-key='{key}'><option value=''>all</option>{options}</select></label>")
    out.append("</div><p class='legend'><span class='pass' style='background:#d9f2dc'>all pass</span>"
               "<span style='background:#fbe7b5'>documented or known divergences only</span>"
               "<span style='background:#f8c9c4'>undocumented divergences</span>"
               "<span style='background:#eceef1'>n/a (unsupported)</span></p>")
    return out


def _matrix(tally: Tally) -> list[str]:
    targets = sorted(tally.by_target)
    out = ["<h2>Cross-framework matrix</h2>",
           "<p>Rows: value family x reduction x log_target. Cells: passes / results judged.</p>",
           "<table id='matrix' class='matrix'><tr><th>family</th><th>reduction</th><th>log_target</th>"
           + "".join(f"<th class='rot' title='{_e(t)}' {_data(_split(t))}>{_e(_short(t))}</th>" for t in targets)
           + "</tr>"]
    accepted_by_cell = tally.accepted_cells
    for key in sorted(tally.by_family):
        cells = []
        for target in targets:
            c = tally.by_family[key][target]
            judged = sum(c.values()) - c["unsupported"]
            divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
            undocumented = divergent - accepted_by_cell[(key, target)]
            if not sum(c.values()):
                cls, text = "na", ""
            elif not judged:
                cls, text = "na", "n/a"
            else:
                cls = "pass" if not divergent else ("div" if undocumented else "doc")
                text = f"{c['pass']}/{judged}"
            cells.append(f"<td class='{cls}' {_data(_split(target))}>{text}</td>")
        out.append(f"<tr><td>{_e(key[0])}</td><td>{_e(key[1])}</td><td>{_e(key[2])}</td>" + "".join(cells) + "</tr>")
    return out + ["</table>"]


def _plots(tally: Tally) -> list[str]:
    out = ["<h2>Error relative to the bound</h2>",
           "<p>log10(max |error| / bound) of every judged value, per framework and result dtype; "
           "right of 0 is outside the spec's bound; the bar at the far left is exact results.</p>"]
    svg = ratio_histogram_svg(tally.ratios)
    return out + [svg if svg is not None else "<p>(no judged values to plot)</p>"]


def _divergences(listed: list[Result], tally: Tally, manifests, details) -> list[str]:
    run_info = {m.get("framework"): m for m in manifests}
    total = sum(tally.group_sizes.values())
    out = [f"<h2>Divergences</h2><p><span id='shown'>{len(listed)}</span> shown of {total}"
           + (f" (the first {LISTED_IN_PAGE} are in this page; all are in results.jsonl)" if total > len(listed) else "")
           + ".</p><div id='divergences'>"]
    for r in listed:
        accepted = "documented" if r.documented else ("known" if r.known_by else "no")
        attrs = {**_split(target_label(r)), "verdict": r.verdict.value, "documented": accepted}
        doc = ((f" <span class='doc-tag'>documented: {_e(', '.join(r.documented_by))}</span>" if r.documented else "")
               + (f" <span class='doc-tag'>known: {_e(', '.join(r.known_by))}</span>" if r.known_by else ""))
        body = [f"<p>{_e(r.message)}</p><p>cause: <code>{_e(r.cause)}</code></p>",
                f"<p>reproduce:</p><pre>{_e(repro_command(r, run_info.get(r.framework, {})))}</pre>"]
        detail = details.get(_key(r))
        if detail:
            body.append(f"<p>params: <code>{_e(json.dumps(detail['params']))}</code>, dtype {_e(detail['dtype'])}, "
                        f"layout {_e(detail['layout'])}</p>")
            for name in ("input", "target", "expected", "got"):
                if detail.get(name):
                    a = detail[name]
                    more = " ..." if a["truncated"] else ""
                    body.append(f"<p>{name} {_e(tuple(a['shape']))}:</p><pre>{_e(a['values'])}{more}</pre>")
            for name in ("expected_error", "raised"):
                if detail.get(name):
                    body.append(f"<p>{name}: <code>{_e(detail[name])}</code></p>")
        out.append(f"<div class='divergence' {_data(attrs)}><details><summary><code>{_e(r.case_id)}</code> "
                   f"{_e(target_label(r))} <span class='v-div'>{_e(r.verdict.value)}</span>{doc}</summary>"
                   + "".join(body) + "</details></div>")
    return out + ["</div>"]
