"""Issue-ready drafts: one Markdown file per undocumented cause of each framework, under `issues/`.

Each draft is what a maintainer pastes into the framework's tracker: a title, the environment, the minimal
reproducer, expected against actual with the spec's rule (its text, rationale and references as the spec
states them), and how the other frameworks of a merged report behave on the same case.

Everything from outside (rows, manifests, scripts) is escaped for GitHub's Markdown: code in fences longer
than any run of backticks inside, other text with its markup characters escaped and no live @mention, so no
link, image, HTML or mention comes from a case's text. Reads only the core: rows, manifests, the spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import yaml

from conformance.core.known import KnownFindings
from conformance.core.model import EAGER, UNEXPLAINED, Result, Spec
from conformance.core.atomicfile import write_atomic
from conformance.core.rundirs import ISSUES_DIR, REPRO_DIR, iter_rows, script_name, snippet_name
from conformance.core.text import visible, without_mentions
from conformance.core.upstream import UpstreamIssue
from conformance.report.defects import UNDOCUMENTED, Defect, Defects, expected_words, spec_of, title
from conformance.report.reprocommand import Runs, repro_command

MAX_SCRIPT_CHARS = 40_000  # a reproducer longer than this is given as its command: an issue body holds 65,536
MAX_TEXT_CHARS = 2_000  # of one message or spec excerpt
MAX_OTHERS = 40  # rows of other frameworks listed on the example's case
# what draft_name gives (and what safe_file_name gave drafts before defects): ours to replace
_DRAFT_NAME = re.compile(r"[A-Za-z0-9_=.-]+__[0-9a-f]{12}\.md|[a-z][a-z0-9_-]{0,63}-[0-9a-f]{10}\.md")
_SPEC_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_URL = re.compile(r"https://[A-Za-z0-9./#_~%?=&+:-]+")


@dataclass
class _Draft:
    """One undocumented defect as its draft shows it: the defect, its example's reproducer and snippet where the
    run wrote them, and the other frameworks' and modes' rows on the example's case."""

    defect: Defect
    script: tuple[str, str] | None  # (text, language) of the example's reproducer
    snippet: str | None
    upstream: UpstreamIssue | None  # the framework's own issue about this behaviour, where its profile lists one
    others: list[Result] = field(default_factory=list)


def write_drafts(out_dir: Path, run_dirs: Sequence[Path], manifests: Sequence[dict[str, Any]],
                 known: KnownFindings | None = None, shared: bool = False, defects: Defects | None = None) -> list[Path]:
    """Write one draft per undocumented defect into `out_dir`/issues (drafts an earlier report left there are
    replaced); `known` (a known-findings file) marks the rows it accepts. A port's defect shared with the
    recorded run of the framework it is judged like (Defect.like, from --like-run) is that framework's to
    report: it has a draft only with `shared`. `defects`: the rows' defects where a report just gathered them
    from the rows as marked (a run's own report), so that no row is read again. Returns the files."""
    if defects is None:
        defects = Defects(known.mark(row) if known is not None else row for row in iter_rows(run_dirs))
    drafted = [d for d in defects.ordered(UNDOCUMENTED) if shared or d.like != "shared"]
    upstream = {d.id: defects.upstream(d) for d in drafted}
    with_scripts = [d for d in run_dirs if (d / REPRO_DIR).is_dir()]  # those with reproducers (a merge has none)
    drafts = {d.id: _Draft(d, _script_of(d.example, with_scripts), _snippet_of(d.id, with_scripts), upstream[d.id])
              for d in drafted}
    targets = {(m.get("framework"), mode) for m in manifests for mode in (m.get("modes") or [EAGER])}
    if len(targets) > 1 and drafts:  # other frameworks, or other modes of one (eager beside a compiled mode)
        wanted = {(d.defect.example.case_id, d.defect.example.part): d for d in drafts.values()}
        for row in iter_rows(run_dirs):
            draft = wanted.get((row.case_id, row.part))
            if draft is not None and (row.framework, row.mode) != (draft.defect.framework, draft.defect.example.mode) \
                    and len(draft.others) < MAX_OTHERS:
                draft.others.append(row)
    spec = spec_of(next(iter(drafts.values())).defect.example.spec_hash) if drafts else None
    runs = Runs(manifests)
    folder = out_dir / ISSUES_DIR
    if folder.is_dir():
        for old in folder.iterdir():
            if _DRAFT_NAME.fullmatch(old.name) and old.is_file() and not old.is_symlink():
                old.unlink()
    if not drafts:
        return []
    folder.mkdir(exist_ok=True)
    written = []
    for draft in drafts.values():
        path = folder / draft_name(draft.defect.id)
        write_atomic(path, render_draft(draft, runs.of(draft.defect.example), spec))
        written.append(path)
    return written


def draft_name(defect: str) -> str:
    """The file of a defect's draft in issues/."""
    return f"{defect}.md"


def _snippet_of(defect: str, run_dirs: Sequence[Path]) -> str | None:
    """The defect's snippet a run wrote beside its reproducers (rundirs.snippet_name)."""
    for run_dir in run_dirs:
        text = _reproducer_text(run_dir, snippet_name(defect))
        if text is not None:
            return text if len(text) <= MAX_SCRIPT_CHARS else None
    return None


def _script_of(row: Result, run_dirs: Sequence[Path]) -> tuple[str, str] | None:
    """The reproducer a run wrote for `row` (a file inside a run directory, never one a link leads out to). A
    mode's script is named with the mode (eager's as before modes existed): an eager script never stands for a
    compiled mode's finding."""
    for run_dir in run_dirs:
        for suffix, language in ((".py", "python"), (".R", "r")):
            text = _reproducer_text(run_dir, script_name(row.case_id, row.api, row.device, row.part, suffix, row.mode))
            if text is not None:
                return (text, language) if len(text) <= MAX_SCRIPT_CHARS else None
    return None


def _reproducer_text(run_dir: Path, name: str) -> str | None:
    """The text of the file `name` among a run's reproducers: a file inside the run directory, never one a link
    leads out to; None where there is none, or it cannot be read."""
    path = run_dir / REPRO_DIR / name
    try:
        if path.is_file() and run_dir.resolve() in path.resolve().parents:
            return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        pass
    return None


def render_draft(draft: _Draft, manifest: dict[str, Any], spec: Spec | None) -> str:
    """The draft's Markdown text: a plain title, the snippet, got against expected with the spec's own words,
    where else it shows, the environment; the full reproducer and the spec's rule last."""
    d, row = draft.defect, draft.defect.example
    mode = "" if row.mode == EAGER else f" in mode {plain(row.mode)}"
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(d.verdicts.items()))
    lines = [f"# {plain(title(d, spec))}", "",
             f"{plain(row.framework)} {plain(_versions(d))}: {d.rows} results of the kl\\_div conformance "
             f"suite show this ({plain(verdicts)}), none documented by the framework's profile.", "",
             *([f"Reported upstream: <{draft.upstream.url}> ({plain(draft.upstream.state)}"
                + (f" in {plain(draft.upstream.fixed_in)}" if draft.upstream.fixed_in else "")
                + f"): {plain(draft.upstream.title)}", ""] if draft.upstream is not None
               and _URL.fullmatch(draft.upstream.url) else []),
             "## Reproduce", ""]
    if draft.snippet is not None:
        lines += [*fenced(draft.snippet, "python"), ""]
    else:
        lines += ["Print the standalone reproducer with:", "", *fenced(repro_command(row, manifest), "sh"), ""]
    lines += ["## Got against expected", ""]
    if draft.snippet is not None:  # minimised, the snippet may hold one element and reduce it alone
        lines += [f"As the run judged the whole case {plain(row.case_id)} (the snippet above holds what of it still "
                  "shows this, and prints its own numbers):", ""]
    lines += [*fenced(_cut(row.message), "text"), ""]
    expected = expected_words(d, spec)
    if expected:
        lines += [f"The spec (spec/kl\\_div.yaml, {plain(row.cause)}) says instead: {plain(_cut(expected))}", ""]
    lines += ["## Where it shows", "",
              *([f"- versions: {_listed(d.versions)} (of {_listed(d.framework_versions)})"] if d.shown_on() else []),
              f"- APIs: {_listed(d.apis)}", f"- modes: {_listed(d.modes)}", f"- parts: {_listed(d.parts)}",
              f"- dtypes: {_listed(d.dtypes)}", f"- example: case {plain(row.case_id)}, {plain(row.api)} on "
              f"{plain(row.device)}{mode}, part {plain(row.part)}", f"- defect id: {plain(d.id)}", ""]
    if draft.others:
        modes = any(o.mode != EAGER for o in draft.others) or row.mode != EAGER
        lines += ["## Other frameworks" + (" and modes" if modes else "") + " on this case", "",
                  *(f"- {plain(o.framework)} {plain(o.framework_version)}, {plain(o.api)} on {plain(o.device)}"
                    + ("" if o.mode == EAGER else f" in mode {plain(o.mode)}") + ": "
                    f"{plain(o.verdict.value)}" + (f" ({plain(o.cause)})" if o.cause else "")
                    + (" (documented)" if o.documented else "") for o in draft.others), ""]
    lines += ["## Environment", "",
              f"- framework: {plain(row.framework)} {plain(row.framework_version)}",
              f"- device: {plain(row.device)} ({plain(row.device_name)})",
              *([] if row.mode == EAGER else [f"- mode: {plain(row.mode)}"]),
              # the harness's own where the framework is not a Python one (R torch): the script's language says
              (f"- Python: {plain(row.python_version)}, NumPy: {plain(row.numpy_version)}"
               if draft.script is None or draft.script[1] != "r"
               else f"- the harness that judged it: Python {plain(row.python_version)}, NumPy "
                    f"{plain(row.numpy_version)} (the reproducer needs neither)"),
              f"- OS: {plain(manifest.get('platform') or 'not recorded')}",
              f"- kl-conformance {plain(row.harness_version)}, spec {plain(row.spec_hash)}", "",
              "## The full reproducer", ""]
    if draft.script is not None:
        text, language = draft.script
        lines += ["The run's reproducer, minimised" + ("." if language == "r" else
                  "; run as python repro.py, it exits 1 while the divergence reproduces, 0 once the result conforms:"),
                  "", *fenced(text, language), ""]
    lines += ["Written by:", "", *fenced(repro_command(row, manifest), "sh"), ""]
    lines += _rules(d, spec)
    return "\n".join(lines).rstrip() + "\n"


def _versions(d: Defect) -> str:
    """The version a defect shows on, or its release and each runtime it shows on beneath it ("3.15.1 on
    jax 0.12.0.1, x64 and torch 2.13.0+cpu")."""
    return next(iter(d.versions)) if len(d.versions) == 1 else f"{d.release} on {d.runtimes()}"


def _rules(cause: Defect, spec: Spec | None) -> list[str]:
    """The spec's rule(s) the cause names (an unexplained one: the rules the case touches), each with its text,
    rationale and references as the spec states them."""
    named = [part.strip().split(" ")[0].split("=")[0] for part in cause.cause.split("+")]
    paths = [p for p in named if _SPEC_PATH.fullmatch(p)]
    if cause.cause == UNEXPLAINED or not paths:
        paths = [p for p in cause.example.rules if _SPEC_PATH.fullmatch(p)]
        head = ("No single choice of the spec reproduces this result (cause: unexplained). The rules the case "
                "touches:" if cause.cause == UNEXPLAINED else f"The cause named: {plain(cause.cause)}.")
    else:
        head = f"The spec's rule{'s' if len(paths) > 1 else ''} (spec/kl\\_div.yaml):"
    lines = [head, ""]
    if spec is None:
        return lines + [f"- {plain(p)}" for p in paths] + ["", "(The spec these rows were judged by is not the "
                                                               "shipped one: its text is not quoted here.)"]
    for path in paths:
        node, rationale, references = _spec_node(spec.data, path)
        if node is None and "." in path:  # a rule of both spaces (pointwise.formula): the row's log_target branch
            head, tail = path.rsplit(".", 1)
            branch = f"{head}.log_target_{str(cause.example.log_target).lower()}"
            for candidate in (f"{branch}.{tail}", branch):
                node, rationale, references = _spec_node(spec.data, candidate)
                if node is not None:
                    path = candidate
                    break
        lines += [f"### {plain(path)}", ""]
        if node is None:
            lines += ["(not a node of the spec)", ""]
            continue
        lines += [*fenced(_cut(yaml.safe_dump({path.rsplit('.', 1)[-1]: node}, sort_keys=False,
                                               allow_unicode=True, width=100)), "yaml"), ""]
        if rationale is not None:
            lines += [f"Rationale (of {plain(rationale[0])}): {plain(rationale[1])}", ""]
        for key in references:
            text = spec.data.get("references", {}).get(key, key)
            shown = f"<{text}>" if isinstance(text, str) and _URL.fullmatch(text) else plain(text)
            lines += [f"- reference {plain(key)}: {shown}"]
        if references:
            lines.append("")
    return lines


def _spec_node(data: Any, path: str) -> tuple[Any, tuple[str, str] | None, list[str]]:
    """The spec node at a dotted path (an error by its id), the nearest rationale on the way to it (where it
    is, what it says) and the references named on the way (the nearest first)."""
    node, walked = data, []
    rationale, references = None, []
    for name in path.split("."):
        if isinstance(node, list):
            node = next((item for item in node if isinstance(item, dict) and item.get("id") == name), None)
        elif isinstance(node, dict):
            node = node.get(name)
        else:
            node = None
        walked.append(name)
        if node is None:
            return None, None, []
        if isinstance(node, dict):
            if isinstance(node.get("rationale"), str):
                rationale = (".".join(walked), node["rationale"])
            if isinstance(node.get("reference"), str):
                references.insert(0, node["reference"])
    if rationale is not None and rationale[0] == path and isinstance(node, dict):
        rationale = None  # shown in the node's own text
    return node, rationale, list(dict.fromkeys(references))


# The characters that can start markup inside a line in GitHub's Markdown: emphasis, code, links and images,
# HTML and entities, tables, strikethrough, math ($), and the ":" of "https://" and the "." of "www." that
# would make an autolink. A backslash makes each literal (CommonMark escapes any ASCII punctuation).
_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()<>#.!|~&:$])")
_BREAKS = re.compile(r"[\r\n\u2028\u2029\x85\x0b\x0c]+")


def plain(text: object) -> str:
    """Outside text as plain Markdown text on one line: every markup character escaped (no link, image, HTML,
    emphasis or autolink), and a zero-width joiner after each @ and #, so no mention or issue reference is live."""
    text = visible(_BREAKS.sub(" ", str(text)))
    # and the slashes after a colon, so that no "://" is left for an autolink to start from
    return without_mentions(_PUNCTUATION.sub(r"\\\1", text).replace("\\://", "\\:\\/\\/"))


def fenced(text: str, language: str = "") -> list[str]:
    """Text as a fenced code block whose fence is longer than any run of backticks inside it: the text
    cannot close it, and nothing in it is markup."""
    text = visible(text.replace("\r\n", "\n").replace("\r", "\n"))
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return [fence + language, *text.rstrip("\n").split("\n"), fence]


def _listed(names: Iterable[str]) -> str:
    return ", ".join(plain(n) for n in sorted(names))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " ..."


def iter_drafts(out_dir: Path) -> Iterator[Path]:
    """The drafts a report wrote into `out_dir`."""
    folder = out_dir / ISSUES_DIR
    return iter(sorted(p for p in folder.iterdir() if _DRAFT_NAME.fullmatch(p.name))) if folder.is_dir() else iter(())
