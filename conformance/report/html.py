"""Writes report.html: one self-contained file (styles, script and plots inline, no network).

The cross-framework matrix is coloured by verdict; filters narrow the matrix and the divergences by cause,
framework, api, device, mode (where a report holds more than eager), part, dtype, reduction, family, verdict,
documentation and, for a port judged with --like-run, shared or own. Divergences are grouped by cause, then
verdict; each expands to its inputs, expected and actual values in their shape, the elements that differ
highlighted, and its reproduction. Text from rows enters the page
escaped only, and a Content-Security-Policy lets no script run but the page's own (by its hash): markup that got
in would stay inert. Reads rows, manifests and details only; never a framework or the reference.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import defaultdict
from typing import Any, Iterable, Sequence

from conformance.core.model import EAGER, Result, Verdict
from conformance.core.details import detail_matcher
from conformance.report.defects import UNDOCUMENTED, title
from conformance.report.gaps import mode_gaps, refused_gaps, refused_line, release_gaps
from conformance.report.htmlvalues import array_html, differing, escape, readable, shape_text, worst_text
from conformance.report.plot import ratio_histogram_svg
from conformance.report.releases import KINDS, call_text, release_pairs, seen_text
from conformance.report.reprocommand import Runs, repro_command
from conformance.report.tally import LISTED_IN_PAGE, VERDICT_ORDER, Tally
from conformance.report.tally import split_label as _split
from conformance.report.tally import join_framework, target_label, where_label

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccd;padding:3px 6px;text-align:left}
th{background:#f2f4f8;position:sticky;top:0}.num{text-align:right}
td.pass{background:#d9f2dc}td.div{background:#f8c9c4}td.doc{background:#fbe7b5}td.na{background:#eceef1;color:#777}
.matrix th.rot{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;height:210px;vertical-align:bottom;text-align:left}
.filters label{display:inline-block;margin:0 10px 6px 0}
.legend span{padding:2px 8px;margin-right:6px;border:1px solid #ccd}
details{border:1px solid #dde;margin:4px 0;padding:4px 8px;border-radius:4px}
.cause-group>details{border-color:#b9c0cc;background:#fafbfc}.cause-group>details>summary{font-size:15px}
.verdict-group>details{background:#fff}
summary{cursor:pointer}code,pre{font:12px ui-monospace,monospace}pre{background:#f6f8fa;padding:6px;overflow:auto}
.v-pass{color:#1a7f37}.v-div{color:#b42318;font-weight:600}.doc-tag{color:#8a6100;font-weight:600}
.undoc{color:#b42318;font-weight:600}.worst{color:#444}.note{color:#666;font-size:12px}
table.arr{margin:2px 0 8px}table.arr th{position:static;color:#666;font-weight:normal}
table.arr td{font:12px ui-monospace,monospace;text-align:right}td.d{background:#f8c9c4;font-weight:700}
td.at{background:#fdecea}.slab{margin-left:12px}.arrays{display:flex;flex-wrap:wrap;gap:0 24px}
svg.plot{max-width:100%;height:auto;border:1px solid #ddd}[hidden]{display:none!important}
"""

# Filters hide what does not match (an element without the filter's data attribute matches any value); a group
# is hidden when none of its divergences is shown. Values are read from data attributes and written as text
# only: nothing from a row is ever parsed as markup here.
SCRIPT = """
(function(){
const selects=[...document.querySelectorAll('.filters select')];
function ok(el,sel){return sel.every(([k,v])=>!v||el.dataset[k]===undefined||el.dataset[k]===v);}
function applyFilters(){
  const sel=selects.map(s=>[s.dataset.key,s.value]);
  let shown=0;
  document.querySelectorAll('.divergence').forEach(d=>{d.hidden=!ok(d,sel);if(!d.hidden)shown++;});
  document.querySelectorAll('.group').forEach(g=>{
    const n=[...g.querySelectorAll('.divergence')].filter(d=>!d.hidden).length;
    g.hidden=n===0;
    const c=g.querySelector('.shown-n');if(c)c.textContent=String(n);
  });
  document.querySelectorAll('.matrix [data-framework], .matrix tr[data-family]').forEach(c=>c.hidden=!ok(c,sel));
  document.getElementById('shown').textContent=String(shown);
}
selects.forEach(s=>s.addEventListener('change',applyFilters));
applyFilters();
})();
"""

# Styles inline, the one script by its hash, no fetch of anything (no network, no other file).
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{}'; base-uri 'none'; "
       "form-action 'none'")

FILTER_KEYS = ("defect", "cause", "framework", "release", "api", "device", "mode", "part", "dtype", "reduction",
               "family", "verdict", "documented", "like")

UNMARKED = "unmarked"  # the `like` filter's value for a row that is no port's divergence judged with --like-run


def script_hash(script: str = SCRIPT) -> str:
    """The base64 SHA-256 of the page's script, as the Content-Security-Policy names it."""
    return base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_html(tally: Tally, manifests: Sequence[dict[str, Any]], details: Iterable[dict[str, Any]] = ()) -> str:
    """The whole report as one HTML page."""
    listed = tally.listed_in_page
    detail_by_key = {}
    wanted = {_key(r) for r in listed}
    match = detail_matcher(wanted)
    for d in details if wanted else ():
        key = match(d)
        if key is not None and key not in detail_by_key:
            detail_by_key[key] = d
            if len(detail_by_key) == len(wanted):  # the page lists the first divergences: the rest is not read
                break
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             f"<meta http-equiv='Content-Security-Policy' content=\"{CSP.format(script_hash())}\">",
             "<title>kl_div conformance report</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>kl_div conformance report</h1>"]
    parts += _defects(tally)
    parts += _provenance(manifests, tally)
    parts += _summary(tally)
    parts += _releases(tally)
    parts += _filters(tally)
    parts += _matrix(tally)
    parts += _plots(tally)
    parts += _divergences(listed, tally, manifests, detail_by_key)
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts)


def _defects(tally: Tally) -> list[str]:
    """What the page opens with: each defect once, undocumented first (its id is the rows' filter beneath)."""
    found = tally.defects.ordered()
    if not found:
        return ["<p>No divergences: every judged result is within the spec.</p>"]
    spec = tally.spec()
    n = len(tally.defects.ordered(UNDOCUMENTED))
    out = [f"<h2 id='defects'>{n} undocumented defect{'' if n == 1 else 's'}</h2>",
           "<table class='defects'><tr><th>status</th><th>defect</th><th>what it does</th><th>rows</th>"
           "<th>where it shows</th><th>example</th></tr>"]
    out += [f"<tr class='{escape(d.status)}'><td>{escape(d.status)}</td><td><code>{escape(d.id)}</code></td>"
            f"<td>{escape(title(d, spec))}</td><td>{d.rows}</td><td>{escape(d.where())}</td>"
            f"<td><code>{escape(d.example.case_id)}</code> {escape(d.example.api)} {escape(d.example.part)}</td></tr>"
            for d in found]
    return out + ["</table>"]


def _key(r: Result) -> tuple:
    return (*r.key, r.framework_version)  # details.DETAIL_KEYS' values, then the release


def _provenance(manifests, tally: Tally) -> list[str]:
    out = ["<table id='provenance'><tr><th>framework</th><th>version</th><th>status</th><th>cases</th>"
           "<th>seed</th><th>shard</th><th>python</th><th>numpy</th><th>spec</th><th>harness</th></tr>"]
    for m in manifests:
        status = m.get("status", "?") + (f": {m['reason']}" if m.get("reason") else "")
        out.append("<tr>" + "".join(f"<td>{escape(m.get(k, '-'))}</td>" for k in ("framework", "framework_version"))
                   + f"<td>{escape(status)}</td>"
                   + "".join(f"<td>{escape(m.get(k) if m.get(k) is not None else '-')}</td>"
                             for k in ("cases", "seed", "shard", "python_version", "numpy_version", "spec_hash",
                                       "harness_version")) + "</tr>")
    out.append(f"</table><p>{tally.total} results.</p>")
    gaps = mode_gaps(manifests) + release_gaps(manifests) + refused_gaps(tally.refused_by_framework,
                                                                         tally.refused_reason)
    if gaps:  # what was asked and not checked: a page without its rows must not read as a clean bill
        out.append("<ul id='not-run'>" + "".join(f"<li>{escape(_gap(g))}</li>" for g in gaps) + "</ul>")
    return out


def _gap(g) -> str:
    if g.what == "note":
        return f"Note: {g.framework}: {g.why}"
    if g.what == "refused":
        return refused_line(g)
    return f"Not run: {g.framework} {g.what} {g.name}: {g.why}"


def _summary(tally: Tally) -> list[str]:
    present = [v for v in VERDICT_ORDER if any(c[v] for c in tally.by_target.values())]
    out = ["<h2>Summary</h2><table id='summary'><tr><th>framework / api / device / part</th><th>results</th>"
           "<th>undocumented</th><th>documented</th><th>known</th>" + "".join(f"<th>{escape(v)}</th>" for v in present)
           + "</tr>"]
    for target in sorted(tally.by_target):
        c = tally.by_target[target]
        divergent = sum(n for v, n in c.items() if Verdict(v).is_divergence)
        new = tally.undocumented[target]
        known = tally.known[target]
        cls = "div" if new else ("doc" if divergent else "pass")
        out.append(f"<tr><td class='{cls}'>{escape(target)}</td><td class='num'>{sum(c.values())}</td>"
                   f"<td class='num'>{new}</td><td class='num'>{divergent - new - known}</td>"
                   f"<td class='num'>{known}</td>"
                   + "".join(f"<td class='num'>{c[v]}</td>" for v in present) + "</tr>")
    return out + ["</table>"]


def _releases(tally: Tally, listed: int = 20) -> list[str]:
    """What changed between each framework's consecutive releases (report/releases.py): the counts, and the first
    `listed` calls of each kind; nothing where the report holds one release per framework."""
    pairs = release_pairs(tally)
    if not pairs:
        return []
    out = ["<h2>Changed between releases</h2><p class='note'>Each release against the next newer one, call by call: "
           "new (passed, now diverges), fixed, changed (another verdict or cause), lost (no row or unsupported "
           "now); every call in divergences.md.</p>",
           "<table id='releases'><tr><th>framework</th><th>older</th><th>newer</th>"
           + "".join(f"<th>{k}</th>" for k in KINDS) + "<th>judged in newer only</th></tr>"]
    for p in pairs:
        counts = p.counts()
        out.append(f"<tr><td>{escape(p.framework)}</td><td>{escape(p.older)}</td><td>{escape(p.newer)}</td>"
                   + "".join(f"<td class='num'>{counts[k]}</td>" for k in KINDS)
                   + f"<td class='num'>{p.gained}</td></tr>")
    out.append("</table>")
    for p in pairs:
        for kind in KINDS:
            calls = p.calls[kind]
            if not calls:
                continue
            out.append(f"<details><summary>{escape(p.framework)} {escape(p.older)} to {escape(p.newer)}: {kind} "
                       f"({len(calls)})</summary><table><tr><th>case</th><th>call</th><th>{escape(p.older)}</th>"
                       f"<th>{escape(p.newer)}</th></tr>"
                       + "".join(f"<tr><td><code>{escape(c[0])}</code></td><td>{escape(call_text(c))}</td>"
                                 f"<td>{escape(seen_text(old))}</td><td>{escape(seen_text(now))}</td></tr>"
                                 for c, old, now in calls[:listed])
                       + "</table>" + (f"<p class='note'>and {len(calls) - listed} more</p>" if len(calls) > listed
                                       else "") + "</details>")
    return out


def _data(attrs: dict[str, str]) -> str:
    return " ".join(f"data-{k}='{escape(v)}'" for k, v in attrs.items())


def _short(target: str) -> str:
    """A column label that fits a rotated header: framework, the API's last name, device, mode (where not
    eager), part."""
    t = _split(target)
    mode = "" if t["mode"] == EAGER else f" {t['mode']}"
    return f"{join_framework(t)} {t['api'].rsplit('.', 1)[-1]} {t['device']}{mode} {t['part']}"


def _group_key(r: Result) -> tuple[str, str]:
    return (r.cause or "unknown", r.verdict.value)  # as the tally groups them


def _filters(tally: Tally) -> list[str]:
    values: dict[str, set] = defaultdict(set)
    for target in tally.by_target:
        for k, v in _split(target).items():
            values[k].add(v)
    for family, reduction, _ in tally.by_family:
        values["family"].add(family)
        values["reduction"].add(reduction)
    for r in tally.listed_in_page:
        values["cause"].add(_group_key(r)[0])
        values["defect"].add(r.defect)
        values["dtype"].add(r.dtype)
        values["like"].add(_like(r))
    values["verdict"] = {v for c in tally.by_target.values() for v, n in c.items() if n and Verdict(v).is_divergence}
    values["documented"] = {"documented", "known", "no"}
    out = ["<h2>Filters</h2><div class='filters'>"]
    for key in FILTER_KEYS:
        if key == "mode" and values[key] <= {EAGER}:  # an eager-only report reads as before modes existed
            continue
        if key == "release" and not values[key]:  # one release per framework: as before releases were compared
            continue
        if key == "like" and values[key] <= {UNMARKED}:  # no port judged with --like-run: nothing to choose
            continue
        options = "".join(f"<option value='{escape(v)}'>{escape(v)}</option>" for v in sorted(values[key]))
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
           + "".join(f"<th class='rot' title='{escape(t)}' {_data(_split(t))}>{escape(_short(t))}</th>" for t in targets)
           + "</tr>"]
    accepted_by_cell = tally.accepted_cells
    for key in sorted(tally.by_family):
        cells = []
        for target in targets:
            c = tally.by_family[key][target]
            judged = sum(n for v, n in c.items() if Verdict(v).is_judged)
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
        out.append(f"<tr {_data({'family': key[0], 'reduction': key[1]})}><td>{escape(key[0])}</td><td>{escape(key[1])}</td>"
                   f"<td>{escape(key[2])}</td>" + "".join(cells) + "</tr>")
    return out + ["</table>"]


def _plots(tally: Tally) -> list[str]:
    out = ["<h2>Error relative to the bound</h2>",
           "<p>log10(max |error| / bound) of every judged value, per framework and result dtype; "
           "right of 0 is outside the spec's bound; the bar at the far left is exact results.</p>"]
    svg = ratio_histogram_svg(tally.ratios)
    return out + [svg if svg is not None else "<p>(no judged values to plot)</p>"]


def _divergences(listed: list[Result], tally: Tally, manifests, details) -> list[str]:
    """The listed divergences in groups by cause (the largest undocumented first), each cause by verdict."""
    runs = Runs(manifests)
    total = sum(tally.group_sizes.values())
    by_group: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in listed:
        by_group[_group_key(r)].append(r)
    causes: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for key in by_group:
        causes[key[0]].append(key)
    out = [f"<h2>Divergences by cause</h2><p><span id='shown'>{len(listed)}</span> shown of {total}"
           + (f" (the first {LISTED_IN_PAGE} are in this page; all are in results.jsonl)" if total > len(listed) else "")
           + ".</p><div id='divergences'>"]

    def order(cause: str) -> tuple:
        rows = [r for key in causes[cause] for r in by_group[key]]
        return (-sum(not r.is_accepted for r in rows), -sum(tally.group_sizes[k] for k in causes[cause]), cause)

    for cause in sorted(causes, key=order):
        keys = sorted(causes[cause], key=lambda k: VERDICT_ORDER.index(k[1]))
        rows = [r for key in keys for r in by_group[key]]
        size = sum(tally.group_sizes[k] for k in keys)
        targets = sorted(set().union(*(tally.group_targets[k] for k in keys)))
        rules = sorted({rule for r in rows for rule in r.rules})  # what an `unexplained` touches
        out.append(f"<section class='group cause-group' {_data({'cause': cause})}><details><summary>"
                   f"cause <code>{escape(cause)}</code>: {size} divergence{'s' if size != 1 else ''}, "
                   f"{_acceptance(rows, size)}, <span class='shown-n'>{len(rows)}</span> shown"
                   f" &middot; {len(targets)} target{'s' if len(targets) != 1 else ''}: "
                   f"{escape('; '.join(targets))}"
                   + (f" &middot; rules touched: {escape(', '.join(rules))}" if rules else "") + "</summary>")
        for key in keys:
            group = by_group[key]
            n = tally.group_sizes[key]
            out.append(f"<div class='group verdict-group' {_data({'verdict': key[1]})}><details><summary>"
                       f"<span class='v-div'>{escape(key[1])}</span>: {n}, {_acceptance(group, n)}, "
                       f"<span class='shown-n'>{len(group)}</span> shown</summary>")
            out += [_divergence(r, runs, details.get(_key(r)), tally.released) for r in group]
            out.append("</details></div>")
        out.append("</details></section>")
    return out + ["</div>"]


def _acceptance(rows: list[Result], size: int) -> str:
    """How many of a group's rows are undocumented, documented and known (of those in the page, when the
    page lists only some of the group)."""
    undocumented = sum(not r.is_accepted for r in rows)
    documented = sum(r.documented for r in rows)
    known = sum(bool(r.known_by) and not r.documented for r in rows)
    text = (f"<span class='undoc'>{undocumented} undocumented</span>" if undocumented else "0 undocumented")
    text += f", {documented} documented" + (f", {known} known" if known else "")
    return text + (f" (of the {len(rows)} in this page)" if len(rows) < size else "")


def _divergence(r: Result, runs: Runs, detail: dict | None, released: frozenset[str] = frozenset()) -> str:
    accepted = "documented" if r.documented else ("known" if r.known_by else "no")
    attrs = {**_split(target_label(r, released)), "defect": r.defect, "cause": _group_key(r)[0],
             "verdict": r.verdict.value,
             "dtype": r.dtype, "reduction": r.reduction, "family": r.family, "documented": accepted, "like": _like(r)}
    doc = ((f" <span class='doc-tag'>documented: {escape(', '.join(r.documented_by))}</span>" if r.documented else "")
           + (f" <span class='doc-tag'>known: {escape(', '.join(r.known_by))}</span>" if r.known_by else ""))
    bad = differing(detail, r.bound) if detail else None
    body = [f"<p>{escape(r.message)}</p><p>cause: <code>{escape(r.cause)}</code></p>"]
    if r.rules:
        body.append(f"<p>rules the case touches: {', '.join(f'<code>{escape(x)}</code>' for x in r.rules)}</p>")
    body.append(f"<p>reproduce:</p><pre>{escape(repro_command(r, runs.of(r)))}</pre>")
    if detail:
        body.append(f"<p>params: <code>{escape(json.dumps(detail['params']))}</code>, dtype {escape(detail['dtype'])}, "
                    f"layout {escape(detail['layout'])}</p>")
        if bad is not None and bad.positions:
            body.append(f"<p class='note'>highlighted: the elements {escape(bad.how)}</p>")
        arrays = []
        for name in ("input", "target", "expected", "got"):
            a = detail.get(name)
            if a:
                marks = bad.positions if bad is not None and a.get("shape") == bad.shape else set()
                cls = "d" if name in ("expected", "got") else "at"  # short: a page holds many cells
                shape = shape_text(a["shape"]) if readable(a) else repr(a.get("shape"))
                arrays.append(f"<div><p>{name} {escape(shape)}:</p>{array_html(a, marks, cls)}</div>")
        if arrays:
            body.append("<div class='arrays'>" + "".join(arrays) + "</div>")
        for name in ("expected_error", "raised"):
            if detail.get(name):
                body.append(f"<p>{name}: <code>{escape(detail[name])}</code></p>")
    return (f"<div class='divergence' {_data(attrs)}><details><summary><code>{escape(r.case_id)}</code> "
            f"{escape(where_label(r, released) + ' ' + r.part)} <span class='v-div'>{escape(r.verdict.value)}</span>"
            f"{doc} <span class='worst'>{worst_text(r, detail, bad)}</span></summary>" + "".join(body) + "</details></div>")


def _like(r: Result) -> str:
    """A divergence's `like` filter value: shared or own (a port's, with --like-run), else UNMARKED."""
    return r.like or UNMARKED
