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

from conformance.core.model import EAGER, Result, Spec
from conformance.core.results import write_atomic
from conformance.core.rundirs import REPRO_DIR, iter_rows, safe_file_name, script_name
from conformance.core.text import without_mentions
from conformance.report.markdown import repro_command

ISSUES_DIR = "issues"
MAX_SCRIPT_CHARS = 40_000  # a reproducer longer than this is given as its command: an issue body holds 65,536
MAX_TEXT_CHARS = 2_000  # of one message or spec excerpt
MAX_OTHERS = 40  # rows of other frameworks listed on the example's case
_DRAFT_NAME = re.compile(r"[A-Za-z0-9_=.-]+__[0-9a-f]{12}\.md")  # what safe_file_name gives, so ours to replace
_SPEC_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_URL = re.compile(r"https://[A-Za-z0-9./#_~%?=&+:-]+")


@dataclass
class _Cause:
    """One undocumented cause of one framework: its rows' spread and the row shown as its example."""

    framework: str
    cause: str
    rules: tuple[str, ...]
    example: Result
    script: tuple[str, str] | None  # (text, language) of the example's reproducer, where the run wrote one
    rows: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    versions: set[str] = field(default_factory=set)
    apis: set[str] = field(default_factory=set)
    parts: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    others: list[Result] = field(default_factory=list)


def write_drafts(out_dir: Path, run_dirs: Sequence[Path], manifests: Sequence[dict[str, Any]],
                 known: Any = None) -> list[Path]:
    """Write one draft per undocumented cause of each framework into `out_dir`/issues (drafts an earlier report
    left there are replaced); `known` (a known-findings file) marks the rows it accepts. Returns the files."""
    causes = _causes(iter_rows(run_dirs), run_dirs, known)
    targets = {(m.get("framework"), mode) for m in manifests for mode in (m.get("modes") or [EAGER])}
    if len(targets) > 1 and causes:  # other frameworks, or other modes of one (eager beside a compiled mode)
        wanted = {(c.example.case_id, c.example.part): c for c in causes.values()}
        for row in iter_rows(run_dirs):
            cause = wanted.get((row.case_id, row.part))
            if cause is not None and (row.framework, row.mode) != (cause.framework, cause.example.mode) \
                    and len(cause.others) < MAX_OTHERS:
                cause.others.append(row)
    spec = _spec_of(next(iter(causes.values())).example.spec_hash) if causes else None
    folder = out_dir / ISSUES_DIR
    if folder.is_dir():
        for old in folder.iterdir():
            if _DRAFT_NAME.fullmatch(old.name) and old.is_file() and not old.is_symlink():
                old.unlink()
    if not causes:
        return []
    folder.mkdir(exist_ok=True)
    written = []
    for key, cause in causes.items():
        path = folder / safe_file_name(key, ".md")
        write_atomic(path, render_draft(cause, _manifest_of(cause.example, manifests), spec))
        written.append(path)
    return written


def _causes(rows: Iterable[Result], run_dirs: Sequence[Path], known: Any) -> dict[tuple[str, ...], _Cause]:
    """The undocumented causes, keyed by (framework, mode, cause), and for `unexplained` also by verdict and the
    rules touched (unexplained is no one finding); the example is the first row with a reproducer on disk. A mode
    is a separate implementation (a compiled graph), so its causes are drafts of their own."""
    causes: dict[tuple[str, ...], _Cause] = {}
    run_dirs = [d for d in run_dirs if (d / REPRO_DIR).is_dir()]  # those with reproducers (a merge has none)
    for row in rows:
        row = known.mark(row) if known is not None else row
        if not row.verdict.is_divergence or row.is_accepted:
            continue
        rules = row.rules
        key = (row.framework, *([] if row.mode == EAGER else [row.mode]), row.cause) + \
            ((row.verdict.value, *rules) if row.cause == "unexplained" else ())
        cause = causes.get(key)
        if cause is None:
            cause = causes[key] = _Cause(row.framework, row.cause, rules, row, _script_of(row, run_dirs))
        elif cause.script is None and (script := _script_of(row, run_dirs)) is not None:
            cause.example, cause.script = row, script
        cause.rows += 1
        cause.verdicts[row.verdict.value] = cause.verdicts.get(row.verdict.value, 0) + 1
        cause.versions.add(row.framework_version)
        cause.apis.add(row.api)
        cause.parts.add(row.part)
        cause.dtypes.add(row.dtype)
    return causes


def _script_of(row: Result, run_dirs: Sequence[Path]) -> tuple[str, str] | None:
    """The reproducer a run wrote for `row` (a file inside a run directory, never one a link leads out to). A
    mode's script is named with the mode (eager's as before modes existed): an eager script never stands for a
    compiled mode's finding."""
    for run_dir in run_dirs:
        for suffix, language in ((".py", "python"), (".R", "r")):
            path = run_dir / REPRO_DIR / script_name(row.case_id, row.api, row.device, row.part, suffix, row.mode)
            try:
                if path.is_file() and run_dir.resolve() in path.resolve().parents:
                    text = path.read_text(encoding="utf-8", errors="replace")
                    return (text, language) if len(text) <= MAX_SCRIPT_CHARS else None
            except OSError:
                continue
    return None


def _spec_of(spec_hash: str) -> Spec | None:
    """The shipped spec, where it is the one the rows were judged by (a run directory names no file to read)."""
    from conformance.core.specload import load_spec

    try:
        spec = load_spec()
    except Exception:  # a spec that does not load here: the drafts then name the rule without its text
        return None
    return spec if spec.hash == spec_hash else None


def _manifest_of(row: Result, manifests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    matching = [m for m in manifests if m.get("framework") == row.framework] or \
        [m for m in manifests if m.get("framework_version") == row.framework_version]  # a "module:Class" adapter
    return next((m for m in matching if m.get("framework_version") == row.framework_version), matching[0]) \
        if matching else {}


def render_draft(cause: _Cause, manifest: dict[str, Any], spec: Spec | None) -> str:
    """The draft's Markdown text."""
    row = cause.example
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(cause.verdicts.items()))
    mode = "" if row.mode == EAGER else f" in mode {plain(row.mode)}"
    what = (f"{plain(row.verdict.value)}, unexplained, on {plain(row.api)}{mode} (touches {_listed(cause.rules)})"
            if cause.cause == "unexplained" else
            f"{plain(row.verdict.value)} under {plain(cause.cause)} on {plain(row.api)}{mode}")
    lines = [f"# {plain(row.framework)} {plain(row.framework_version)}: {what}", "",
             f"kl-conformance finds {cause.rows} results of {plain(row.framework)} that diverge from the kl\\_div "
             f"spec this way ({plain(verdicts)}), none documented by its profile. They span the versions "
             f"{_listed(cause.versions)}; the APIs "
             f"{_listed(cause.apis)}; the parts {_listed(cause.parts)}; the dtypes {_listed(cause.dtypes)}.", "",
             "## Environment", "",
             f"- framework: {plain(row.framework)} {plain(row.framework_version)}",
             f"- device: {plain(row.device)} ({plain(row.device_name)})",
             *([] if row.mode == EAGER else [f"- mode: {plain(row.mode)}"]),
             f"- Python: {plain(row.python_version)}, NumPy: {plain(row.numpy_version)}",
             f"- OS: {plain(manifest.get('platform') or 'not recorded')}",
             f"- kl-conformance {plain(row.harness_version)}, spec {plain(row.spec_hash)}", "",
             "## Minimal reproducer", "",
             f"Case {plain(row.case_id)}, {plain(row.api)} on {plain(row.device)}{mode}, part {plain(row.part)}, "
             f"dtype {plain(row.dtype)}, reduction {plain(row.reduction)}.", ""]
    if cause.script is not None:
        text, language = cause.script
        lines += ["The run's reproducer, minimised" + ("." if language == "r" else
                  "; run as python repro.py, it exits 1 while the divergence reproduces, 0 once the result conforms:"),
                  "", *fenced(text, language), ""]
    lines += ["Written by:", "", *fenced(repro_command(row, manifest), "sh"), "",
              "## Expected against actual", "", *fenced(_cut(row.message), "text"), ""]
    lines += _rules(cause, spec)
    if cause.others:
        modes = any(o.mode != EAGER for o in cause.others) or row.mode != EAGER
        lines += ["", "## Other frameworks" + (" and modes" if modes else "") + " on this case", "",
                  *(f"- {plain(o.framework)} {plain(o.framework_version)}, {plain(o.api)} on {plain(o.device)}"
                    + ("" if o.mode == EAGER else f" in mode {plain(o.mode)}") + ": "
                    f"{plain(o.verdict.value)}" + (f" ({plain(o.cause)})" if o.cause else "")
                    + (" (documented)" if o.documented else "") for o in cause.others)]
    return "\n".join(lines).rstrip() + "\n"


def _rules(cause: _Cause, spec: Spec | None) -> list[str]:
    """The spec's rule(s) the cause names (an unexplained one: the rules the case touches), each with its text,
    rationale and references as the spec states them."""
    named = [part.strip().split(" ")[0].split("=")[0] for part in cause.cause.split("+")]
    paths = [p for p in named if _SPEC_PATH.fullmatch(p)]
    if cause.cause == "unexplained" or not paths:
        paths = [p for p in cause.rules if _SPEC_PATH.fullmatch(p)]
        head = ("No single choice of the spec reproduces this result (cause: unexplained). The rules the case "
                "touches:" if cause.cause == "unexplained" else f"The cause named: {plain(cause.cause)}.")
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
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def plain(text: object) -> str:
    """Outside text as plain Markdown text on one line: every markup character escaped (no link, image, HTML,
    emphasis or autolink), and a zero-width joiner after each @ and #, so no mention or issue reference is live."""
    text = _CONTROL.sub("", _BREAKS.sub(" ", str(text)))
    return without_mentions(_PUNCTUATION.sub(r"\\\1", text))


def fenced(text: str, language: str = "") -> list[str]:
    """Text as a fenced code block whose fence is longer than any run of backticks inside it: the text
    cannot close it, and nothing in it is markup."""
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
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
