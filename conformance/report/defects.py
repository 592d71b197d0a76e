"""The defects of a report: each distinct behaviour once, gathered in one pass over the rows.

A run names each divergent or unsupported row's defect (core/defects.py); this module counts what each defect
spans (APIs, modes, parts, dtypes, verdicts), keeps its simplest row as the example a maintainer reads first,
and words its title from the spec's own text for the behaviour. Reads rows and the spec; never a framework.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from conformance.core.defects import (BESIDE_PROFILE, CHOSEN, NARROW_DTYPES, behaviours, cause_paths, error_size,
                                      raised, release_of, runtime_of, width, within_behaviour, within_text)
from conformance.core.errors import ConformanceError
from conformance.core.model import CLAIM, EAGER, UNEXPLAINED, Result, Spec, Verdict
from conformance.core.profilefile import deviation_bases
from conformance.core.upstream import UpstreamIssue, upstream_issues

UNDOCUMENTED, DOCUMENTED, KNOWN, UNSUPPORTED = "undocumented", "documented", "known", "unsupported"
STATUSES = (UNDOCUMENTED, KNOWN, DOCUMENTED, UNSUPPORTED)  # the order the reports list them in
_BEHAVES = re.compile(re.escape(CLAIM) + "(.+)$")
_EXPECTS_ERROR = "the spec expects "  # how a rule of the spec's errors opens (_rule_words): a title says it so
_AT = re.compile(r"; at input (\S+), target ([^;\s]+)")  # judge/compare.py: inputs_at
_STATED = re.compile(r"\(documented, (docs|maintainers|domain): [^()]*\)$")  # an unsupported row the profile states
_FAULT = re.compile(r"^fault (.+) \(breaks [A-Za-z0-9_.]+\)$")  # a fault pattern's words (judge/faults.py: Fault)
_SHAPE = re.compile(r"^\d+(x\d+)*(:\d+(x\d+)*)?")
_PART_WORDS = {"forward": "loss", "grad_input": "gradient with respect to input",
               "grad_target": "gradient with respect to target",
               "grad2_input": "double backward (the input gradient's derivative with respect to target)"}


@dataclass
class Defect:
    """One defect of a report: what its rows span, and its example (the simplest row)."""

    id: str
    framework: str
    release: str
    cause: str
    example: Result
    rows: int = 0
    undocumented: int = 0
    known: int = 0
    documented_by: tuple[str, ...] = ()
    verdicts: Counter = field(default_factory=Counter)
    apis: set[str] = field(default_factory=set)
    modes: set[str] = field(default_factory=set)
    parts: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    log_targets: set[bool] = field(default_factory=set)
    example_key: tuple = ()  # how simple the example is (add), kept beside it: each row is compared with it
    shared: int = 0  # rows a port shares with the recorded run of the framework it is judged like (--like-run)
    own: int = 0  # rows that are the port's own
    also: set[str] = field(default_factory=set)  # other behaviours some undocumented rows show beside this one
    within: int = 0  # unexplained rows whose answers lie only within rounding of this behaviour
    versions: set[str] = field(default_factory=set)  # the framework versions (release and runtime) it shows on
    # every version of its release the rows gave (its runtimes), one set shared by the release's defects
    # (Defects.add): a defect that shows on some of them says which
    framework_versions: set[str] = field(default_factory=set)

    @property
    def status(self) -> str:
        if not self.example.verdict.is_judged:
            return UNSUPPORTED
        if self.undocumented:
            return UNDOCUMENTED
        return DOCUMENTED if self.documented_by else KNOWN

    @property
    def like(self) -> str | None:
        """A port's defect with --like-run: `own` where any of its rows is the port's own, `shared` where every
        marked row is shared; None where its rows carry no mark."""
        return "own" if self.own else ("shared" if self.shared else None)

    def shown_on(self) -> str:
        """The runtimes of its release it shows on ("on jax 0.12.0.1, x64"), where that is some of those the rows
        gave; "" where it shows on each."""
        return "on " + self.runtimes() if self.versions < self.framework_versions else ""

    def runtimes(self) -> str:
        """The runtimes beneath its release it shows on, in words ("tensorflow 2.21.0 and torch 2.13.0+cpu")."""
        return " and ".join(sorted(runtime_of(v) for v in self.versions))

    def where(self) -> str:
        """Where it shows, in one line: the versions of its release (runtimes) where it shows on some only, APIs,
        modes beside eager, parts, dtypes, the behaviours some rows show beside it, and how many rows lie only
        within rounding of it (where others show it beyond)."""
        modes = sorted(self.modes - {EAGER})
        return "; ".join([*filter(None, [self.shown_on()]), ", ".join(sorted(self.apis)),
                          *([("eager and " if EAGER in self.modes else "") + "modes " + ", ".join(modes)]
                            if modes else []),
                          ", ".join(p for p in ("forward", "grad_input", "grad_target", "grad2_input")
                                    if p in self.parts), ", ".join(sorted(self.dtypes)),
                          *(["some rows also show " + ", ".join(sorted(self.also))] if self.also else []),
                          *([f"{self.within} of its {self.rows} rows lie only within rounding of it"]
                            if 0 < self.within < self.rows else [])])


class Defects:
    """Every defect of the rows given, by id, in one pass: memory grows with the defects, not the rows."""

    def __init__(self, rows: Iterable[Result] = ()) -> None:
        self.by_id: dict[str, Defect] = {}
        self._versions: dict[tuple[str, str], set[str]] = {}  # each release's versions (Defect.framework_versions)
        self._bases: dict[str, dict[str, str]] = {}
        self._upstream: dict[str, list[UpstreamIssue]] = {}
        for r in rows:
            self.add(r)

    def record_bases(self, manifests: Iterable[dict]) -> None:
        """The bases of each framework's profile entries as its runs recorded them (run.json's `deviation_bases`):
        a port's carried profile is not among the shipped ones `basis` reads otherwise."""
        for manifest in manifests:
            recorded = manifest.get("deviation_bases")
            for framework, bases in (recorded.items() if isinstance(recorded, dict) else ()):
                if isinstance(bases, dict):
                    self._bases.setdefault(str(framework), {}).update(
                        {str(k): str(v) for k, v in bases.items() if isinstance(v, str)})

    def basis(self, d: Defect) -> str | None:
        """Where the framework states an accepted defect: its profile entries' basis (docs, maintainers,
        domain), as its runs recorded them (record_bases), else read from the shipped profiles; None for an
        undocumented or known one."""
        if d.status == UNSUPPORTED:
            found = _STATED.search(d.example.message)
            return found.group(1) if found else None
        if d.status != DOCUMENTED:
            return None
        if d.framework not in self._bases:
            self._bases[d.framework] = deviation_bases(d.framework)
        bases = sorted({self._bases[d.framework].get(i) for i in d.documented_by} - {None})
        return ", ".join(bases) or None

    def upstream(self, d: Defect) -> UpstreamIssue | None:
        """The framework's upstream issue that reports this behaviour, where its profile lists one."""
        if d.framework not in self._upstream:
            try:
                self._upstream[d.framework] = upstream_issues(d.framework)
            except ConformanceError:  # a profile its schema refuses: the report names no issue rather than stop
                self._upstream[d.framework] = []
        return next((i for i in self._upstream[d.framework] for part in sorted(d.parts)
                     if i.covers(d.cause, part, d.modes)), None)

    def add(self, r: Result) -> None:
        release = (r.framework, release_of(r.framework_version))
        self._versions.setdefault(release, set()).add(r.framework_version)  # a pass's too
        if not r.defect or r.refused:  # a refused call's id, from a run of 0.14.2 or older: no behaviour shows
            return
        d = self.by_id.get(r.defect)
        if d is None:
            d = self.by_id[r.defect] = Defect(r.defect, r.framework, release_of(r.framework_version), r.cause, r,
                                              documented_by=r.documented_by,
                                              framework_versions=self._versions[release])
        d.versions.add(r.framework_version)
        d.rows += 1
        d.undocumented += r.verdict.is_divergence and not r.is_accepted
        d.known += bool(r.known_by) and not r.documented
        d.verdicts[r.verdict.value] += 1
        d.shared += r.like == "shared"
        d.own += r.like == "own"
        d.apis.add(r.api)
        d.modes.add(r.mode)
        d.parts.add(r.part)
        d.dtypes.add(r.dtype)
        d.log_targets.add(r.log_target)
        within = within_behaviour(r) is not None
        d.within += within
        shows = behaviours(r.cause) if r.cause and not r.documented_by and not within else ()
        d.also.update(shows[1:])
        # an example shows the defect's behaviour beyond rounding and alone where a row does (no other behaviour,
        # no rule of the call's signature beside it), and the defect's cause is its example's: the one an upstream
        # issue names
        key = (within, len(cause_paths(r.cause)) > 1 if shows else False, *simplicity(r))
        if not d.example_key or key < d.example_key:
            d.example, d.example_key, d.cause = r, key, r.cause

    def ordered(self, status: str | None = None) -> list[Defect]:
        """The defects (of one status), as the reports list them: by status, the most rows first."""
        found = [d for d in self.by_id.values() if status is None or d.status == status]
        return sorted(found, key=lambda d: (STATUSES.index(d.status), -d.rows, d.framework, d.id))

    def count(self, status: str) -> tuple[int, int]:
        """(defects, rows) of one status."""
        found = self.ordered(status)
        return len(found), sum(d.rows for d in found)


def simplicity(r: Result) -> tuple:
    """How hard a row is to read as an example, smallest first: an undocumented row before an accepted one, eager
    before a mode, a row that shows the defect alone before one that shows it beside what the profile states (a
    snippet shows the spec's answer only), the forward before a gradient, float32/float64 before a narrow or mixed
    dtype, an element shown inside the API's domain, reduction none, no legacy arguments, a contiguous layout, the
    smallest shape that holds an element (an empty one shows a reader of the snippet nothing), then the case id
    (one order in any merge) and a function before a module class. Read from the generated case id's pieces
    (cases/ids.py); a user case's id only orders by name."""
    pieces = r.case_id.split("/")
    generated = len(pieces) >= 6
    shape = pieces[3] if generated else ""
    dtype = pieces[4] if generated else r.dtype
    sizes = [int(n) for n in re.findall(r"\d+", _SHAPE.match(shape).group())] if _SHAPE.match(shape) else []
    elements = 1
    for n in sizes:
        elements *= n
    return (r.is_accepted, r.mode != EAGER, BESIDE_PROFILE in r.message, r.part != "forward",
            ":" in dtype or dtype in NARROW_DTYPES,
            _outside_domain(r), (pieces[1].split("(")[0] if generated else r.reduction) != "none",
            "(" in (pieces[1] if generated else ""), "." in shape, elements == 0, elements, r.case_id,
            _is_class(r.api), r.api)


def _outside_domain(r: Result) -> bool:
    """The element a row shows its divergence at (its message's "at input x, target t") lies outside the API's
    input domain: a NaN, an input of +inf (a log-probability is at most 0), a target of +inf or a negative or
    infinite probability. Such an example is chosen only where the defect shows nowhere else."""
    found = _AT.search(r.message)
    if not found:
        return False
    x, t = float(found.group(1)), float(found.group(2))
    if math.isnan(x) or math.isnan(t) or x == math.inf or t == math.inf:
        return True
    return not r.log_target and (t < 0 or math.isinf(t))


def _is_class(api: str) -> bool:
    """A module class (its last piece capitalised: KLDivLoss) comes after the function it calls (kl_div)."""
    last = api.rsplit(".", 1)[-1].rsplit("::", 1)[-1]
    return last[:1].isupper()


def title(d: Defect, spec: Spec | None) -> str:
    """A plain-words title: the implementation, the part, what it does (the spec's own words for the behaviour
    it shows) and where (the spec's `applies`)."""
    r = d.example
    function = r.api.rsplit(".", 1)[-1].rsplit("::", 1)[-1]
    # what every row shares: log_target=True only where no row has it false, the part where there is one
    head = f"{function}{'(log_target=True)' if d.log_targets == {True} else ''}" \
           + (f" {_PART_WORDS.get(r.part, r.part)}" if len(d.parts) <= 1 else "")
    if d.status == UNSUPPORTED:
        return f"{head}: not offered ({_first_clause(r.message)})"
    if r.verdict is Verdict.ERROR and r.message.startswith("error: returned a value"):  # judge/compare.py's words
        return f"{head}: returns a value where the spec expects an error ({r.message.partition('; ')[2][:200]})"
    if r.cause == UNEXPLAINED or not r.cause:
        found = raised(r.message) if r.verdict is Verdict.ERROR else None
        if found:
            kind, said = found
            return f"{head}: raises {kind}" + (f" ({said[:160]})" if said else "") + _on_example_runtime(d) \
                   + " where the spec expects a value (no spec choice reproduces it)"
        size = f", error {error_size(r.max_abs_err, r.bound)}" if r.verdict is Verdict.VALUE else ""
        near = within_text(r.message)  # where its answer lies
        return f"{head}: {r.verdict.words} ({width(r.dtype)} dtypes{size}; " \
               f"no spec choice reproduces it{f' beyond rounding; within rounding of {near}' if near else ''})"
    behaves = _BEHAVES.search(r.message)
    fault = _FAULT.match(behaves.group(1)) if behaves else None
    if fault:
        return f"{head}: {fault.group(1)}"
    said = [_choice_words(path, choice, spec) for path, choice in _chosen(r.message) if path in cause_paths(r.cause)]
    if said:
        return f"{head}: " + "; and ".join(said)
    rule = _rule_words(r.cause, spec)
    found = raised(r.message) if r.verdict is Verdict.ERROR else None
    if found and rule.startswith(_EXPECTS_ERROR):  # another exception than the one the spec names
        kind, said = found
        return f"{head}: raises {kind}" + (f" ({said[:160]})" if said else "") + _on_example_runtime(d) \
            + f" where {rule}"
    return f"{head}: {r.verdict.words} ({rule or r.cause})"


def _on_example_runtime(d: Defect) -> str:
    """The runtime of its example (" on tensorflow 2.21.0") where the defect shows on several runtimes of its
    release and its title quotes what that example raised (Keras's 0-d sum: TensorFlow's InvalidArgumentError,
    where torch returns a value)."""
    return f" on {runtime_of(d.example.framework_version)}" if len(d.versions) > 1 else ""


def expected_words(d: Defect, spec: Spec | None) -> str:
    """What the spec says instead, in its own words: the chosen text of each choice the cause names."""
    said = []
    for path in cause_paths(d.example.cause):
        node = _node(spec, path)
        if isinstance(node, dict) and isinstance(node.get("choices"), dict):
            said.append(f"{path} = {node.get('choice')}: {node['choices'].get(node.get('choice'))}")
    return "; ".join(said) or _rule_words(d.example.cause, spec)


def shown(row: Result) -> str:
    """What a defect's example shows, readable without another file: the call's parameters, then the row's own
    words (the element, got against expected, the input and target there) less the choices the title states."""
    said = _BEHAVES.sub("", row.message)
    return f"reduction={row.reduction}, log_target={row.log_target}, {row.dtype}: {said}"


def _chosen(message: str) -> list[tuple[str, str]]:
    """The alternatives a row's message says it behaves as ("...; behaves as a.b = x, c.d = y")."""
    found = _BEHAVES.search(message)
    return CHOSEN.findall(found.group(1)) if found else []


def _choice_words(path: str, choice: str, spec: Spec | None) -> str:
    """The spec's text for one alternative, with where it applies: "the term is NaN (where log_target is ...)"."""
    node = _node(spec, path)
    if not isinstance(node, dict) or not isinstance(node.get("choices"), dict):
        return f"{path} = {choice}"
    said = str(node["choices"].get(choice, choice))
    return f"{said} (where {node['applies']})" if node.get("applies") else said


def _rule_words(cause: str, spec: Spec | None) -> str:
    """A rule's own text where the cause names one: an error's `when`, a choice's current text."""
    if spec is None:
        return ""
    for path in cause_paths(cause):
        if path.startswith("errors."):
            row = next((e for e in spec.data.get("errors", ()) if e.get("id") == path.split(".", 1)[1]), None)
            if row is not None:
                return f"{_EXPECTS_ERROR}{row.get('exception')} when {row.get('when')}"
    return ""


def _node(spec: Spec | None, path: str) -> Any:
    node: Any = spec.data if spec is not None else None
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _first_clause(message: str) -> str:
    return message.split("; ")[0][:200]


@functools.lru_cache(maxsize=4)
def spec_of(spec_hash: str) -> Spec | None:
    """The shipped spec, where it is the one the rows were judged by (a run directory names no file to read); read
    once per hash, however many reports and drafts quote its words."""
    from conformance.core.specload import load_spec

    try:
        spec = load_spec()
    except Exception:  # a spec that does not load here: the reports then name the rule without its text
        return None
    return spec if spec.hash == spec_hash else None
